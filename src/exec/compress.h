// Wire formats of the compressed all-reduce (core/comm_compress.cc): float32 or float64 values
// sent as bfloat16, or as fp8 e4m3 with one float32 scale per chunk of kFp8ChunkElems elements
// (the chunk's largest magnitude maps to 448, e4m3's largest finite value). Encoding can carry
// error feedback: a residual, in the values' own type, that is added before encoding and then
// holds what the encoding lost, so that the loss is sent with the next call instead of dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "exec/reduce.h"

namespace chorus {

enum class Compression : int { kNone = 0, kBf16 = 1, kFp8 = 2 };

constexpr size_t kFp8ChunkElems = 256;

// "none", "bf16", "fp8".
const char* compressionName(Compression c);
// Parses one of those names (any case); anything else is an error naming source.
Result<Compression> parseCompression(const std::string& value, const std::string& source);
// Whether calls of this type are compressed (float32 and float64).
bool compressible(DataType type);

// Bytes that count elements take on the wire.
size_t compressedBytes(Compression c, size_t count);

// Encodes count elements of src (type float32 or float64) into dst (compressedBytes). With
// residual (count elements of the same type), encodes src + residual and leaves in residual
// what the encoding lost: (src + residual) - decode(dst).
void compressValues(Compression c, DataType type, const void* src, void* residual, size_t count,
                    void* dst);

// out[i] = decode(src)[i] (accumulate false), or out[i] += decode(src)[i] (accumulate true).
void decompressValues(Compression c, DataType type, const void* src, size_t count, void* out,
                      bool accumulate);

}  // namespace chorus
