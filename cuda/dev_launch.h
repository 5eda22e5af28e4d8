// Queues a planned launch (dev_plan.h) on a CUDA stream: the collective kernel of the launch's
// (type, reduction kind), one block per channel of the communicator. Usable from code built
// without the CUDA headers; defined only where the kernels are built.
#pragma once

#include "common/status.h"
#include "cuda/dev_work.h"

namespace chorus {
namespace dev {

// nblocks: the device communicator's channel count (every launch runs that many blocks; the
// grid barrier counts on it). Returns kUnhandledCudaError when the launch fails.
Status launchOnStream(const Launch& launch, int nblocks, void* cudaStream);

}  // namespace dev
}  // namespace chorus
