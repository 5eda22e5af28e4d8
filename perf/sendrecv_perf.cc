// sendrecv_perf: nccl-tests-compatible bandwidth and correctness test of ncclSend/ncclRecv:
// every rank sends to the next rank and receives from the previous one, in one group.
#include "common.h"

namespace {

using chorus::perf::CallArgs;
using chorus::perf::CollCounts;
using chorus::perf::Source;

CollCounts sendrecvCounts(size_t count, int) {
  CollCounts c;
  c.sendCount = c.recvCount = c.paramCount = count;
  return c;
}

// Each byte crosses one link.
double sendrecvBusFactor(int) {
  return 1.0;
}

ncclResult_t sendrecvRun(const CallArgs& a) {
  int next = (a.rank + 1) % a.nranks;
  int prev = (a.rank + a.nranks - 1) % a.nranks;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) return r;
  r = ncclSend(a.sendbuff, a.count, a.type, next, a.comm, a.stream);
  ncclResult_t r2 = ncclRecv(a.recvbuff, a.count, a.type, prev, a.comm, a.stream);
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess) return r;
  if (r2 != ncclSuccess) return r2;
  return end;
}

Source sendrecvSource(size_t recvIndex, int rank, int, int nranks, const CollCounts&) {
  return Source::copy((rank + nranks - 1) % nranks, recvIndex);
}

}  // namespace

int main(int argc, char** argv) {
  chorus::perf::Collective coll{};
  coll.name = "sendrecv";
  coll.hasOp = false;
  coll.hasRoot = false;
  coll.counts = sendrecvCounts;
  coll.busFactor = sendrecvBusFactor;
  coll.run = sendrecvRun;
  coll.source = sendrecvSource;
  return chorus::perf::perfMain(argc, argv, coll);
}
