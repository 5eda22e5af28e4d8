// reduceCopy built for AVX2, with F16C converting half. The kernel bodies are the portable
// templates, compiled once more here under a target pragma; results are bit-identical.
#include "exec/reduce_variants.h"

#if defined(__x86_64__) || defined(__i386__)

// Standard headers come before the target switch: nothing from them may be built for AVX2, or
// the linker could hand that copy to callers running on a CPU without it.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif

#include "exec/reduce_kernels.h"

namespace chorus {
namespace {

// Eight halves per instruction; the scalar tail uses the portable conversions, which round the
// same way (nearest even, overflow to infinity, NaN kept quiet with its payload).
struct F16cHalfCodec {
  using Store = uint16_t;
  using Compute = float;
  static constexpr bool kDirect = false;
  static float toCompute(uint16_t v) { return decodeHalfBits(v); }
  static uint16_t fromCompute(float f) { return encodeHalf(f); }

  static void decode(const uint16_t* src, float* __restrict out, size_t m) {
    size_t j = 0;
    for (; j + 8 <= m; j += 8) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
      _mm256_storeu_ps(out + j, _mm256_cvtph_ps(h));
    }
    for (; j < m; ++j) out[j] = decodeHalfBits(src[j]);
  }

  static void encode(const float* __restrict in, uint16_t* dst, size_t m) {
    size_t j = 0;
    for (; j + 8 <= m; j += 8) {
      __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), h);
    }
    for (; j < m; ++j) dst[j] = encodeHalf(in[j]);
  }
};

void runAvx2(const ReduceCopyArgs& args) {
  runReduceCopy<F16cHalfCodec>(args);
}

}  // namespace
}  // namespace chorus

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace chorus {

// The F16C bit is read from cpuid directly: not every compiler's __builtin_cpu_supports knows
// it. It needs no OS check of its own beyond AVX2's, which covers the same register state.
bool reduceCopyAvx2Supported() {
  static const bool supported = [] {
    unsigned eax, ebx, ecx, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return supported;
}

void reduceCopyAvx2(const ReduceCopyArgs& args) {
  runAvx2(args);
}

}  // namespace chorus

#else  // not x86

namespace chorus {

bool reduceCopyAvx2Supported() {
  return false;
}
void reduceCopyAvx2(const ReduceCopyArgs& args) {
  reduceCopyPortable(args);
}

}  // namespace chorus

#endif
