// Device reduction kernels. One kernel per (element format, step): the step (sum, product, ...,
// scale, divide, copy) is chosen on the host from the arguments, so the element loops carry no
// branches beyond the optional second output. Every thread walks a grid-stride loop, over
// 16-byte packs when all pointers allow it and over single elements otherwise.
//
// The element code is __host__ __device__: deviceReduceCopyOnHost runs it on the CPU so that the
// conversions and the loop bounds are checked where there is no GPU.
#include "cuda/device_reduce.h"

#include "cuda/dev_dispatch.h"
#include "cuda/element_ops.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace chorus {
namespace {

constexpr unsigned kThreadsPerBlock = 256;
// A thread takes at least this many items before more blocks are added, up to kMaxBlocks.
constexpr size_t kItemsPerThread = 4;
constexpr size_t kMaxBlocks = 2048;

using namespace dev;  // NOLINT: the element code of element_ops.h

// Kernel arguments apart from the scalar, whose type depends on the format.
struct StepArgs {
  const void* first;   // peer, or the only source
  const void* second;  // local, for two-source steps
  void* dst0;
  void* dst1;  // may be null
  size_t count;
  int nranks;
  bool packed;  // all pointers 16-byte aligned
};

template <class S>
union Pack {
  uint4 raw;
  S lanes[sizeof(uint4) / sizeof(S)];
};

// The work of thread `thread` out of `threads`: whole packs first, then the elements after the
// last whole pack. Each element is read before it is written, so exact aliasing is safe.
template <class F, Step K>
__host__ __device__ void runThread(const StepArgs& a, typename F::Compute scalar, size_t thread,
                                   size_t threads) {
  using S = typename F::Store;
  constexpr size_t kLanes = sizeof(uint4) / sizeof(S);
  const S* first = static_cast<const S*>(a.first);
  const S* second = static_cast<const S*>(a.second);
  S* dst0 = static_cast<S*>(a.dst0);
  S* dst1 = static_cast<S*>(a.dst1);
  size_t begin = 0;
  if (a.packed) {
    size_t packs = a.count / kLanes;
    const uint4* firstPacks = reinterpret_cast<const uint4*>(first);
    const uint4* secondPacks = reinterpret_cast<const uint4*>(second);
    uint4* dst0Packs = reinterpret_cast<uint4*>(dst0);
    uint4* dst1Packs = reinterpret_cast<uint4*>(dst1);
    for (size_t i = thread; i < packs; i += threads) {
      Pack<S> x, y, r;
      x.raw = firstPacks[i];
      if constexpr (kTwoSources<K>) {
        y.raw = secondPacks[i];
      } else {
        y.raw = x.raw;
      }
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
      for (size_t j = 0; j < kLanes; ++j) {
        r.lanes[j] = applyStep<F, K>(x.lanes[j], y.lanes[j], scalar, a.nranks);
      }
      dst0Packs[i] = r.raw;
      if (dst1Packs != nullptr) dst1Packs[i] = r.raw;
    }
    begin = packs * kLanes;
  }
  for (size_t i = begin + thread; i < a.count; i += threads) {
    S x = first[i];
    S y = x;
    if constexpr (kTwoSources<K>) y = second[i];
    S r = applyStep<F, K>(x, y, scalar, a.nranks);
    dst0[i] = r;
    if (dst1 != nullptr) dst1[i] = r;
  }
}

template <class F, Step K>
__global__ void __launch_bounds__(kThreadsPerBlock)
    reduceCopyKernel(StepArgs a, typename F::Compute scalar) {
  size_t thread = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t threads = static_cast<size_t>(gridDim.x) * blockDim.x;
  runThread<F, K>(a, scalar, thread, threads);
}

// ---- Host side: choosing and launching a kernel. ----

Status cudaFailure(cudaError_t err, const char* what) {
  return Status(
      Code::kUnhandledCudaError,
      formatString("%s: %s (CUDA error %d)", what, cudaGetErrorString(err), static_cast<int>(err)));
}

// Where the chosen kernel runs: queued on a stream, or simulated on the CPU.
struct Target {
  void* stream;
  bool onHost;
};

template <class S>
unsigned blocksFor(const StepArgs& a) {
  constexpr size_t kLanes = sizeof(uint4) / sizeof(S);
  size_t items = a.packed ? a.count / kLanes + a.count % kLanes : a.count;
  size_t perBlock = kThreadsPerBlock * kItemsPerThread;
  size_t blocks = (items + perBlock - 1) / perBlock;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

template <class F, Step K>
Status launch(const StepArgs& a, typename F::Compute scalar, const Target& target) {
  unsigned blocks = blocksFor<typename F::Store>(a);
  if (target.onHost) {
    size_t threads = static_cast<size_t>(blocks) * kThreadsPerBlock;
    for (size_t t = 0; t < threads; ++t) runThread<F, K>(a, scalar, t, threads);
    return Status::ok();
  }
  reduceCopyKernel<F, K>
      <<<blocks, kThreadsPerBlock, 0, static_cast<cudaStream_t>(target.stream)>>>(a, scalar);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cudaFailure(err, "deviceReduceCopy: kernel launch failed");
  return Status::ok();
}

// Plain copies only move words, so they share one kernel per element size.
template <size_t kSize>
using CopyWord = std::conditional_t<
    kSize == 1, uint8_t,
    std::conditional_t<kSize == 2, uint16_t, std::conditional_t<kSize == 4, uint32_t, uint64_t>>>;

bool aligned16(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % sizeof(uint4) == 0;
}

template <class F>
Status runFormat(const ReduceCopyArgs& args, const Target& target) {
  using S = typename F::Store;
  using C = typename F::Compute;
  RedKind kind = args.op != nullptr ? args.op->kind : RedKind::kSum;
  S scalarStore{};
  if (args.op != nullptr) std::memcpy(&scalarStore, args.op->scalar, sizeof scalarStore);
  C scalar = F::decode(scalarStore);
  bool avgFinal = kind == RedKind::kAvg && args.finalize;

  StepArgs a{};
  a.count = args.count;
  a.nranks = args.op != nullptr && args.op->nranks > 0 ? args.op->nranks : 1;
  a.dst0 = args.dst0;
  a.dst1 = args.dst1;
  bool twoSources = args.peer != nullptr && args.local != nullptr;
  a.first = args.peer != nullptr ? args.peer : args.local;
  a.second = twoSources ? args.local : nullptr;
  a.packed = aligned16(a.first) && aligned16(a.second) && aligned16(a.dst0) && aligned16(a.dst1);

  if (twoSources) {
    switch (kind) {
      case RedKind::kSum:
        return launch<F, Step::kSum>(a, scalar, target);
      case RedKind::kProd:
        return launch<F, Step::kProd>(a, scalar, target);
      case RedKind::kMax:
        return launch<F, Step::kMax>(a, scalar, target);
      case RedKind::kMin:
        return launch<F, Step::kMin>(a, scalar, target);
      case RedKind::kAvg:
        if (avgFinal) return launch<F, Step::kAvgFinal>(a, scalar, target);
        return launch<F, Step::kSum>(a, scalar, target);
      case RedKind::kPreMulSum:
        return launch<F, Step::kPreMulSum>(a, scalar, target);
    }
    return invalidArgument("deviceReduceCopy: unknown reduction kind %d", static_cast<int>(kind));
  }
  if (args.peer == nullptr && kind == RedKind::kPreMulSum) {
    return launch<F, Step::kScale>(a, scalar, target);
  }
  if (avgFinal) return launch<F, Step::kDivide>(a, scalar, target);
  using W = CopyWord<sizeof(S)>;
  return launch<NativeFormat<W>, Step::kCopy>(a, W{}, target);
}

Status run(const ReduceCopyArgs& args, const Target& target) {
  if (args.count == 0 || (args.peer == nullptr && args.local == nullptr) || args.dst0 == nullptr) {
    return Status::ok();
  }
  Status result;
  if (withFormat(args.type, [&](auto format) {
        // (void): nvcc takes the assignment's Status& for a discarded [[nodiscard]] value.
        static_cast<void>(result = runFormat<typename decltype(format)::Format>(args, target));
      }))
    return result;
  return invalidArgument("deviceReduceCopy: unknown data type %d", static_cast<int>(args.type));
}

}  // namespace

Status deviceReduceCopy(const ReduceCopyArgs& args, void* cudaStream) {
  return run(args, Target{cudaStream, false});
}

Status deviceReduceCopyOnHost(const ReduceCopyArgs& args) {
  return run(args, Target{nullptr, true});
}

Status deviceCount(int* count) {
  if (count == nullptr) return invalidArgument("deviceCount: count is null");
  *count = 0;
  int found = 0;  // the runtime leaves it unwritten when it fails
  cudaError_t err = cudaGetDeviceCount(&found);
  if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
      err == cudaErrorStubLibrary) {
    cudaGetLastError();  // not a failure of this process: clear it for later calls
    return Status::ok();
  }
  if (err != cudaSuccess) return cudaFailure(err, "deviceCount: cudaGetDeviceCount failed");
  *count = found;
  return Status::ok();
}

}  // namespace chorus
