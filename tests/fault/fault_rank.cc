// One rank of the fault suite (fault_suite.sh). Every rank makes the same pseudo-random
// sequence of collectives (FAULT_SEED), then an all-reduce, and checks each result exactly;
// the victim rank (FAULT_VICTIM) dies (SIGKILL) or stops (SIGSTOP) FAULT_DELAY_US microseconds
// after it starts call FAULT_AT, writing the time (CLOCK_MONOTONIC) to FAULT_OUT/victim first.
// Every other rank reports on one line of FAULT_OUT/rank<r>: the call that failed, how long after
// the victim's end its error came, whether the error names the victim, and the file descriptors and
// threads it holds after destroying its communicator against before creating it.
//
// Environment: CHORUS_RANK, CHORUS_NRANKS, CHORUS_COMM_ID (the rendezvous), FAULT_SEED,
// FAULT_CALLS, FAULT_VICTIM, FAULT_AT, FAULT_DELAY_US, FAULT_MODE (kill|stop), FAULT_OUT.
#include <dirent.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"
#include "tests/xorshift.h"

namespace {

long envLong(const char* name, long fallback) {
  const char* v = getenv(name);
  return v != nullptr && *v != '\0' ? strtol(v, nullptr, 10) : fallback;
}

int64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int countEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}
// Open descriptors (less the one the listing holds) and threads of this process.
int countFds() {
  return countEntries("/proc/self/fd") - 1;
}
int countThreads() {
  return countEntries("/proc/self/task");
}

using Rng = chorus_test::Xorshift;

// Element i of rank r's input of call k: small integers, so float sums are exact.
int32_t valueOf(int r, long k, size_t i) {
  return static_cast<int32_t>((r * 7 + k * 3 + static_cast<long>(i % 97)) % 100);
}

// Runs call k (its kind and size drawn from rng, the same on every rank; an all-reduce when
// allReduce); returns its result and sets *wrong when a result element differs from the
// reference.
ncclResult_t runCall(ncclComm_t comm, int rank, int nranks, long k, Rng& rng, bool allReduce,
                     bool* wrong) {
  const int drawn = static_cast<int>(rng.next() % 5);
  const int kind = allReduce ? 0 : drawn;
  const size_t count = 1 + static_cast<size_t>(rng.next() % (size_t(1) << (rng.next() % 19)));
  const int root = static_cast<int>(rng.next() % static_cast<uint64_t>(nranks));
  std::vector<int32_t> in(count), out(count * static_cast<size_t>(nranks));
  for (size_t i = 0; i < count; ++i) in[i] = valueOf(rank, k, i);
  ncclResult_t r = ncclSuccess;
  *wrong = false;
  switch (kind) {
    case 0: {
      r = ncclAllReduce(in.data(), out.data(), count, ncclInt32, ncclSum, comm, nullptr);
      for (size_t i = 0; r == ncclSuccess && i < count && !*wrong; ++i) {
        int64_t want = 0;
        for (int q = 0; q < nranks; ++q) want += valueOf(q, k, i);
        *wrong = out[i] != want;
      }
      break;
    }
    case 1:
      r = ncclAllGather(in.data(), out.data(), count, ncclInt32, comm, nullptr);
      for (size_t i = 0; r == ncclSuccess && i < out.size() && !*wrong; ++i)
        *wrong = out[i] != valueOf(static_cast<int>(i / count), k, i % count);
      break;
    case 2:
      r = ncclBroadcast(in.data(), out.data(), count, ncclInt32, root, comm, nullptr);
      for (size_t i = 0; r == ncclSuccess && i < count && !*wrong; ++i)
        *wrong = out[i] != valueOf(root, k, i);
      break;
    case 3: {
      std::vector<int32_t> big(count * static_cast<size_t>(nranks));
      for (size_t i = 0; i < big.size(); ++i) big[i] = valueOf(rank, k, i);
      r = ncclReduceScatter(big.data(), out.data(), count, ncclInt32, ncclSum, comm, nullptr);
      for (size_t i = 0; r == ncclSuccess && i < count && !*wrong; ++i) {
        int64_t want = 0;
        for (int q = 0; q < nranks; ++q)
          want += valueOf(q, k, static_cast<size_t>(rank) * count + i);
        *wrong = out[i] != want;
      }
      break;
    }
    default: {
      // A ring of sends and receives in one group.
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      ncclGroupStart();
      ncclSend(in.data(), count, ncclInt32, next, comm, nullptr);
      ncclRecv(out.data(), count, ncclInt32, prev, comm, nullptr);
      r = ncclGroupEnd();
      for (size_t i = 0; r == ncclSuccess && i < count && !*wrong; ++i)
        *wrong = out[i] != valueOf(prev, k, i);
      break;
    }
  }
  return r;
}

// True when text names rank v ("rank 3" not followed by another digit).
bool namesRank(const std::string& text, int v) {
  const std::string needle = "rank " + std::to_string(v);
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) {
    const size_t end = p + needle.size();
    if (end >= text.size() || text[end] < '0' || text[end] > '9') return true;
  }
  return false;
}

// The ranks text names, as "1,3" ("-" for none).
std::string namedRanks(const std::string& text, int nranks) {
  std::string list;
  for (int r = 0; r < nranks; ++r)
    if (namesRank(text, r)) list += (list.empty() ? "" : ",") + std::to_string(r);
  return list.empty() ? "-" : list;
}

}  // namespace

int main() {
  const int rank = static_cast<int>(envLong("CHORUS_RANK", -1));
  const int nranks = static_cast<int>(envLong("CHORUS_NRANKS", -1));
  const long calls = envLong("FAULT_CALLS", 100);
  const int victim = static_cast<int>(envLong("FAULT_VICTIM", -1));
  const long at = envLong("FAULT_AT", 1);
  const long delayUs = envLong("FAULT_DELAY_US", 0);
  const bool stop = getenv("FAULT_MODE") != nullptr && strcmp(getenv("FAULT_MODE"), "stop") == 0;
  const std::string out = getenv("FAULT_OUT") != nullptr ? getenv("FAULT_OUT") : ".";
  if (rank < 0 || nranks < 2) {
    fprintf(stderr, "fault_rank: CHORUS_RANK and CHORUS_NRANKS (>= 2) must be set\n");
    return 2;
  }
  const int fdsBefore = countFds();
  const int threadsBefore = countThreads();
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess ||
      ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) {
    fprintf(stderr, "fault_rank %d: init failed: %s\n", rank, ncclGetLastError(nullptr));
    return 3;
  }
  Rng rng{static_cast<uint64_t>(envLong("FAULT_SEED", 1)) * 2654435761u + 1};
  long failedAt = 0;
  int64_t failedNs = 0;
  ncclResult_t result = ncclSuccess;
  long wrongCalls = 0;
  // One call more than FAULT_CALLS, an all-reduce: the calls after the victim's end may not all
  // need it (a send that fits the buffers completes without its receiver), the last one does.
  for (long k = 1; k <= calls + 1; ++k) {
    if (rank == victim && k == at) {
      std::thread([=] {
        if (delayUs > 0) usleep(static_cast<useconds_t>(delayUs));
        std::ofstream(out + "/victim") << nowNs() << "\n";
        raise(stop ? SIGSTOP : SIGKILL);
      }).detach();
    }
    // The victim goes no further than the call after the one it dies in, so that its end
    // lands in the middle of the job however fast the calls are.
    while (rank == victim && k > at + 1) pause();
    bool wrong = false;
    result = runCall(comm, rank, nranks, k, rng, k == calls + 1, &wrong);
    if (result != ncclSuccess) {
      failedAt = k;
      failedNs = nowNs();
      break;
    }
    if (wrong) ++wrongCalls;
  }
  const std::string error = failedAt != 0 ? ncclGetLastError(comm) : "";
  ncclCommDestroy(comm);
  // The communicator's threads end with it; give any that is still unwinding a moment.
  int threadsAfter = countThreads();
  for (int i = 0; i < 50 && threadsAfter > threadsBefore; ++i) {
    usleep(10000);
    threadsAfter = countThreads();
  }
  const int fdsAfter = countFds();
  int64_t killNs = 0;
  std::ifstream(out + "/victim") >> killNs;
  std::ofstream f(out + "/rank" + std::to_string(rank));
  f << "rank " << rank << " failed_at " << failedAt << " result " << result << " detect_ms "
    << (failedAt != 0 && killNs != 0 ? (failedNs - killNs) / 1e6 : -1.0) << " names_victim "
    << (failedAt != 0 && namesRank(error, victim) ? 1 : 0) << " names " << namedRanks(error, nranks)
    << " wrong " << wrongCalls << " fds " << fdsBefore << " " << fdsAfter << " threads "
    << threadsBefore << " " << threadsAfter << "\nerror " << error << "\n";
  return 0;
}
