// reduce_perf: nccl-tests-compatible bandwidth and correctness test of ncclReduce.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

CollCounts reduceCounts(size_t count, int) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// Every byte crosses each link of the chain once.
double reduceBusFactor(int) {
  return 1.0;
}

ncclResult_t reduceRun(const CallArgs& a) {
  return ncclReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.root, a.comm, a.stream);
}

// Only the root's output is defined.
Source reduceSource(size_t recvIndex, int rank, int root, int, const CollCounts&) {
  return rank == root ? Source::reduce(recvIndex) : Source::unchecked();
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "reduce";
  coll.hasOp = true;
  coll.hasRoot = true;
  coll.counts = reduceCounts;
  coll.busFactor = reduceBusFactor;
  coll.run = reduceRun;
  coll.source = reduceSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
