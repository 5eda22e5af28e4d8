// Reduction kernels for host memory: one fused pass that combines a peer's partial result with
// this rank's input and writes up to two outputs (the user buffer and the next send slot).
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus {

// Same values as ncclDataType_t.
enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
  kNumTypes = 12,
};

// Bytes per element (0 for a value outside the enum). Inline: every collective call asks for it
// several times.
inline size_t dataTypeSize(DataType type) {
  static_assert(static_cast<int>(DataType::kNumTypes) == 12, "a size for every data type");
  // int8 uint8 int32 uint32 int64 uint64 float16 float32 float64 bfloat16 f8e4m3 f8e5m2
  constexpr unsigned char kSizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  const auto i = static_cast<unsigned>(type);
  return i < 12 ? kSizes[i] : 0;
}
const char* dataTypeName(
    DataType type);  // "float", "half", "bfloat16", "f8e4m3", ... as nccl-tests

enum class RedKind : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4, kPreMulSum = 5 };
const char* redKindName(RedKind kind);  // "sum", "prod", ..., "premulsum"

// A resolved reduction: the kind plus what Avg and PreMulSum need.
struct RedOp {
  RedKind kind = RedKind::kSum;
  // PreMulSum: the scalar in the element type's own encoding (first dataTypeSize bytes).
  alignas(8) unsigned char scalar[8] = {};
  // Avg: the divisor applied once, when the final result is produced.
  int nranks = 1;
};

// One fused step. Semantics per element i (T = element type):
//   operand(local) = local[i] * scalar  when op is PreMulSum, else local[i]
//   r = peer && local ? combine(peer[i], operand(local))
//     : peer          ? peer[i]
//     :                 operand(local)
//   if finalize and op is Avg: r = r / nranks   (integer division for integer types)
//   dst0[i] = r; if dst1: dst1[i] = r
// combine is +, *, max, min (Sum/Avg/PreMulSum use +). Half, bfloat16 and fp8 compute in float
// and round to nearest even once per step; fp8 saturates to the largest finite value (e4m3)
// or to infinity (e5m2) as the OCP FP8 formats define. Buffers may alias each other exactly
// (dst0 == local for in-place), never partially.
struct ReduceCopyArgs {
  const void* peer = nullptr;
  const void* local = nullptr;
  void* dst0 = nullptr;
  void* dst1 = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  const RedOp* op = nullptr;
  bool finalize = false;
};

void reduceCopy(const ReduceCopyArgs& args);

// Scalar conversions, exposed for tests and reference implementations.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);
float fp8e4m3ToFloat(uint8_t v);
uint8_t floatToFp8e4m3(float f);
float fp8e5m2ToFloat(uint8_t v);
uint8_t floatToFp8e5m2(float f);

}  // namespace chorus
