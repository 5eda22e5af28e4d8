// alltoall_perf: nccl-tests-compatible bandwidth and correctness test of ncclAlltoAll.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

// The test size is each rank's whole input: nranks blocks, one for every destination.
CollCounts alltoallCounts(size_t count, int nranks) {
  CollCounts c;
  c.paramCount = count / nranks;
  c.sendCount = c.recvCount = c.paramCount * nranks;
  return c;
}

// Each rank keeps one block and exchanges the other n-1.
double alltoallBusFactor(int nranks) {
  return static_cast<double>(nranks - 1) / nranks;
}

ncclResult_t alltoallRun(const CallArgs& a) {
  return ncclAlltoAll(a.sendbuff, a.recvbuff, a.count, a.type, a.comm, a.stream);
}

// Block p of rank r's output is block r of rank p's input.
Source alltoallSource(size_t recvIndex, int rank, int, int, const CollCounts& c) {
  size_t block = recvIndex / c.paramCount;
  return Source::copy(static_cast<int>(block),
                      static_cast<size_t>(rank) * c.paramCount + recvIndex % c.paramCount);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "alltoall";
  coll.hasOp = false;
  coll.hasRoot = false;
  coll.counts = alltoallCounts;
  coll.busFactor = alltoallBusFactor;
  coll.run = alltoallRun;
  coll.source = alltoallSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
