// The compressed all-reduce's codec loops (exec/compress.h), written once: compress.cc builds
// them for the baseline target and compress_avx2.cc again under an AVX2 target. Everything here
// has internal linkage, so the two builds never stand in for each other at link time. The
// element conversions are reduce_kernels.h's branch-free ones, so that both builds vectorise
// them and give the same bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/compress.h"
#include "exec/reduce_kernels.h"

namespace chorus {
namespace {

constexpr float kE4m3Max = 448.0f;

inline size_t fp8Chunks(size_t count) {
  return (count + kFp8ChunkElems - 1) / kFp8ChunkElems;
}

inline float decodeBf16(uint16_t v) {
  return floatOf(static_cast<uint32_t>(v) << 16);
}

// The scale of one fp8 chunk: its largest magnitude over 448 (1 when that is 0, or not finite,
// so that infinities saturate and NaN stays NaN; a NaN does not count towards the largest).
// Running maxima in a 16-byte vector (GCC and Clang vector extensions), combined at the end;
// every lane keeps its maximum against a NaN as one value would.
typedef float Vec4f __attribute__((vector_size(16)));
typedef double Vec2d __attribute__((vector_size(16)));
template <class T>
struct Vec16;
template <>
struct Vec16<float> {
  using type = Vec4f;
};
template <>
struct Vec16<double> {
  using type = Vec2d;
};

template <class T, bool kFeedback>
T largestMagnitude(const T* v, const T* residual, size_t m) {
  using V = typename Vec16<T>::type;
  constexpr size_t kLanes = sizeof(V) / sizeof(T);
  V acc = {};
  size_t j = 0;
  for (; j + kLanes <= m; j += kLanes) {
    V x;
    std::memcpy(&x, v + j, sizeof x);
    if (kFeedback) {
      V r;
      std::memcpy(&r, residual + j, sizeof r);
      x = x + r;
    }
    const V a = x < 0 ? -x : x;
    acc = a > acc ? a : acc;
  }
  T lanes[kLanes];
  std::memcpy(lanes, &acc, sizeof acc);
  T amax = 0;
  for (T x : lanes) amax = x > amax ? x : amax;
  for (; j < m; ++j) {
    const T a = std::fabs(kFeedback ? v[j] + residual[j] : v[j]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

template <class T>
float chunkScale(const T* v, const T* residual, size_t m) {
  const T amax = residual != nullptr ? largestMagnitude<T, true>(v, residual, m)
                                     : largestMagnitude<T, false>(v, residual, m);
  const float s = static_cast<float>(amax / static_cast<T>(kE4m3Max));
  return s > 0 && std::isfinite(s) ? s : 1.0f;
}

template <class T>
void encode(Compression c, const T* src, T* residual, size_t count, void* dst) {
  if (c == Compression::kBf16) {
    auto* out = static_cast<uint16_t*>(dst);
    if (residual != nullptr) {
      for (size_t i = 0; i < count; ++i) {
        const T x = static_cast<T>(src[i] + residual[i]);
        const uint16_t q = encodeBf16(static_cast<float>(x));
        out[i] = q;
        residual[i] = x - static_cast<T>(decodeBf16(q));
      }
    } else {
      for (size_t i = 0; i < count; ++i) out[i] = encodeBf16(static_cast<float>(src[i]));
    }
    return;
  }
  const size_t chunks = fp8Chunks(count);
  auto* scales = static_cast<float*>(dst);
  auto* codes = static_cast<uint8_t*>(dst) + chunks * sizeof(float);
  for (size_t k = 0; k < chunks; ++k) {
    const size_t base = k * kFp8ChunkElems;
    const size_t m = std::min(kFp8ChunkElems, count - base);
    const float scale = chunkScale(src + base, residual ? residual + base : nullptr, m);
    memcpy(&scales[k], &scale, sizeof scale);  // the stream has no alignment promise
    const float inv = 1.0f / scale;
    if (residual != nullptr) {
      for (size_t j = base; j < base + m; ++j) {
        const T x = static_cast<T>(src[j] + residual[j]);
        const uint8_t q = encodeE4m3(static_cast<float>(x) * inv);
        codes[j] = q;
        residual[j] = x - static_cast<T>(decodeE4m3Bits(q) * scale);
      }
    } else {
      for (size_t j = base; j < base + m; ++j)
        codes[j] = encodeE4m3(static_cast<float>(src[j]) * inv);
    }
  }
}

template <class T>
void decode(Compression c, const void* src, size_t count, T* out, bool accumulate) {
  if (c == Compression::kBf16) {
    const auto* in = static_cast<const uint16_t*>(src);
    if (accumulate)
      for (size_t i = 0; i < count; ++i) out[i] += static_cast<T>(decodeBf16(in[i]));
    else
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(decodeBf16(in[i]));
    return;
  }
  const size_t chunks = fp8Chunks(count);
  const auto* codes = static_cast<const uint8_t*>(src) + chunks * sizeof(float);
  for (size_t k = 0; k < chunks; ++k) {
    float scale;
    memcpy(&scale, static_cast<const char*>(src) + k * sizeof(float), sizeof scale);
    const size_t base = k * kFp8ChunkElems;
    const size_t m = std::min(kFp8ChunkElems, count - base);
    if (accumulate)
      for (size_t j = base; j < base + m; ++j)
        out[j] += static_cast<T>(decodeE4m3Bits(codes[j]) * scale);
    else
      for (size_t j = base; j < base + m; ++j)
        out[j] = static_cast<T>(decodeE4m3Bits(codes[j]) * scale);
  }
}

inline void compressAny(Compression c, DataType type, const void* src, void* residual, size_t count,
                        void* dst) {
  if (type == DataType::kFloat64)
    encode(c, static_cast<const double*>(src), static_cast<double*>(residual), count, dst);
  else
    encode(c, static_cast<const float*>(src), static_cast<float*>(residual), count, dst);
}

inline void decompressAny(Compression c, DataType type, const void* src, size_t count, void* out,
                          bool accumulate) {
  if (type == DataType::kFloat64)
    decode(c, src, count, static_cast<double*>(out), accumulate);
  else
    decode(c, src, count, static_cast<float*>(out), accumulate);
}

}  // namespace
}  // namespace chorus
