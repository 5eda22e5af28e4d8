// reduce_scatter_perf: nccl-tests-compatible bandwidth and correctness test of
// ncclReduceScatter.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

// The test size is each rank's input; each rank receives 1/nranks of the reduced result.
CollCounts reduceScatterCounts(size_t count, int nranks) {
  CollCounts c;
  c.recvCount = count / nranks;
  c.sendCount = c.recvCount * nranks;
  c.paramCount = c.recvCount;
  c.recvInplaceOffset = c.recvCount;  // in place: rank r's output is its block of the input
  return c;
}

// Each rank sends n-1 blocks, reduced on the way.
double reduceScatterBusFactor(int nranks) {
  return static_cast<double>(nranks - 1) / nranks;
}

ncclResult_t reduceScatterRun(const CallArgs& a) {
  return ncclReduceScatter(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm, a.stream);
}

Source reduceScatterSource(size_t recvIndex, int rank, int, int, const CollCounts& c) {
  return Source::reduce(static_cast<size_t>(rank) * c.recvCount + recvIndex);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "reduce_scatter";
  coll.hasOp = true;
  coll.hasRoot = false;
  coll.counts = reduceScatterCounts;
  coll.busFactor = reduceScatterBusFactor;
  coll.run = reduceScatterRun;
  coll.source = reduceScatterSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
