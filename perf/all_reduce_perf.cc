// all_reduce_perf: nccl-tests-compatible bandwidth and correctness test of ncclAllReduce.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

CollCounts allReduceCounts(size_t count, int /*nranks*/) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;  // in place: send and receive are the same buffer at every rank
}

// Ring all-reduce moves 2(n-1)/n of the data over each rank's links.
double allReduceBusFactor(int nranks) {
  return 2.0 * (nranks - 1) / nranks;
}

ncclResult_t allReduceRun(const CallArgs& a) {
  return ncclAllReduce(a.sendbuff, a.recvbuff, a.count, a.type, a.op, a.comm, a.stream);
}

Source allReduceSource(size_t recvIndex, int, int, int, const CollCounts&) {
  return Source::reduce(recvIndex);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "all_reduce";
  coll.hasOp = true;
  coll.hasRoot = false;
  coll.counts = allReduceCounts;
  coll.busFactor = allReduceBusFactor;
  coll.run = allReduceRun;
  coll.source = allReduceSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
