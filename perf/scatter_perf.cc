// scatter_perf: nccl-tests-compatible bandwidth and correctness test of ncclScatter.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

// The test size is the root's input; each rank receives 1/nranks of it.
CollCounts scatterCounts(size_t count, int nranks) {
  CollCounts c;
  c.recvCount = count / nranks;
  c.sendCount = c.recvCount * nranks;
  c.paramCount = c.recvCount;
  c.recvInplaceOffset = c.recvCount;  // in place: the root's output is its block of the input
  return c;
}

// The root sends n-1 of the n blocks.
double scatterBusFactor(int nranks) {
  return static_cast<double>(nranks - 1) / nranks;
}

ncclResult_t scatterRun(const CallArgs& a) {
  return ncclScatter(a.sendbuff, a.recvbuff, a.count, a.type, a.root, a.comm, a.stream);
}

// Rank r receives block r of the root's input.
Source scatterSource(size_t recvIndex, int rank, int root, int, const CollCounts& c) {
  return Source::copy(root, static_cast<size_t>(rank) * c.recvCount + recvIndex);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "scatter";
  coll.hasOp = false;
  coll.hasRoot = true;
  coll.counts = scatterCounts;
  coll.busFactor = scatterBusFactor;
  coll.run = scatterRun;
  coll.source = scatterSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
