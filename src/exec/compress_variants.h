// The instruction-set builds behind compressValues and decompressValues, which run the best one
// the CPU supports; tests call each directly so that every build is checked wherever it can run.
#pragma once

#include "exec/compress.h"

namespace chorus {

// Baseline target; runs everywhere.
void compressValuesPortable(Compression c, DataType type, const void* src, void* residual,
                            size_t count, void* dst);
void decompressValuesPortable(Compression c, DataType type, const void* src, size_t count,
                              void* out, bool accumulate);

// AVX2; call only where compressAvx2Supported() says so.
bool compressAvx2Supported();
void compressValuesAvx2(Compression c, DataType type, const void* src, void* residual, size_t count,
                        void* dst);
void decompressValuesAvx2(Compression c, DataType type, const void* src, size_t count, void* out,
                          bool accumulate);

}  // namespace chorus
