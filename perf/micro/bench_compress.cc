// Throughput of the compressed all-reduce's codecs (exec/compress.h): the portable and AVX2
// builds, encoding with error feedback (as the all-reduce calls it) and decoding into a sum, for
// bf16 and fp8 from float and double. Rates count the values' own bytes (the uncompressed side),
// the figure to set against a link's rate.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exec/compress.h"
#include "exec/compress_variants.h"
#include "micro_main.h"

namespace chorus::micro {
namespace {

using CompressFn = void (*)(Compression, DataType, const void*, void*, size_t, void*);
using DecompressFn = void (*)(Compression, DataType, const void*, size_t, void*, bool);

// About L2, and well past the last-level cache.
constexpr size_t kSizes[] = {size_t(256) << 10, size_t(64) << 20};

struct Buffer {
  std::unique_ptr<unsigned char, decltype(&std::free)> p{nullptr, &std::free};
  explicit Buffer(size_t bytes)
      : p(static_cast<unsigned char*>(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096)),
          &std::free) {}
};

// Gradient-like values: many magnitudes, both signs.
template <class T>
void fillValues(T* v, size_t count) {
  for (size_t i = 0; i < count; ++i)
    v[i] = static_cast<T>(std::sin(0.37 * static_cast<double>(i)) * std::exp(-1e-4 * (i % 9973)));
}

size_t elementBytes(DataType type) {
  return type == DataType::kFloat64 ? 8 : 4;
}

void fill(DataType type, void* v, size_t count) {
  if (type == DataType::kFloat64)
    fillValues(static_cast<double*>(v), count);
  else
    fillValues(static_cast<float*>(v), count);
}

void benchEncode(benchmark::State& state, CompressFn fn, Compression c, DataType type,
                 size_t bytes) {
  const size_t count = bytes / elementBytes(type);
  Buffer src(bytes), residual(bytes), wire(compressedBytes(c, count));
  if (!src.p || !residual.p || !wire.p) {
    state.SkipWithError("out of memory");
    return;
  }
  fill(type, src.p.get(), count);
  std::fill(residual.p.get(), residual.p.get() + bytes, 0);
  for (auto _ : state) {
    fn(c, type, src.p.get(), residual.p.get(), count, wire.p.get());
    benchmark::DoNotOptimize(wire.p.get());
    benchmark::ClobberMemory();
  }
  setBytesPerSecond(state, static_cast<double>(bytes));
}

void benchDecode(benchmark::State& state, DecompressFn fn, Compression c, DataType type,
                 size_t bytes) {
  const size_t count = bytes / elementBytes(type);
  Buffer src(bytes), out(bytes), wire(compressedBytes(c, count));
  if (!src.p || !out.p || !wire.p) {
    state.SkipWithError("out of memory");
    return;
  }
  fill(type, src.p.get(), count);
  compressValues(c, type, src.p.get(), nullptr, count, wire.p.get());
  std::fill(out.p.get(), out.p.get() + bytes, 0);
  for (auto _ : state) {
    fn(c, type, wire.p.get(), count, out.p.get(), true);
    benchmark::DoNotOptimize(out.p.get());
    benchmark::ClobberMemory();
  }
  setBytesPerSecond(state, static_cast<double>(bytes));
}

void registerAll() {
  struct Variant {
    const char* name;
    CompressFn encode;
    DecompressFn decode;
    bool supported;
  };
  const Variant variants[] = {
      {"portable", compressValuesPortable, decompressValuesPortable, true},
      {"avx2", compressValuesAvx2, decompressValuesAvx2, compressAvx2Supported()}};
  for (const Variant& v : variants) {
    if (!v.supported) continue;
    for (Compression c : {Compression::kBf16, Compression::kFp8}) {
      for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
        for (size_t bytes : kSizes) {
          const std::string tail = std::string(v.name) + "/" + compressionName(c) + "/" +
                                   dataTypeName(type) + "/" + sizeLabel(bytes);
          benchmark::RegisterBenchmark(("encode_feedback/" + tail).c_str(), benchEncode, v.encode,
                                       c, type, bytes);
          benchmark::RegisterBenchmark(("decode_accumulate/" + tail).c_str(), benchDecode, v.decode,
                                       c, type, bytes);
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus::micro

int main(int argc, char** argv) {
  chorus::micro::registerAll();
  return chorus::micro::runBenchmarks(argc, argv, {"--benchmark_min_time=0.1"});
}
