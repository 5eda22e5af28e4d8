// broadcast_perf: nccl-tests-compatible bandwidth and correctness test of ncclBroadcast.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

CollCounts broadcastCounts(size_t count, int) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// Every byte crosses each link of the chain once.
double broadcastBusFactor(int) {
  return 1.0;
}

ncclResult_t broadcastRun(const CallArgs& a) {
  return ncclBroadcast(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
}

Source broadcastSource(size_t recvIndex, int, int root, int, const CollCounts&) {
  return Source::copy(root, recvIndex);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "broadcast";
  coll.hasOp = false;
  coll.hasRoot = true;
  coll.counts = broadcastCounts;
  coll.busFactor = broadcastBusFactor;
  coll.run = broadcastRun;
  coll.source = broadcastSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
