// Host reduction kernels: the public entry points, the portable build of the kernels and the
// choice between builds. The kernel bodies live in reduce_kernels.h.
#include "exec/reduce.h"

#include "exec/reduce_kernels.h"
#include "exec/reduce_variants.h"

namespace chorus {

const char* redKindName(RedKind kind) {
  switch (kind) {
    case RedKind::kSum:
      return "sum";
    case RedKind::kProd:
      return "prod";
    case RedKind::kMax:
      return "max";
    case RedKind::kMin:
      return "min";
    case RedKind::kAvg:
      return "avg";
    case RedKind::kPreMulSum:
      return "premulsum";
  }
  return "?";
}

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::kInt8:
      return "int8";
    case DataType::kUint8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kUint32:
      return "uint32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint64:
      return "uint64";
    case DataType::kFloat16:
      return "half";
    case DataType::kFloat32:
      return "float";
    case DataType::kFloat64:
      return "double";
    case DataType::kBfloat16:
      return "bfloat16";
    case DataType::kFloat8e4m3:
      return "f8e4m3";
    case DataType::kFloat8e5m2:
      return "f8e5m2";
    case DataType::kNumTypes:
      break;
  }
  return "unknown";
}

void reduceCopyPortable(const ReduceCopyArgs& args) {
  runReduceCopy<HalfCodec>(args);
}

void reduceCopy(const ReduceCopyArgs& args) {
  if (reduceCopyAvx2Supported()) {
    reduceCopyAvx2(args);
  } else {
    reduceCopyPortable(args);
  }
}

float halfToFloat(uint16_t h) {
  return HalfCodec::toCompute(h);
}
uint16_t floatToHalf(float f) {
  return HalfCodec::fromCompute(f);
}
float bfloat16ToFloat(uint16_t b) {
  return Bf16Codec::toCompute(b);
}
uint16_t floatToBfloat16(float f) {
  return Bf16Codec::fromCompute(f);
}
float fp8e4m3ToFloat(uint8_t v) {
  return E4m3Codec::toCompute(v);
}
uint8_t floatToFp8e4m3(float f) {
  return E4m3Codec::fromCompute(f);
}
float fp8e5m2ToFloat(uint8_t v) {
  return E5m2Codec::toCompute(v);
}
uint8_t floatToFp8e5m2(float f) {
  return E5m2Codec::fromCompute(f);
}

}  // namespace chorus
