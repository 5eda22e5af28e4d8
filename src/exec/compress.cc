#include "exec/compress.h"

#include <strings.h>

#include "exec/compress_kernels.h"
#include "exec/compress_variants.h"

namespace chorus {

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

void compressValuesPortable(Compression c, DataType type, const void* src, void* residual,
                            size_t count, void* dst) {
  compressAny(c, type, src, residual, count, dst);
}

void decompressValuesPortable(Compression c, DataType type, const void* src, size_t count,
                              void* out, bool accumulate) {
  decompressAny(c, type, src, count, out, accumulate);
}

void compressValues(Compression c, DataType type, const void* src, void* residual, size_t count,
                    void* dst) {
  if (compressAvx2Supported())
    compressValuesAvx2(c, type, src, residual, count, dst);
  else
    compressValuesPortable(c, type, src, residual, count, dst);
}

void decompressValues(Compression c, DataType type, const void* src, size_t count, void* out,
                      bool accumulate) {
  if (compressAvx2Supported())
    decompressValuesAvx2(c, type, src, count, out, accumulate);
  else
    decompressValuesPortable(c, type, src, count, out, accumulate);
}

}  // namespace chorus
