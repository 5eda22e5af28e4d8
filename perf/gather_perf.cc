// gather_perf: nccl-tests-compatible bandwidth and correctness test of ncclGather.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

// The test size is the root's gathered output; each rank contributes 1/nranks of it.
CollCounts gatherCounts(size_t count, int nranks) {
  CollCounts c;
  c.sendCount = count / nranks;
  c.recvCount = c.sendCount * nranks;
  c.paramCount = c.sendCount;
  c.sendInplaceOffset = c.sendCount;  // in place: the root sends from its block of the output
  return c;
}

// The root receives n-1 of the n blocks.
double gatherBusFactor(int nranks) {
  return static_cast<double>(nranks - 1) / nranks;
}

ncclResult_t gatherRun(const CallArgs& a) {
  return ncclGather(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
}

// Only the root's output is defined: block r is rank r's input.
Source gatherSource(size_t recvIndex, int rank, int root, int, const CollCounts& c) {
  if (rank != root) return Source::unchecked();
  return Source::copy(static_cast<int>(recvIndex / c.sendCount), recvIndex % c.sendCount);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "gather";
  coll.hasOp = false;
  coll.hasRoot = true;
  coll.counts = gatherCounts;
  coll.busFactor = gatherBusFactor;
  coll.run = gatherRun;
  coll.source = gatherSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
