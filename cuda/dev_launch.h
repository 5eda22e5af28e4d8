// Queues a planned launch (dev_plan.h) on a CUDA stream: the collective kernel of the launch's
// (type, reduction kind), one block per channel of the communicator. Usable from code built
// without the CUDA headers; defined only where the kernels are built.
#pragma once

#include "common/status.h"
#include "cuda/dev_work.h"

namespace chorus {
namespace dev {

// nblocks: the device communicator's channel count (every launch runs that many blocks; the
// grid barrier counts on it); nthreads: threads per block, a multiple of 32 in
// [kMinBlockThreads, kBlockThreads]. Returns kUnhandledCudaError when the launch fails.
Status launchOnStream(const Launch& launch, int nblocks, int nthreads, void* cudaStream);

// Loads every collective kernel on the current device now and returns the fewest blocks of any
// of them one multiprocessor holds at once. CUDA loads kernels lazily by default, and loading
// one at its first launch may wait for the kernels already running, which can be peers that
// wait for this very launch.
Result<int> preloadKernels();

}  // namespace dev
}  // namespace chorus
