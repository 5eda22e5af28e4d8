// The bodies of the host reduction kernels, compiled once per instruction set: reduce.cc builds
// them for the baseline target and reduce_avx2.cc again under an AVX2 target. Everything here
// has internal linkage, so the two builds never stand in for each other at link time.
//
// Each call picks one tight loop for its (type, op, operands, outputs) up front, so the element
// loops carry no branches and GCC vectorises them. Narrow floating types (half, bfloat16, fp8)
// go through blocks of float: decode, combine, encode.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "exec/reduce.h"

namespace chorus {
namespace {

// Elements per block for the types that compute in a wider type; two blocks live on the stack.
constexpr size_t kBlock = 256;

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Picks a or b without a branch. A plain ?: lets GCC move the float arithmetic of the unused
// arm into a branch, which it then may not speculate, and the loop stays scalar.
inline uint32_t selectBits(bool pickA, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - static_cast<uint32_t>(pickA);
  return (a & mask) | (b & ~mask);
}

// ---- Decoding to float, branch-free. Subnormals go through an exact integer-to-float
// conversion, so no float subnormal is involved and denormals-are-zero modes do not matter. ----

// binary16; e5m2 is the top byte of a binary16, so it shares this decoder.
inline float decodeHalfBits(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t mag = h & 0x7fffu;
  uint32_t normal = (mag << 13) + (112u << 23);  // rebias 15 -> 127
  uint32_t special = (mag << 13) | 0x7f800000u;  // inf and NaN keep their payload
  uint32_t sub = bitsOf(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-24f);
  uint32_t out = selectBits(mag >= 0x7c00u, special, selectBits(mag < 0x400u, sub, normal));
  return floatOf(sign | out);
}

inline float decodeE4m3Bits(uint32_t v) {
  uint32_t sign = (v & 0x80u) << 24;
  uint32_t mag = v & 0x7fu;
  uint32_t normal = (mag << 20) + (120u << 23);  // rebias 7 -> 127
  uint32_t sub = bitsOf(static_cast<float>(static_cast<int32_t>(mag)) * 0x1p-9f);
  uint32_t out = selectBits(mag == 0x7fu, 0x7fc00000u, selectBits(mag < 8u, sub, normal));
  return floatOf(sign | out);
}

// ---- Encoding from float, round to nearest even. ----

// Rounds a non-negative finite float, given as bits, to a format with kMant mantissa bits and
// exponent bias kBias; returns the code of the magnitude. Values past the largest finite code
// come back as larger codes for the caller to clamp; NaN is the caller's too.
template <int kMant, int kBias>
inline uint32_t roundMagnitude(uint32_t x) {
  constexpr int kShift = 23 - kMant;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 + 1 - kBias) << 23;
  // Adding this power of two makes the target's subnormal spacing the float ulp, so the float
  // adder does the rounding and the low bits are the subnormal code.
  constexpr uint32_t kMagic = static_cast<uint32_t>(127 + 1 - kBias - kMant + 23) << 23;
  uint32_t rounded = (x + ((1u << (kShift - 1)) - 1u) + ((x >> kShift) & 1u)) >> kShift;
  uint32_t normal = rounded - (static_cast<uint32_t>(127 - kBias) << kMant);
  uint32_t sub = bitsOf(floatOf(x) + floatOf(kMagic)) - kMagic;
  return selectBits(x >= kMinNormal, normal, sub);
}

inline bool isNanBits(uint32_t absBits) {
  return static_cast<int32_t>(absBits) > static_cast<int32_t>(0x7f800000);
}

inline uint16_t encodeHalf(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t x = u & 0x7fffffffu;
  uint32_t mag = std::min(roundMagnitude<10, 15>(x), 0x7c00u);  // overflow is infinity
  uint32_t nan = 0x7e00u | ((x >> 13) & 0x3ffu);                // quiet, payload kept
  return static_cast<uint16_t>(sign | selectBits(isNanBits(x), nan, mag));
}

inline uint16_t encodeBf16(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t x = u & 0x7fffffffu;
  // bfloat16 is a truncated float: rounding the bits handles subnormals and overflow alike.
  uint32_t mag = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>(sign | selectBits(isNanBits(x), nan, mag));
}

inline uint8_t encodeE4m3(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t x = u & 0x7fffffffu;
  // No infinities in e4m3: everything past 448, infinity included, saturates to 448 (0x7e).
  uint32_t mag = std::min(roundMagnitude<3, 7>(x), 0x7eu);
  return static_cast<uint8_t>(sign | selectBits(isNanBits(x), 0x7fu, mag));
}

inline uint8_t encodeE5m2(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t x = u & 0x7fffffffu;
  uint32_t mag = std::min(roundMagnitude<2, 15>(x), 0x7cu);  // overflow is infinity
  return static_cast<uint8_t>(sign | selectBits(isNanBits(x), 0x7eu, mag));
}

// ---- Element codecs: storage type, compute type, and block conversions between them. ----

// Block conversions for a codec that converts one element at a time.
template <class Codec, class S, class C>
struct ElementwiseCodec {
  using Store = S;
  using Compute = C;
  static void decode(const S* src, C* __restrict out, size_t m) {
    for (size_t j = 0; j < m; ++j) out[j] = Codec::toCompute(src[j]);
  }
  static void encode(const C* __restrict in, S* dst, size_t m) {
    for (size_t j = 0; j < m; ++j) dst[j] = Codec::fromCompute(in[j]);
  }
};

template <class T>
struct Plain : ElementwiseCodec<Plain<T>, T, T> {
  static constexpr bool kDirect = true;  // compute on the storage type, no blocks
  static T toCompute(T v) { return v; }
  static T fromCompute(T v) { return v; }
};

struct HalfCodec : ElementwiseCodec<HalfCodec, uint16_t, float> {
  static constexpr bool kDirect = false;
  static float toCompute(uint16_t v) { return decodeHalfBits(v); }
  static uint16_t fromCompute(float f) { return encodeHalf(f); }
};

struct Bf16Codec : ElementwiseCodec<Bf16Codec, uint16_t, float> {
  static constexpr bool kDirect = false;
  static float toCompute(uint16_t v) { return floatOf(static_cast<uint32_t>(v) << 16); }
  static uint16_t fromCompute(float f) { return encodeBf16(f); }
};

struct E4m3Codec : ElementwiseCodec<E4m3Codec, uint8_t, float> {
  static constexpr bool kDirect = false;
  static float toCompute(uint8_t v) { return decodeE4m3Bits(v); }
  static uint8_t fromCompute(float f) { return encodeE4m3(f); }
};

struct E5m2Codec : ElementwiseCodec<E5m2Codec, uint8_t, float> {
  static constexpr bool kDirect = false;
  static float toCompute(uint8_t v) { return decodeHalfBits(static_cast<uint32_t>(v) << 8); }
  static uint8_t fromCompute(float f) { return encodeE5m2(f); }
};

// ---- Arithmetic on the compute type. Integers wrap, through their unsigned twin. ----

template <class C>
inline C addOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class C>
inline C mulOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

// Max and min propagate NaN: a NaN in either operand is the result.
template <class C>
inline C maxOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return a > b ? a : b;
  } else {
    return a != a ? a : (a > b ? a : b);
  }
}

template <class C>
inline C minOf(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    return a < b ? a : b;
  } else {
    return a != a ? a : (a < b ? a : b);
  }
}

// Avg's division by the rank count; integers truncate toward zero, in a type wide enough for
// any rank count.
template <class C>
inline C divideOf(C a, int n) {
  if constexpr (std::is_integral_v<C> && (sizeof(C) < 4 || std::is_same_v<C, int32_t>)) {
    // Through double, which vectorises where integer division does not. Exact: for |a| < 2^31
    // a quotient that is not an integer lies at least 1/n from one, while rounding moves it by
    // at most |a/n| * 2^-53 < 1/n, so truncation sees the true quotient's integer part.
    double q = static_cast<double>(static_cast<int32_t>(a)) / static_cast<double>(n);
    return static_cast<C>(static_cast<int32_t>(q));
  } else if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
    return static_cast<C>(static_cast<int64_t>(a) / static_cast<int64_t>(n));
  } else if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(static_cast<uint64_t>(a) / static_cast<uint64_t>(n));
  } else {
    return a / static_cast<C>(n);
  }
}

template <class C>
struct SumFn {
  C operator()(C a, C b) const { return addOf(a, b); }
};
template <class C>
struct ProdFn {
  C operator()(C a, C b) const { return mulOf(a, b); }
};
template <class C>
struct MaxFn {
  C operator()(C a, C b) const { return maxOf(a, b); }
};
template <class C>
struct MinFn {
  C operator()(C a, C b) const { return minOf(a, b); }
};
template <class C>
struct AvgFinalFn {
  int n;
  C operator()(C a, C b) const { return divideOf(addOf(a, b), n); }
};
template <class C>
struct DivideFn {
  int n;
  C operator()(C a) const { return divideOf(a, n); }
};
template <class C>
struct ScaleFn {
  C s;
  C operator()(C a) const { return mulOf(a, s); }
};
// Integers only: floating PreMulSum keeps its product and sum apart (see preMulSumStep).
template <class C>
struct PreMulSumFn {
  C s;
  C operator()(C a, C b) const { return addOf(a, mulOf(b, s)); }
};

// ---- Loops. dst0 and dst1 may alias a source exactly: every element is read before it is
// written, and GCC's runtime overlap check still takes the vector loop for exact aliasing. ----

// Elements per block when a one-output loop is followed by a copy to the second output.
constexpr size_t kCopyBlock = 2048;

template <class Codec, bool kDst1>
inline void encodeOut(const typename Codec::Compute* __restrict in, typename Codec::Store* dst0,
                      typename Codec::Store* dst1, size_t m) {
  Codec::encode(in, dst0, m);
  if constexpr (kDst1) {
    if (dst1 != dst0) std::memcpy(dst1, dst0, m * sizeof(*dst0));
  }
}

template <class Codec, bool kDst1, class F>
void binaryStep(const typename Codec::Store* a, const typename Codec::Store* b,
                typename Codec::Store* dst0, typename Codec::Store* dst1, size_t n, F f) {
  using C = typename Codec::Compute;
  if constexpr (Codec::kDirect && kDst1) {
    // Two stores per element keep the compiler from vectorising (it cannot rule out partial
    // overlap of the outputs): compute a block into dst0 with the one-output loop, then copy
    // it to dst1 while it is still in the L1 cache.
    for (size_t base = 0; base < n; base += kCopyBlock) {
      size_t m = std::min(kCopyBlock, n - base);
      binaryStep<Codec, false>(a + base, b + base, dst0 + base, nullptr, m, f);
      if (dst1 != dst0) std::memcpy(dst1 + base, dst0 + base, m * sizeof(*dst0));
    }
  } else if constexpr (Codec::kDirect) {
    for (size_t i = 0; i < n; ++i) dst0[i] = f(a[i], b[i]);
  } else {
    for (size_t base = 0; base < n; base += kBlock) {
      size_t m = std::min(kBlock, n - base);
      C x[kBlock], y[kBlock];
      Codec::decode(a + base, x, m);
      Codec::decode(b + base, y, m);
      for (size_t j = 0; j < m; ++j) x[j] = f(x[j], y[j]);
      encodeOut<Codec, kDst1>(x, dst0 + base, dst1 + base, m);
    }
  }
}

template <class Codec, bool kDst1, class F>
void unaryStep(const typename Codec::Store* a, typename Codec::Store* dst0,
               typename Codec::Store* dst1, size_t n, F f) {
  using C = typename Codec::Compute;
  if constexpr (Codec::kDirect && kDst1) {
    for (size_t base = 0; base < n; base += kCopyBlock) {
      size_t m = std::min(kCopyBlock, n - base);
      unaryStep<Codec, false>(a + base, dst0 + base, nullptr, m, f);
      if (dst1 != dst0) std::memcpy(dst1 + base, dst0 + base, m * sizeof(*dst0));
    }
  } else if constexpr (Codec::kDirect) {
    for (size_t i = 0; i < n; ++i) dst0[i] = f(a[i]);
  } else {
    for (size_t base = 0; base < n; base += kBlock) {
      size_t m = std::min(kBlock, n - base);
      C x[kBlock];
      Codec::decode(a + base, x, m);
      for (size_t j = 0; j < m; ++j) x[j] = f(x[j]);
      encodeOut<Codec, kDst1>(x, dst0 + base, dst1 + base, m);
    }
  }
}

// peer + local * scalar. For floating types the product is rounded on its own, as defined, so
// it is formed in a separate loop over a block: a compiler that contracts a * b + c into a fused
// multiply-add cannot change the result then.
template <class Codec, bool kDst1>
void preMulSumStep(const typename Codec::Store* peer, const typename Codec::Store* local,
                   typename Codec::Store* dst0, typename Codec::Store* dst1, size_t n,
                   typename Codec::Compute s) {
  using C = typename Codec::Compute;
  if constexpr (std::is_integral_v<C>) {
    binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, PreMulSumFn<C>{s});
  } else {
    for (size_t base = 0; base < n; base += kBlock) {
      size_t m = std::min(kBlock, n - base);
      C x[kBlock], y[kBlock];
      Codec::decode(peer + base, x, m);
      Codec::decode(local + base, y, m);
      for (size_t j = 0; j < m; ++j) y[j] = y[j] * s;
      for (size_t j = 0; j < m; ++j) x[j] = x[j] + y[j];
      encodeOut<Codec, kDst1>(x, dst0 + base, dst1 + base, m);
    }
  }
}

inline void copyBytes(const void* src, void* dst0, void* dst1, size_t bytes) {
  if (dst0 != src) std::memcpy(dst0, src, bytes);
  if (dst1 && dst1 != src && dst1 != dst0) std::memcpy(dst1, src, bytes);
}

// A missing op reduces as Sum. Nothing here constructs a RedOp: under the AVX2 target that
// would build RedOp's inline constructor for AVX2, and the linker could share that copy.
template <class Codec, bool kDst1>
void runOnType(const ReduceCopyArgs& args) {
  using S = typename Codec::Store;
  using C = typename Codec::Compute;
  const S* peer = static_cast<const S*>(args.peer);
  const S* local = static_cast<const S*>(args.local);
  S* dst0 = static_cast<S*>(args.dst0);
  S* dst1 = static_cast<S*>(args.dst1);
  size_t n = args.count;
  RedKind kind = args.op ? args.op->kind : RedKind::kSum;
  int nranks = args.op && args.op->nranks > 0 ? args.op->nranks : 1;
  bool avgFinal = kind == RedKind::kAvg && args.finalize;
  S scalarStore{};
  if (args.op) std::memcpy(&scalarStore, args.op->scalar, sizeof scalarStore);
  C scalar = Codec::toCompute(scalarStore);

  if (peer && local) {
    switch (kind) {
      case RedKind::kSum:
        return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, SumFn<C>{});
      case RedKind::kProd:
        return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, ProdFn<C>{});
      case RedKind::kMax:
        return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, MaxFn<C>{});
      case RedKind::kMin:
        return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, MinFn<C>{});
      case RedKind::kAvg:
        if (avgFinal) {
          return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, AvgFinalFn<C>{nranks});
        }
        return binaryStep<Codec, kDst1>(peer, local, dst0, dst1, n, SumFn<C>{});
      case RedKind::kPreMulSum:
        return preMulSumStep<Codec, kDst1>(peer, local, dst0, dst1, n, scalar);
    }
    return;
  }
  const S* src = peer ? peer : local;
  if (!peer && kind == RedKind::kPreMulSum) {
    return unaryStep<Codec, kDst1>(src, dst0, dst1, n, ScaleFn<C>{scalar});
  }
  if (avgFinal) return unaryStep<Codec, kDst1>(src, dst0, dst1, n, DivideFn<C>{nranks});
  copyBytes(src, dst0, kDst1 ? dst1 : nullptr, n * sizeof(S));
}

template <class Codec>
void runOnType(const ReduceCopyArgs& args) {
  if (args.dst1) {
    runOnType<Codec, true>(args);
  } else {
    runOnType<Codec, false>(args);
  }
}

// The whole of reduceCopy for one instruction set; HalfImpl lets a build with hardware half
// conversions bring its own codec for binary16.
template <class HalfImpl>
void runReduceCopy(const ReduceCopyArgs& args) {
  if (args.count == 0 || (!args.peer && !args.local) || !args.dst0) return;
  switch (args.type) {
    case DataType::kInt8:
      return runOnType<Plain<int8_t>>(args);
    case DataType::kUint8:
      return runOnType<Plain<uint8_t>>(args);
    case DataType::kInt32:
      return runOnType<Plain<int32_t>>(args);
    case DataType::kUint32:
      return runOnType<Plain<uint32_t>>(args);
    case DataType::kInt64:
      return runOnType<Plain<int64_t>>(args);
    case DataType::kUint64:
      return runOnType<Plain<uint64_t>>(args);
    case DataType::kFloat16:
      return runOnType<HalfImpl>(args);
    case DataType::kFloat32:
      return runOnType<Plain<float>>(args);
    case DataType::kFloat64:
      return runOnType<Plain<double>>(args);
    case DataType::kBfloat16:
      return runOnType<Bf16Codec>(args);
    case DataType::kFloat8e4m3:
      return runOnType<E4m3Codec>(args);
    case DataType::kFloat8e5m2:
      return runOnType<E5m2Codec>(args);
    case DataType::kNumTypes:
      break;
  }
}

}  // namespace
}  // namespace chorus
