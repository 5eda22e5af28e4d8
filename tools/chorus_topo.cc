// chorus-topo: where the ranks of a communicator live and how Chorus connects them.
//   chorus-topo --comm [--dot]   run as every rank of a job (e.g. under chorusrun); rank 0
//                                prints the hosts, the transport and expected bandwidth between
//                                every pair of ranks, the ring and both trees (or Graphviz DOT)
// The ranks find each other like the perf tools: CHORUS_RANK / CHORUS_NRANKS (chorusrun) and
// the rendezvous CHORUS_COMM_ID / NCCL_COMM_ID.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bootstrap/bootstrap.h"
#include "core/comm.h"

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: chorus-topo --comm [--dot]\n"
          "  --comm   join a communicator as CHORUS_RANK of CHORUS_NRANKS (rendezvous at\n"
          "           CHORUS_COMM_ID/NCCL_COMM_ID) and print its topology on rank 0\n"
          "  --dot    Graphviz DOT instead of text\n"
          "example: chorusrun -n 4 chorus-topo --comm\n");
}

bool envInt(const char* name, int* out) {
  const char* s = getenv(name);
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 24) return false;
  *out = static_cast<int>(v);
  return true;
}

int runComm(bool dot) {
  int rank = 0, nranks = 0;
  if (!envInt("CHORUS_RANK", &rank) || !envInt("CHORUS_NRANKS", &nranks) || rank >= nranks) {
    fprintf(stderr,
            "chorus-topo: --comm needs CHORUS_RANK and CHORUS_NRANKS (rank < nranks), e.g. "
            "under chorusrun\n");
    return 2;
  }
  chorus::Result<chorus::UniqueIdInfo> id = chorus::uniqueIdFromEnvironment();
  if (!id.isOk()) {
    fprintf(stderr, "chorus-topo: %s\n", id.status().message().c_str());
    return 2;
  }
  chorus::CommOptions options;
  options.host = true;
  auto comm = chorus::Communicator::create(id.value(), nranks, rank, options);
  if (!comm.isOk()) {
    fprintf(stderr, "chorus-topo: rank %d: %s\n", rank, comm.status().message().c_str());
    return 1;
  }
  if (rank == 0) fputs(comm.value()->topologyReport(dot).c_str(), stdout);
  fflush(stdout);
  chorus::Status s = comm.value()->finalize();
  if (!s.isOk()) {
    fprintf(stderr, "chorus-topo: rank %d: %s\n", rank, s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool comm = false, dot = false;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--comm") == 0) {
      comm = true;
    } else if (strcmp(argv[i], "--dot") == 0) {
      dot = true;
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "chorus-topo: unknown option %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (!comm) {
    usage(stderr);
    return 2;
  }
  return runComm(dot);
}
