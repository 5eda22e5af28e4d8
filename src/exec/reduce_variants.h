// The instruction-set builds behind reduceCopy. reduceCopy runs the best one the CPU supports;
// tests call each directly so that every build is checked wherever it can run.
#pragma once

#include "exec/reduce.h"

namespace chorus {

// Baseline target; runs everywhere.
void reduceCopyPortable(const ReduceCopyArgs& args);

// AVX2 with F16C half conversions; call only where reduceCopyAvx2Supported() says so.
bool reduceCopyAvx2Supported();
void reduceCopyAvx2(const ReduceCopyArgs& args);

}  // namespace chorus
