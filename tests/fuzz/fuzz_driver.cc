// A stand-in for libFuzzer's main where the fuzzer is not built (gcc): runs the target over
// every seed file given (files, or directories of them), then over -runs=N inputs made from
// the seeds by random edits (bytes flipped, replaced, inserted, deleted, repeated; seeds
// spliced; input cut short), reproducibly (-seed=S). Prints how many inputs ran. A failure is a
// crash or an abort inside the target.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz.h"
#include "tests/xorshift.h"

namespace {

using Bytes = std::vector<uint8_t>;

void readSeeds(const std::string& path, std::vector<Bytes>* out) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz driver: no such seed file or directory: %s\n", path.c_str());
    std::exit(2);
  }
  if (S_ISDIR(st.st_mode)) {
    DIR* d = opendir(path.c_str());
    if (d == nullptr) return;
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') readSeeds(path + "/" + e->d_name, out);
    closedir(d);
    return;
  }
  std::ifstream f(path, std::ios::binary);
  out->emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

using Rng = chorus_test::Xorshift;

// Interesting bytes for text and binary formats alike.
const uint8_t kSpecial[] = {0,   1,   0x7f, 0x80, 0xff, '"', '\\', ',', ':', '[',
                            ']', '{', '}',  '^',  '=',  '-', '0',  '9', 'e', ' '};

Bytes mutate(const std::vector<Bytes>& seeds, Rng& rng) {
  Bytes b = seeds.empty() ? Bytes() : seeds[rng.below(seeds.size())];
  const int edits = 1 + static_cast<int>(rng.below(8));
  for (int e = 0; e < edits; ++e) {
    const size_t pos = rng.below(b.size() + 1);
    switch (rng.below(7)) {
      case 0:
        if (!b.empty()) b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:
        if (!b.empty()) b[rng.below(b.size())] = static_cast<uint8_t>(rng.next());
        break;
      case 2:
        b.insert(b.begin() + static_cast<long>(pos), kSpecial[rng.below(sizeof(kSpecial))]);
        break;
      case 3:
        if (pos < b.size()) b.erase(b.begin() + static_cast<long>(pos));
        break;
      case 4: {  // repeat a slice
        if (b.empty()) break;
        const size_t from = rng.below(b.size()), n = 1 + rng.below(16);
        Bytes slice(b.begin() + static_cast<long>(from),
                    b.begin() + static_cast<long>(std::min(b.size(), from + n)));
        b.insert(b.begin() + static_cast<long>(pos), slice.begin(), slice.end());
        break;
      }
      case 5: {  // splice another seed's tail
        if (seeds.empty()) break;
        const Bytes& o = seeds[rng.below(seeds.size())];
        const size_t from = rng.below(o.size() + 1);
        b.resize(pos);
        b.insert(b.end(), o.begin() + static_cast<long>(from), o.end());
        break;
      }
      default:
        b.resize(pos);
        break;
    }
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  long runs = 10000;
  uint64_t seed = 0x2545f4914f6cdd1dull;
  std::vector<Bytes> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-runs=", 6) == 0)
      runs = std::strtol(argv[i] + 6, nullptr, 10);
    else if (std::strncmp(argv[i], "-seed=", 6) == 0)
      seed = std::strtoull(argv[i] + 6, nullptr, 10) | 1;
    else
      readSeeds(argv[i], &seeds);
  }
  long ran = 0;
  for (const Bytes& s : seeds) {
    LLVMFuzzerTestOneInput(s.data(), s.size());
    ++ran;
  }
  Rng rng{seed};
  for (long i = 0; i < runs; ++i) {
    const Bytes b = mutate(seeds, rng);
    LLVMFuzzerTestOneInput(b.data(), b.size());
    ++ran;
  }
  std::printf("fuzz driver: %ld inputs (%zu seeds), no failure\n", ran, seeds.size());
  return 0;
}
