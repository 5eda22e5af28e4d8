// all_gather_perf: nccl-tests-compatible bandwidth and correctness test of ncclAllGather.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

// The test size is the gathered output; each rank contributes 1/nranks of it.
CollCounts allGatherCounts(size_t count, int nranks) {
  CollCounts c;
  c.sendCount = count / nranks;
  c.recvCount = c.sendCount * nranks;
  c.paramCount = c.sendCount;
  c.sendInplaceOffset = c.sendCount;  // in place: rank r sends from its block of the output
  return c;
}

// Each rank receives the other n-1 blocks.
double allGatherBusFactor(int nranks) {
  return static_cast<double>(nranks - 1) / nranks;
}

ncclResult_t allGatherRun(const CallArgs& a) {
  return ncclAllGather(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream);
}

Source allGatherSource(size_t recvIndex, int, int, int, const CollCounts& c) {
  return Source::copy(static_cast<int>(recvIndex / c.sendCount), recvIndex % c.sendCount);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "all_gather";
  coll.hasOp = false;
  coll.hasRoot = false;
  coll.counts = allGatherCounts;
  coll.busFactor = allGatherBusFactor;
  coll.run = allGatherRun;
  coll.source = allGatherSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
