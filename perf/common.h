// Harness shared by the nccl-tests-compatible bandwidth tools (all_reduce_perf, ...).
// A tool describes its collective in a Collective and hands it to perfMain, which owns the
// command line, rank discovery, timing, validation and the nccl-tests output format.
#ifndef CHORUS_PERF_COMMON_H_
#define CHORUS_PERF_COMMON_H_

#include <cstddef>

#include "nccl.h"

namespace chorus::perf {

// Element counts of one call, derived from a test size of `count` elements of the data type.
struct CollCounts {
  size_t sendCount = 0;   // elements read from each rank's send buffer
  size_t recvCount = 0;   // elements written to each rank's receive buffer
  size_t paramCount = 0;  // the count argument passed to the NCCL call
  // In-place calls use one buffer: send = buf + sendInplaceOffset * rank and
  // recv = buf + recvInplaceOffset * rank (elements).
  size_t sendInplaceOffset = 0;
  size_t recvInplaceOffset = 0;
};

// Where the expected value of one receive-buffer element comes from.
struct Source {
  enum Kind {
    kUnchecked,  // the collective leaves this element undefined (e.g. reduce on a non-root rank)
    kReduce,     // op over every rank's send element `index`
    kCopy,       // send element `index` of rank `rank`
  };
  Kind kind = kUnchecked;
  int rank = 0;
  size_t index = 0;

  static Source unchecked() { return {}; }
  static Source reduce(size_t index) { return {kReduce, 0, index}; }
  static Source copy(int rank, size_t index) { return {kCopy, rank, index}; }
};

// Everything one call of the collective needs.
struct CallArgs {
  const void* sendbuff;
  void* recvbuff;
  size_t count;  // CollCounts::paramCount
  ncclDataType_t type;
  ncclRedOp_t op;  // meaningful when Collective::hasOp
  int root;        // meaningful when Collective::hasRoot
  int rank;
  int nranks;
  ncclComm_t comm;
  cudaStream_t stream;  // the rank's stream on device communicators, NULL on host ones
};

struct Collective {
  const char* name;  // as in the tool's name: "all_reduce" for all_reduce_perf
  bool hasOp;        // takes a reduction operation (-o)
  bool hasRoot;      // takes a root rank (-r)
  CollCounts (*counts)(size_t count, int nranks);
  // busbw = algbw * busFactor: the fraction of the data each rank's links carry, so that
  // busbw compares with the hardware bandwidth whatever the rank count (see nccl-tests).
  double (*busFactor)(int nranks);
  ncclResult_t (*run)(const CallArgs& args);
  // Expected content of element `recvIndex` of `rank`'s receive buffer.
  Source (*source)(size_t recvIndex, int rank, int root, int nranks, const CollCounts& counts);
};

// Runs the tool; returns the process exit status (0: every call succeeded and validated).
int perfMain(int argc, char** argv, const Collective& coll);

}  // namespace chorus::perf

#endif  // CHORUS_PERF_COMMON_H_
