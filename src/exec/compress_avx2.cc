// The compressed all-reduce's codecs built for AVX2: the loops of compress_kernels.h compiled once
// more under a target pragma (eight floats or four doubles per instruction); results are
// bit-identical to the portable build (no FMA: products and sums round as there). Elsewhere than
// x86 this is a second baseline build that compressAvx2Supported() never picks.
#include "exec/compress_variants.h"

// Standard headers come before the target switch: nothing from them may be built for AVX2, or
// the linker could hand that copy to callers running on a CPU without it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#endif
#endif

#include "exec/compress_kernels.h"

namespace chorus {

void compressValuesAvx2(Compression c, DataType type, const void* src, void* residual, size_t count,
                        void* dst) {
  compressAny(c, type, src, residual, count, dst);
}

void decompressValuesAvx2(Compression c, DataType type, const void* src, size_t count, void* out,
                          bool accumulate) {
  decompressAny(c, type, src, count, out, accumulate);
}

}  // namespace chorus

#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

namespace chorus {

bool compressAvx2Supported() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = __builtin_cpu_supports("avx2");
  return supported;
#else
  return false;
#endif
}

}  // namespace chorus
