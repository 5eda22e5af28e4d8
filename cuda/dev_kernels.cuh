// The collective kernels: runChannel (dev_kernel.h) instantiated for every reduction kind of
// one element format, one block per channel, up to kBlockThreads threads a block. Each data type's
// kernels are compiled in a file of their own (dev_kernels_type.cu.in), so the build spreads
// them over the cores.
#pragma once

#include <cuda_runtime.h>

#include "cuda/dev_dispatch.h"
#include "cuda/dev_kernel.h"
#include "cuda/dev_launch.h"

namespace chorus {
namespace dev {

struct DeviceBlock {
  int tid;
  int nthreads;
  BlockShared* shared;
  __host__ __device__ void sync() {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  __host__ __device__ bool syncOr(bool v) {
#ifdef __CUDA_ARCH__
    return __syncthreads_or(v ? 1 : 0) != 0;
#else
    return v;
#endif
  }
};

// The launch stays in parameter memory (__grid_constant__): runChannel reads it by reference,
// which would otherwise make every thread copy all of it (2 KiB) to its stack first.
template <class F, RedKind K>
__global__ void __launch_bounds__(kBlockThreads)
    collectiveKernel(const __grid_constant__ Launch launch) {
  __shared__ BlockShared shared;
  DeviceBlock block{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), &shared};
  runChannel<F, K>(launch, static_cast<int>(blockIdx.x), block);
}

template <class F>
Status launchFormat(const Launch& launch, int nblocks, int nthreads, void* stream) {
  cudaError_t err = cudaSuccess;
  bool known = withKind<F>(static_cast<RedKind>(launch.works[0].redKind), [&](auto, auto kind) {
    collectiveKernel<F, decltype(kind)::kKind>
        <<<nblocks, nthreads, 0, static_cast<cudaStream_t>(stream)>>>(launch);
    err = cudaGetLastError();
  });
  if (!known)
    return invalidArgument("no collective kernel for reduction %d", launch.works[0].redKind);
  if (err != cudaSuccess)
    return Status(Code::kUnhandledCudaError,
                  formatString("collective kernel launch failed: %s (CUDA error %d)",
                               cudaGetErrorString(err), static_cast<int>(err)));
  return Status::ok();
}

// Loads the kernels of format F on the current device (cudaFuncGetAttributes loads a lazily
// loaded module) and lowers *minBlocksPerSm to the fewest blocks of any of them that one
// multiprocessor holds at once.
template <class F>
Status preloadFormat(int* minBlocksPerSm) {
  for (int k = 0; k <= static_cast<int>(RedKind::kPreMulSum); ++k) {
    cudaError_t err = cudaSuccess;
    withKind<F>(static_cast<RedKind>(k), [&](auto, auto kind) {
      auto* fn = collectiveKernel<F, decltype(kind)::kKind>;
      cudaFuncAttributes attr;
      err = cudaFuncGetAttributes(&attr, fn);
      int blocks = 0;
      if (err == cudaSuccess)
        err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, fn, kBlockThreads, 0);
      if (err == cudaSuccess && blocks < *minBlocksPerSm) *minBlocksPerSm = blocks;
    });
    if (err != cudaSuccess) {
      cudaGetLastError();
      return Status(Code::kUnhandledCudaError,
                    formatString("loading the collective kernels failed: %s (CUDA error %d)",
                                 cudaGetErrorString(err), static_cast<int>(err)));
    }
  }
  return Status::ok();
}

}  // namespace dev
}  // namespace chorus
