// Reduction kernels for device memory: the CUDA twin of exec/reduce.h. Same arguments, same
// results bit for bit, but the pointers are device pointers and the work is queued on a stream.
// Usable from code built without the CUDA headers.
#pragma once

#include "common/status.h"
#include "exec/reduce.h"

namespace chorus {

// Queues one kernel on `cudaStream` (a cudaStream_t; nullptr is the legacy default stream) that
// performs reduceCopy(args) on device memory. args.op points to host memory and is read before
// the call returns. Returns kUnhandledCudaError when the launch fails and kInvalidArgument for an
// unknown data type or reduction. Nothing is queued when there is nothing to do (count 0, no
// source, or no destination), as reduceCopy does nothing then.
Status deviceReduceCopy(const ReduceCopyArgs& args, void* cudaStream);

// Runs the kernel's own code on the CPU over host pointers, one simulated thread after another
// with the geometry a launch would use. For tests on machines without a GPU.
Status deviceReduceCopyOnHost(const ReduceCopyArgs& args);

// Number of CUDA devices the runtime sees; 0 without error when there is no driver or no device.
Status deviceCount(int* count);

}  // namespace chorus
