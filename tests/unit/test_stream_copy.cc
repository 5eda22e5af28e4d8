// streamCopy copies exactly what memcpy would, for every alignment of both ends and lengths
// around the 16-byte and 64-byte steps of its streaming loop, and touches nothing else.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "exec/stream_copy.h"

namespace chorus {
namespace {

TEST(StreamCopy, MatchesMemcpyForEveryAlignmentAndLength) {
  std::vector<uint8_t> src(4096 + 64), dst(4096 + 128);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t srcOff = 0; srcOff < 17; ++srcOff)
    for (size_t dstOff = 0; dstOff < 17; ++dstOff)
      for (size_t len : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(63),
                         size_t(64), size_t(65), size_t(127), size_t(200), size_t(4000)}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        streamCopy(dst.data() + dstOff, src.data() + srcOff, len);
        for (size_t i = 0; i < dst.size(); ++i) {
          uint8_t want = i >= dstOff && i < dstOff + len ? src[srcOff + i - dstOff] : 0xEE;
          ASSERT_EQ(dst[i], want) << "src+" << srcOff << " dst+" << dstOff << " len " << len
                                  << " byte " << i;
        }
      }
}

// Outputs stream from half the last-level cache on, never below 4 MiB, 16 MiB when the cache
// is unknown.
TEST(StreamCopy, DefaultThresholdFollowsTheLastLevelCache) {
  EXPECT_EQ(defaultStreamBytes(32ull << 20), 16ll << 20);
  EXPECT_EQ(defaultStreamBytes(105ull << 20), (105ll << 20) / 2);
  EXPECT_EQ(defaultStreamBytes(2ull << 20), 4ll << 20);
  EXPECT_EQ(defaultStreamBytes(0), 16ll << 20);
}

}  // namespace
}  // namespace chorus
