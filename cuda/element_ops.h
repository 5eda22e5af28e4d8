// The element arithmetic of the device kernels: how each storage format decodes to a value to
// compute on and encodes back (round to nearest even), and what one step does to an element.
// __host__ __device__ (CHORUS_HD): the device kernels and their host-run twins (the kernel code
// simulated on the CPU in tests) share this one definition, so host tests pin device results.
// Compiles as plain C++ without the CUDA headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/hd.h"

namespace chorus {
namespace dev {

// ---- IEEE arithmetic, rounded to nearest even after each operation. On the device the _rn
// intrinsics also keep nvcc from fusing a product and a sum into one multiply-add, which would
// round once where the host kernels round twice. ----

CHORUS_HD inline float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_HD inline double addRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_HD inline float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD inline double mulRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD inline float divRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
CHORUS_HD inline double divRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}

CHORUS_HD inline uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

CHORUS_HD inline float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ---- Narrow formats to float: exact, NaN payloads kept (e4m3 has a single NaN code). ----

CHORUS_HD inline float decodeBinary16(uint32_t h) {
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

CHORUS_HD inline float decodeE4m3(uint32_t v) {
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
CHORUS_HD inline uint32_t roundToCode(uint32_t x) {
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

CHORUS_HD inline bool isNanMagnitude(uint32_t x) {
  return x > 0x7f800000u;
}

CHORUS_HD inline uint16_t encodeHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  uint32_t code = roundToCode<10, 15>(x);
  return static_cast<uint16_t>(sign | (code < 0x7c00u ? code : 0x7c00u));
}

CHORUS_HD inline uint16_t encodeBf16(float f) {
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

CHORUS_HD inline uint8_t encodeE4m3(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t x = u & 0x7fffffffu;
  if (isNanMagnitude(x)) return static_cast<uint8_t>(sign | 0x7fu);
  // No infinity in e4m3: past 448, infinity included, saturate to 448.
  uint32_t code = roundToCode<3, 7>(x);
  return static_cast<uint8_t>(sign | (code < 0x7eu ? code : 0x7eu));
}

CHORUS_HD inline uint8_t encodeE5m2(float f) {
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
  CHORUS_HD static T decode(T v) { return v; }
  CHORUS_HD static T encode(T v) { return v; }
};

struct HalfFormat {
  using Store = uint16_t;
  using Compute = float;
  CHORUS_HD static float decode(uint16_t v) { return decodeBinary16(v); }
  CHORUS_HD static uint16_t encode(float f) { return encodeHalf(f); }
};

struct Bf16Format {
  using Store = uint16_t;
  using Compute = float;
  CHORUS_HD static float decode(uint16_t v) { return bitsFloat(static_cast<uint32_t>(v) << 16); }
  CHORUS_HD static uint16_t encode(float f) { return encodeBf16(f); }
};

struct E4m3Format {
  using Store = uint8_t;
  using Compute = float;
  CHORUS_HD static float decode(uint8_t v) { return decodeE4m3(v); }
  CHORUS_HD static uint8_t encode(float f) { return encodeE4m3(f); }
};

// e5m2 is the upper byte of a binary16.
struct E5m2Format {
  using Store = uint8_t;
  using Compute = float;
  CHORUS_HD static float decode(uint8_t v) { return decodeBinary16(static_cast<uint32_t>(v) << 8); }
  CHORUS_HD static uint8_t encode(float f) { return encodeE5m2(f); }
};

// ---- Arithmetic on the compute type; integers wrap through their unsigned twin. ----

template <class C>
CHORUS_HD inline C addOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return addRn(a, b);
  }
}

template <class C>
CHORUS_HD inline C mulOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return mulRn(a, b);
  }
}

// A NaN operand is the result; which NaN is defined by the order: the first one if both are.
template <class C>
CHORUS_HD inline C maxOf(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
  }
  return a > b ? a : b;
}

template <class C>
CHORUS_HD inline C minOf(C a, C b) {
  if constexpr (!std::is_integral_v<C>) {
    if (a != a) return a;
  }
  return a < b ? a : b;
}

// Avg's division by a positive rank count; integers truncate toward zero.
template <class C>
CHORUS_HD inline C divideOf(C a, int n) {
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
CHORUS_HD inline C combine(C x, C y, C scalar, int nranks) {
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
CHORUS_HD inline typename F::Store applyStep(typename F::Store a, typename F::Store b,
                                             typename F::Compute scalar, int nranks) {
  if constexpr (K == Step::kCopy) {
    return a;
  } else {
    return F::encode(combine<K>(F::decode(a), F::decode(b), scalar, nranks));
  }
}

}  // namespace dev
}  // namespace chorus
