#include "exec/compress.h"

#include <strings.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "exec/reduce_kernels.h"

namespace chorus {

namespace {

constexpr float kE4m3Max = 448.0f;

size_t fp8Chunks(size_t count) {
  return (count + kFp8ChunkElems - 1) / kFp8ChunkElems;
}

float decodeBf16(uint16_t v) {
  return floatOf(static_cast<uint32_t>(v) << 16);
}

// Every e4m3 code's value, for decoding by lookup.
struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) value[c] = decodeE4m3Bits(static_cast<uint32_t>(c));
  }
};
const E4m3Table& e4m3Table() {
  static const E4m3Table table;
  return table;
}

// The scale of one fp8 chunk: its largest magnitude over 448 (1 when that is 0, or not finite,
// so that infinities saturate and NaN stays NaN; a NaN does not count towards the largest).
template <class T>
float chunkScale(const T* v, const T* residual, size_t m) {
  T amax = 0;
  if (residual != nullptr)
    for (size_t j = 0; j < m; ++j) amax = std::max(amax, std::fabs(v[j] + residual[j]));
  else
    for (size_t j = 0; j < m; ++j) amax = std::max(amax, std::fabs(v[j]));
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
  const float* table = e4m3Table().value;
  for (size_t k = 0; k < chunks; ++k) {
    float scale;
    memcpy(&scale, static_cast<const char*>(src) + k * sizeof(float), sizeof scale);
    const size_t base = k * kFp8ChunkElems;
    const size_t m = std::min(kFp8ChunkElems, count - base);
    if (accumulate)
      for (size_t j = base; j < base + m; ++j) out[j] += static_cast<T>(table[codes[j]] * scale);
    else
      for (size_t j = base; j < base + m; ++j) out[j] = static_cast<T>(table[codes[j]] * scale);
  }
}

}  // namespace

const char* compressionName(Compression c) {
  switch (c) {
    case Compression::kBf16:
      return "bf16";
    case Compression::kFp8:
      return "fp8";
    default:
      return "none";
  }
}

Result<Compression> parseCompression(const std::string& value, const std::string& source) {
  for (Compression c : {Compression::kNone, Compression::kBf16, Compression::kFp8})
    if (strcasecmp(value.c_str(), compressionName(c)) == 0) return c;
  if (value.empty()) return Compression::kNone;
  return invalidArgument("%s=\"%s\" is not a compression (accepted: none, bf16, fp8)",
                         source.c_str(), value.c_str());
}

bool compressible(DataType type) {
  return type == DataType::kFloat32 || type == DataType::kFloat64;
}

size_t compressedBytes(Compression c, size_t count) {
  switch (c) {
    case Compression::kBf16:
      return count * 2;
    case Compression::kFp8:
      return count + fp8Chunks(count) * sizeof(float);
    default:
      return 0;
  }
}

void compressValues(Compression c, DataType type, const void* src, void* residual, size_t count,
                    void* dst) {
  if (type == DataType::kFloat64)
    encode(c, static_cast<const double*>(src), static_cast<double*>(residual), count, dst);
  else
    encode(c, static_cast<const float*>(src), static_cast<float*>(residual), count, dst);
}

void decompressValues(Compression c, DataType type, const void* src, size_t count, void* out,
                      bool accumulate) {
  if (type == DataType::kFloat64)
    decode(c, src, count, static_cast<double*>(out), accumulate);
  else
    decode(c, src, count, static_cast<float*>(out), accumulate);
}

}  // namespace chorus
