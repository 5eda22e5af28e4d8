// Checks an implementation of reduceCopy's semantics against the host kernel reduceCopy, case by
// case: every reduction, operand shape, output count, length and pointer layout of one data type,
// on random inputs that include NaN, infinities and values that overflow.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "common/status.h"
#include "exec/reduce.h"

namespace chorus {
namespace reducecheck {

// Runs one reduce-copy. `args` points into `arena` (host memory, 256-byte aligned, `bytes`
// long), which holds the sources and the destinations' prior contents; the runner leaves the
// arena as the implementation under test left its own copy of it.
using ArenaRunner =
    std::function<Status(unsigned char* arena, size_t bytes, const ReduceCopyArgs& args)>;

// kInt8 ... kFloat8e5m2, in enum order.
std::vector<DataType> allDataTypes();

// Every case for `type`, reported through GoogleTest failures.
void checkAllCases(DataType type, const ArenaRunner& run);

}  // namespace reducecheck
}  // namespace chorus
