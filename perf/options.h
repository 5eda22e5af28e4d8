// The perf tools' command line (nccl-tests' options and defaults): parsed once per process.
#ifndef CHORUS_PERF_OPTIONS_H_
#define CHORUS_PERF_OPTIONS_H_

#include <cstddef>
#include <vector>

#include "common.h"
#include "verify.h"

namespace chorus::perf {

struct Options {
  size_t minBytes = 32 << 20, maxBytes = 32 << 20, stepBytes = 1 << 20, stepFactor = 1;
  int iters = 20, warmupIters = 5, aggIters = 1, runCycles = 1, check = 1, average = 1;
  int registration = 0;  // -R: 0 none, 1 ncclCommRegister, 2 symmetric windows (host only)
  int blocking = 0;      // device buffers: wait for each iteration (host calls always complete)
  int streamNull = 0;    // device buffers: the legacy default stream instead of one of our own
  int parallelInit = 0, reportCpuTime = 0;  // no effect
  std::vector<const TypeInfo*> types{findType("float")};
  std::vector<PerfOp> ops{kSum};
  int root = 0;  // -1: every root
  // -t and -g: ranks in this process, nthreads * ngpus of them, each driven by a thread of its
  // own (a host collective blocks its caller until every rank has joined it).
  int nthreads = 1, ngpus = 1;
};

// The options of argv, or a message and exit status 1 (usage and exit 0 for -h).
Options parseOptions(int argc, char** argv, const Collective& coll);

}  // namespace chorus::perf

#endif  // CHORUS_PERF_OPTIONS_H_
