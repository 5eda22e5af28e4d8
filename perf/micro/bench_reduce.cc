// Throughput of the host reduction kernels: the portable and AVX2 builds of reduceCopy for every
// data type and reduction, in the two shapes a ring step uses, next to a plain memcpy of the same
// bytes. Rates count the bytes read plus the bytes written.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "exec/reduce.h"
#include "exec/reduce_variants.h"
#include "micro_main.h"

namespace chorus::micro {
namespace {

using ReduceFn = void (*)(const ReduceCopyArgs&);

// L1-resident, about L2, and well past the last-level cache.
constexpr size_t kSizes[] = {size_t(4) << 10, size_t(256) << 10, size_t(64) << 20};
constexpr size_t kMaxBytes = (size_t(64) << 20) + 4096;  // room for an offset start

// The default run: float sum in every shape and size, every type at 256 KiB and every reduction
// at 256 KiB (recv_reduce_send), and the memcpy lines. --benchmark_filter=all runs the matrix.
constexpr const char* kDefaultFilter =
    "^memcpy/|/float/sum/|/recv_reduce_send/[^/]+/sum/256KiB|/recv_reduce_send/float/[^/]+/256KiB";

enum class Form {
  kRecvReduceSend,      // peer + local -> dst0
  kRecvReduceCopySend,  // peer + local -> dst0 and dst1
};

const char* formName(Form form) {
  return form == Form::kRecvReduceSend ? "recv_reduce_send" : "recv_reduce_copy_send";
}

// Writes v (small and exactly representable in every type) in the encoding of `type`.
void encode(DataType type, double v, unsigned char* out) {
  uint64_t bits = 0;
  switch (type) {
    case DataType::kFloat16:
      bits = floatToHalf(static_cast<float>(v));
      break;
    case DataType::kBfloat16:
      bits = floatToBfloat16(static_cast<float>(v));
      break;
    case DataType::kFloat8e4m3:
      bits = floatToFp8e4m3(static_cast<float>(v));
      break;
    case DataType::kFloat8e5m2:
      bits = floatToFp8e5m2(static_cast<float>(v));
      break;
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, sizeof(u));
      bits = u;
      break;
    }
    case DataType::kFloat64:
      std::memcpy(&bits, &v, sizeof(bits));
      break;
    default:
      bits = static_cast<uint64_t>(v);
      break;
  }
  // Little-endian: the low bytes are the value in the narrower types.
  std::memcpy(out, &bits, dataTypeSize(type));
}

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

// The four buffers of a step, allocated and touched once so that no timed loop takes page faults.
// The inputs hold a short pattern of values whose sums and products stay small and exact in
// every type: no kernel runs on denormals, NaNs or saturated values.
class Buffers {
 public:
  static Buffers& get() {
    static Buffers buffers;
    return buffers;
  }

  void prepare(DataType type, size_t bytes) {
    if (type == filledType_ && bytes <= filledBytes_) return;
    fillInputs(type, bytes);
    filledType_ = type;
    filledBytes_ = bytes;
  }

  unsigned char* peer() const { return peer_.get(); }
  unsigned char* local() const { return local_.get(); }
  unsigned char* dst0() const { return dst0_.get(); }
  unsigned char* dst1() const { return dst1_.get(); }

 private:
  Buffers() : peer_(allocate()), local_(allocate()), dst0_(allocate()), dst1_(allocate()) {}

  static Buffer allocate() {
    // 2 MiB alignment lets transparent huge pages back the large buffers.
    auto* p = static_cast<unsigned char*>(std::aligned_alloc(size_t(2) << 20, kMaxBytes));
    if (p == nullptr) std::abort();
    std::memset(p, 0, kMaxBytes);
    return Buffer(p);
  }

  void fillInputs(DataType type, size_t bytes) {
    const size_t size = dataTypeSize(type);
    constexpr size_t kPattern = 64;  // elements: 1, 1.25, 1.5, 1.75, 1, ... (1..4 for integers)
    const size_t seed = std::min(bytes, kPattern * size);
    const bool integer = type <= DataType::kUint64;
    for (size_t i = 0; i * size < seed; ++i) {
      double v = integer ? 1.0 + double(i % 4) : 1.0 + 0.25 * double(i % 4);
      encode(type, v, peer() + i * size);
      encode(type, v + (integer ? 1.0 : 0.25), local() + i * size);
    }
    for (size_t done = seed; done < bytes;) {
      size_t n = std::min(done, bytes - done);
      std::memcpy(peer() + done, peer(), n);
      std::memcpy(local() + done, local(), n);
      done += n;
    }
  }

  Buffer peer_, local_, dst0_, dst1_;
  DataType filledType_ = DataType::kNumTypes;
  size_t filledBytes_ = 0;
};

// Every step finalizes, so avg includes its division (a ring applies it in the last step only).
// offset: bytes the local input and the output start past their buffers' alignment (16: an
// ordinary allocation's guarantee), the peer's slot staying aligned as a FIFO slot is.
void benchReduce(benchmark::State& state, ReduceFn reduce, Form form, DataType type, RedKind kind,
                 size_t bytes, size_t offset) {
  Buffers& buffers = Buffers::get();
  buffers.prepare(type, bytes);
  RedOp op;
  op.kind = kind;
  if (kind == RedKind::kAvg) op.nranks = 2;
  if (kind == RedKind::kPreMulSum) encode(type, 1.0, op.scalar);

  ReduceCopyArgs args;
  args.peer = buffers.peer();
  args.local = buffers.local() + offset;
  args.dst0 = buffers.dst0() + offset;
  args.dst1 = form == Form::kRecvReduceCopySend ? buffers.dst1() + offset : nullptr;
  args.count = bytes / dataTypeSize(type);
  args.type = type;
  args.op = &op;
  args.finalize = true;

  for (auto _ : state) {
    reduce(args);
    benchmark::ClobberMemory();
  }
  const double streams = form == Form::kRecvReduceSend ? 3.0 : 4.0;  // 2 reads, 1 or 2 writes
  setBytesPerSecond(state, streams * static_cast<double>(bytes));
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(args.count));
}

void benchMemcpy(benchmark::State& state, size_t bytes) {
  Buffers& buffers = Buffers::get();
  buffers.prepare(DataType::kUint8, bytes);
  for (auto _ : state) {
    std::memcpy(buffers.dst0(), buffers.local(), bytes);
    benchmark::ClobberMemory();
  }
  setBytesPerSecond(state, 2.0 * static_cast<double>(bytes));
}

void registerAll() {
  for (size_t bytes : kSizes)
    benchmark::RegisterBenchmark(("memcpy/" + sizeLabel(bytes)).c_str(), benchMemcpy, bytes);
  // The dispatched kernel on a local input and an output 16 bytes past a cache line.
  for (size_t bytes : kSizes)
    benchmark::RegisterBenchmark(
        ("reduce/offset16/recv_reduce_send/float/sum/" + sizeLabel(bytes)).c_str(), benchReduce,
        reduceCopy, Form::kRecvReduceSend, DataType::kFloat32, RedKind::kSum, bytes, size_t{16});

  struct Variant {
    const char* name;
    ReduceFn fn;
  };
  // reduceCopy itself dispatches to the AVX2 build wherever it is registered here.
  Variant variants[] = {{"portable", reduceCopyPortable}, {"avx2", reduceCopyAvx2}};
  const RedKind kinds[] = {RedKind::kSum, RedKind::kProd, RedKind::kMax,
                           RedKind::kMin, RedKind::kAvg,  RedKind::kPreMulSum};
  for (const Variant& variant : variants) {
    if (variant.fn == reduceCopyAvx2 && !reduceCopyAvx2Supported()) continue;
    for (Form form : {Form::kRecvReduceSend, Form::kRecvReduceCopySend}) {
      for (int t = 0; t < static_cast<int>(DataType::kNumTypes); ++t) {
        DataType type = static_cast<DataType>(t);
        for (RedKind kind : kinds) {
          for (size_t bytes : kSizes) {
            std::string name = std::string("reduce/") + variant.name + "/" + formName(form) + "/" +
                               dataTypeName(type) + "/" + redKindName(kind) + "/" +
                               sizeLabel(bytes);
            benchmark::RegisterBenchmark(name.c_str(), benchReduce, variant.fn, form, type, kind,
                                         bytes, size_t{0});
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace chorus::micro

int main(int argc, char** argv) {
  chorus::micro::registerAll();
  return chorus::micro::runBenchmarks(
      argc, argv,
      {"--benchmark_min_time=0.1",
       std::string("--benchmark_filter=") + chorus::micro::kDefaultFilter});
}
