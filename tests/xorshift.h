// A small reproducible pseudo-random generator for test programs (xorshift64): the same seed
// gives the same sequence on every rank and every run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus_test {

struct Xorshift {
  uint64_t s;  // never 0
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

}  // namespace chorus_test
