// Device reduction kernels. One kernel per (element format, step): the step (sum, product, ...,
// scale, divide, copy) is chosen on the host from the arguments, so the element loops carry no
// branches beyond the optional second output. Every thread walks a grid-stride loop, over
// 16-byte packs when all pointers allow it and over single elements otherwise.
//
// The element code is __host__ __device__: deviceReduceCopyOnHost runs it on the CPU so that the
// conversions and the loop bounds are checked where there is no GPU.
#include "cuda/device_reduce.h"

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

// ---- IEEE arithmetic, rounded to nearest even after each operation. On the device the _rn
// intrinsics also keep nvcc from fusing a product and a sum into one multiply-add, which would
// round once where the host kernels round twice. ----

__host__ __device__ inline float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline double addRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline double mulRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline float divRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
__host__ __device__ inline double divRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

__host__ __device__ inline uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

__host__ __device__ inline float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- Narrow formats to float: exact, NaN payloads kept (e4m3 has a single NaN code). ----

__host__ __device__ inline float decodeBinary16(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t field = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t mag;
  if (field == 0x1fu) {
    mag = 0x7f800000u | (mant << 13);
  } else if (field == 0) {
    mag = floatBits(mulRn(static_cast<float>(mant), 0x1p-24f));
  } else {
    mag = ((field + (127u - 15u)) << 23) | (mant << 13);
  }
  return bitsFloat(sign | mag);
}

__host__ __device__ inline float decodeE4m3(uint32_t v) {
  uint32_t sign = (v & 0x80u) << 24;
  uint32_t field = (v >> 3) & 0xfu;
  uint32_t mant = v & 0x7u;
  uint32_t mag;
  if ((v & 0x7fu) == 0x7fu) {
    mag = 0x7fc00000u;
  } else if (field == 0) {
    mag = floatBits(mulRn(static_cast<float>(mant), 0x1p-9f));
  } else {
    mag = ((field + (127u - 7u)) << 23) | (mant << 20);
  }
  return bitsFloat(sign | mag);
}

// ---- Float to narrow formats, round to nearest even. ----

// The code of a non-NaN magnitude (float bits `x`, sign cleared) in a format with kMant mantissa
// bits and exponent bias kBias, not clamped: magnitudes past the largest finite value give
// larger codes, which the caller saturates or turns into infinity.
template <int kMant, int kBias>
__host__ __device__ inline uint32_t roundToCode(uint32_t x) {
  constexpr int kDrop = 23 - kMant;
  constexpr uint32_t kMinNormalField = 127 + 1 - kBias;
  if ((x >> 23) < kMinNormalField) {
    // Below the format's normals: count multiples of its subnormal spacing. Scaling by a power
    // of two is exact here, so the round to an integer is the only rounding.
    constexpr uint32_t kStepsPerUnit = static_cast<uint32_t>(127 + kBias - 1 + kMant) << 23;
    return static_cast<uint32_t>(rintf(mulRn(bitsFloat(x), bitsFloat(kStepsPerUnit))));
  }
  constexpr uint32_t kHalfway = 1u << (kDrop - 1);
  uint32_t kept = x >> kDrop;
  uint32_t dropped = x & ((1u << kDrop) - 1u);
  if (dropped > kHalfway || (dropped == kHalfway && (kept & 1u) != 0)) ++kept;
  // A carry out of the mantissa lands in the exponent, which is the right code.
  return kept - (static_cast<uint32_t>(127 - kBias) << kMant);
}

__host__ __device__ inline bool isNanMagnitude(uint32_t x) {
  return x > 0x7f800000u;
}

__host__ __device__ inline uint16_t encodeHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  uint32_t code = roundToCode<10, 15>(x);
  return static_cast<uint16_t>(sign | (code < 0x7c00u ? code : 0x7c00u));
}

__host__ __device__ inline uint16_t encodeBf16(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint16_t>(sign | (x >> 16) | 0x40u);
  // Same exponent range as float: rounding the bits covers subnormals, and overflow carries
  // into the infinity code.
  uint32_t kept = x >> 16;
  uint32_t dropped = x & 0xffffu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u) != 0)) ++kept;
  return static_cast<uint16_t>(sign | kept);
}

__host__ __device__ inline uint8_t encodeE4m3(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint8_t>(sign | 0x7fu);
  // No infinity in e4m3: past 448, infinity included, saturate to 448.
  uint32_t code = roundToCode<3, 7>(x);
  return static_cast<uint8_t>(sign | (code < 0x7eu ? code : 0x7eu));
}

__host__ __device__ inline uint8_t encodeE5m2(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint8_t>(sign | 0x7eu);
  uint32_t code = roundToCode<2, 15>(x);
  return static_cast<uint8_t>(sign | (code < 0x7cu ? code : 0x7cu));
}

// ---- Element formats: how a stored element becomes a value to compute on, and back. ----

template <class T>
struct NativeFormat {
  using Store = T;
  using Compute = T;
  __host__ __device__ static T decode(T v) { return v; }
  __host__ __device__ static T encode(T v) { return v; }
};

struct HalfFormat {
  using Store = uint16_t;
  using Compute = float;
  __host__ __device__ static float decode(uint16_t v) { return decodeBinary16(v); }
  __host__ __device__ static uint16_t encode(float f) { return encodeHalf(f); }
};

struct Bf16Format {
  using Store = uint16_t;
  using Compute = float;
  __host__ __device__ static float decode(uint16_t v) {
    return bitsFloat(static_cast<uint32_t>(v) << 16);
  }
  __host__ __device__ static uint16_t encode(float f) { return encodeBf16(f); }
};

struct E4m3Format {
  using Store = uint8_t;
  using Compute = float;
  __host__ __device__ static float decode(uint8_t v) { return decodeE4m3(v); }
  __host__ __device__ static uint8_t encode(float f) { return encodeE4m3(f); }
};

// e5m2 is the upper byte of a binary16.
struct E5m2Format {
  using Store = uint8_t;
  using Compute = float;
  __host__ __device__ static float decode(uint8_t v) {
    return decodeBinary16(static_cast<uint32_t>(v) << 8);
  }
  __host__ __device__ static uint8_t encode(float f) { return encodeE5m2(f); }
};

// ---- Arithmetic on the compute type; integers wrap through their unsigned twin. ----

template <class C>
__host__ __device__ inline C addOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return addRn(a, b);
  }
}

template <class C>
__host__ __device__ inline C mulOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return mulRn(a, b);
  }
}

// A NaN operand is the result; which NaN is defined by the order: the first one if both are.
template <class C>
__host__ __device__ inline C maxOf(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
  }
  return a > b ? a : b;
}

template <class C>
__host__ __device__ inline C minOf(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
  }
  return a < b ? a : b;
}

// Avg's division by a positive rank count; integers truncate toward zero.
template <class C>
__host__ __device__ inline C divideOf(C a, int n) {
  if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
    using W = std::conditional_t<(sizeof(C) <= 4), int32_t, int64_t>;
    return static_cast<C>(static_cast<W>(a) / static_cast<W>(n));
  } else if constexpr (std::is_integral_v<C>) {
    using W = std::conditional_t<(sizeof(C) <= 4), uint32_t, uint64_t>;
    return static_cast<C>(static_cast<W>(a) / static_cast<W>(n));
  } else {
    return divRn(a, static_cast<C>(n));
  }
}

// What one kernel does to each element. Two-source steps read (peer, local); the others read one
// source. kCopy moves storage words without decoding.
enum class Step : int {
  kSum,
  kProd,
  kMax,
  kMin,
  kAvgFinal,
  kPreMulSum,
  kScale,
  kDivide,
  kCopy,
};

template <Step K>
constexpr bool kTwoSources = K <= Step::kPreMulSum;

template <Step K, class C>
__host__ __device__ inline C combine(C x, C y, C scalar, int nranks) {
  if constexpr (K == Step::kSum) {
    return addOf(x, y);
  } else if constexpr (K == Step::kProd) {
    return mulOf(x, y);
  } else if constexpr (K == Step::kMax) {
    return maxOf(x, y);
  } else if constexpr (K == Step::kMin) {
    return minOf(x, y);
  } else if constexpr (K == Step::kAvgFinal) {
    return divideOf(addOf(x, y), nranks);
  } else if constexpr (K == Step::kPreMulSum) {
    return addOf(x, mulOf(y, scalar));
  } else if constexpr (K == Step::kScale) {
    return mulOf(x, scalar);
  } else {
    static_assert(K == Step::kDivide, "kCopy never decodes");
    return divideOf(x, nranks);
  }
}

template <class F, Step K>
__host__ __device__ inline typename F::Store applyStep(typename F::Store a, typename F::Store b,
                                                       typename F::Compute scalar, int nranks) {
  if constexpr (K == Step::kCopy) {
    return a;
  } else {
    return F::encode(combine<K>(F::decode(a), F::decode(b), scalar, nranks));
  }
}

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
  switch (args.type) {
    case DataType::kInt8:
      return runFormat<NativeFormat<int8_t>>(args, target);
    case DataType::kUint8:
      return runFormat<NativeFormat<uint8_t>>(args, target);
    case DataType::kInt32:
      return runFormat<NativeFormat<int32_t>>(args, target);
    case DataType::kUint32:
      return runFormat<NativeFormat<uint32_t>>(args, target);
    case DataType::kInt64:
      return runFormat<NativeFormat<int64_t>>(args, target);
    case DataType::kUint64:
      return runFormat<NativeFormat<uint64_t>>(args, target);
    case DataType::kFloat16:
      return runFormat<HalfFormat>(args, target);
    case DataType::kFloat32:
      return runFormat<NativeFormat<float>>(args, target);
    case DataType::kFloat64:
      return runFormat<NativeFormat<double>>(args, target);
    case DataType::kBfloat16:
      return runFormat<Bf16Format>(args, target);
    case DataType::kFloat8e4m3:
      return runFormat<E4m3Format>(args, target);
    case DataType::kFloat8e5m2:
      return runFormat<E5m2Format>(args, target);
    case DataType::kNumTypes:
      break;
  }
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
