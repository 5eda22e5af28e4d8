// Fuzz targets: each file defines LLVMFuzzerTestOneInput for one family of parsers of input
// that may come from outside (the network, the unique id, files, the environment). Built with
// clang's libFuzzer by tools/dev.sh fuzz (-Dfuzz=enabled), or with fuzz_driver.cc as an ordinary
// program that the test suite runs over seeds and pseudo-random variations of them. A target
// checks properties (a parse that succeeds survives a round trip) and aborts on a violation;
// a crash, a sanitizer report or a hang is the other kind of failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
