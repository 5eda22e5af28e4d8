// The compressed all-reduce's wire formats (exec/compress.h): sizes, rounding bounds of bf16 and
// of fp8 with per-chunk scales, special values, and that error feedback keeps the sum of many
// encodings of the same values within one rounding of the exact sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/compress.h"
#include "exec/compress_variants.h"

namespace chorus {
namespace {

std::vector<float> randomValues(size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng) * scale;
  return v;
}

template <class T>
std::vector<T> roundTrip(Compression c, DataType type, const std::vector<T>& in) {
  std::vector<char> wire(compressedBytes(c, in.size()));
  compressValues(c, type, in.data(), nullptr, in.size(), wire.data());
  std::vector<T> out(in.size());
  decompressValues(c, type, wire.data(), in.size(), out.data(), false);
  return out;
}

TEST(Compress, NamesAndSizes) {
  EXPECT_EQ(parseCompression("BF16", "CHORUS_COMPRESS").value(), Compression::kBf16);
  EXPECT_EQ(parseCompression("fp8", "CHORUS_COMPRESS").value(), Compression::kFp8);
  EXPECT_EQ(parseCompression("none", "CHORUS_COMPRESS").value(), Compression::kNone);
  Result<Compression> bad = parseCompression("int4", "CHORUS_COMPRESS");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHORUS_COMPRESS"), std::string::npos);
  EXPECT_EQ(compressedBytes(Compression::kBf16, 1000), 2000u);
  // One float scale per started chunk of 256 values.
  EXPECT_EQ(compressedBytes(Compression::kFp8, 256), 256u + 4u);
  EXPECT_EQ(compressedBytes(Compression::kFp8, 257), 257u + 8u);
  EXPECT_EQ(compressedBytes(Compression::kFp8, 0), 0u);
  EXPECT_TRUE(compressible(DataType::kFloat32));
  EXPECT_TRUE(compressible(DataType::kFloat64));
  EXPECT_FALSE(compressible(DataType::kFloat16));
  EXPECT_FALSE(compressible(DataType::kInt32));
}

// bfloat16 keeps 8 significant bits: round to nearest is within half a unit in the last place,
// 2^(e-8) for a value in [2^e, 2^(e+1)).
TEST(Compress, Bf16RoundsToNearest) {
  std::vector<float> v = randomValues(10000, 1, 100.0f);
  v.push_back(1.0f);
  v.push_back(0.0f);
  v.push_back(-3.0f);
  std::vector<float> back = roundTrip(Compression::kBf16, DataType::kFloat32, v);
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0) {
      EXPECT_LE(std::fabs(back[i] - v[i]), std::ldexp(1.0f, std::ilogb(v[i]) - 8)) << v[i];
    }
    uint32_t bits;
    std::memcpy(&bits, &back[i], 4);
    EXPECT_EQ(bits & 0xffffu, 0u) << "not a bfloat16 value: " << back[i];
  }
  EXPECT_EQ(back[v.size() - 3], 1.0f);
  EXPECT_EQ(back[v.size() - 2], 0.0f);
  EXPECT_EQ(back[v.size() - 1], -3.0f);
}

// fp8 e4m3 has 4 significant bits; the chunk's scale maps its largest magnitude to 448, so a
// value is within 2^-4 of itself (relative) or, near zero, within the smallest step.
TEST(Compress, Fp8ScalesEachChunk) {
  for (DataType type : {DataType::kFloat32, DataType::kFloat64}) {
    std::vector<float> f = randomValues(1000, 2, 1.0f);
    // Chunks of very different magnitudes each keep their own precision.
    for (size_t i = 256; i < 512; ++i) f[i] *= 1e6f;
    for (size_t i = 512; i < 768; ++i) f[i] *= 1e-6f;
    std::vector<double> d(f.begin(), f.end());
    std::vector<double> back(f.size());
    if (type == DataType::kFloat32) {
      std::vector<float> b = roundTrip(Compression::kFp8, type, f);
      back.assign(b.begin(), b.end());
    } else {
      back = roundTrip(Compression::kFp8, type, d);
    }
    for (size_t k = 0; k * kFp8ChunkElems < d.size(); ++k) {
      double amax = 0;
      const size_t end = std::min(d.size(), (k + 1) * kFp8ChunkElems);
      for (size_t i = k * kFp8ChunkElems; i < end; ++i) amax = std::fmax(amax, std::fabs(d[i]));
      const double scale = amax / 448;
      for (size_t i = k * kFp8ChunkElems; i < end; ++i)
        EXPECT_LE(std::fabs(back[i] - d[i]),
                  std::fmax(std::ldexp(std::fabs(d[i]), -4), scale * std::ldexp(1.0, -10)) * 1.0001)
            << "element " << i << " " << d[i];
    }
  }
  // The largest magnitude of a chunk survives exactly (448 x scale).
  std::vector<float> one = {0.5f, -3.0f, 1.0f};
  EXPECT_FLOAT_EQ(roundTrip(Compression::kFp8, DataType::kFloat32, one)[1], -3.0f);
}

TEST(Compress, SpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {1.0f, nan, 2.0f, 0.0f};
  for (Compression c : {Compression::kBf16, Compression::kFp8}) {
    std::vector<float> back = roundTrip(c, DataType::kFloat32, v);
    EXPECT_TRUE(std::isnan(back[1])) << compressionName(c);
    EXPECT_EQ(back[3], 0.0f);
  }
  EXPECT_TRUE(
      std::isinf(roundTrip(Compression::kBf16, DataType::kFloat32, std::vector<float>{inf})[0]));
  // No infinity in e4m3: the chunk's scale stays 1 and the value saturates.
  EXPECT_EQ(roundTrip(Compression::kFp8, DataType::kFloat32, std::vector<float>{inf})[0], 448.0f);
  std::vector<float> zeros(300, 0.0f);
  for (float x : roundTrip(Compression::kFp8, DataType::kFloat32, zeros)) EXPECT_EQ(x, 0.0f);
}

// Sending the same values T times: without feedback the rounding error adds up T times; with
// it, the decoded values sum to T x the values minus the last residual (one rounding).
TEST(Compress, ErrorFeedbackKeepsTheSumExact) {
  for (Compression c : {Compression::kBf16, Compression::kFp8}) {
    const std::vector<float> x = randomValues(600, 3, 1.0f);
    std::vector<float> residual(x.size(), 0.0f);
    std::vector<double> sum(x.size(), 0.0), plain(x.size(), 0.0);
    std::vector<char> wire(compressedBytes(c, x.size()));
    std::vector<float> decoded(x.size());
    const int rounds = 200;
    const std::vector<float> once = roundTrip(c, DataType::kFloat32, x);
    for (int t = 0; t < rounds; ++t) {
      compressValues(c, DataType::kFloat32, x.data(), residual.data(), x.size(), wire.data());
      decompressValues(c, DataType::kFloat32, wire.data(), x.size(), decoded.data(), false);
      for (size_t i = 0; i < x.size(); ++i) {
        sum[i] += decoded[i];
        plain[i] += once[i];
      }
    }
    double worstFeedback = 0, worstPlain = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double exact = static_cast<double>(x[i]) * rounds;
      worstFeedback = std::fmax(worstFeedback, std::fabs(sum[i] - exact));
      worstPlain = std::fmax(worstPlain, std::fabs(plain[i] - exact));
      // The identity itself: decoded values plus the final residual are the inputs' sum.
      EXPECT_NEAR(sum[i] + residual[i], exact, 1e-4) << compressionName(c) << " " << i;
    }
    // Bounded by about one rounding step (of a value near 1), against rounds of them.
    EXPECT_LT(worstFeedback, c == Compression::kBf16 ? 0.01 : 0.1) << compressionName(c);
    EXPECT_GT(worstPlain, 20 * worstFeedback) << compressionName(c);
  }
}

// Accumulating decode adds into what is there.
TEST(Compress, DecodeAccumulates) {
  std::vector<float> x = {1.0f, 2.0f, -4.0f};
  std::vector<char> wire(compressedBytes(Compression::kBf16, 3));
  compressValues(Compression::kBf16, DataType::kFloat32, x.data(), nullptr, 3, wire.data());
  std::vector<float> acc = {10.0f, 20.0f, 40.0f};
  decompressValues(Compression::kBf16, DataType::kFloat32, wire.data(), 3, acc.data(), true);
  EXPECT_EQ(acc, (std::vector<float>{11.0f, 22.0f, 36.0f}));
}

// The AVX2 build of the codecs gives the portable build's bytes, residuals and sums exactly:
// values over many magnitudes with NaN, infinities, zeros of both signs and subnormals mixed
// into some chunks, counts with and without a partial last chunk or vector.
template <class T>
void expectBuildsAgree(Compression c, size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-140, 40), pick(0, 40);
  std::vector<T> v(count), resA(count), resB(count);
  for (size_t i = 0; i < count; ++i) {
    // Special values in one fp8 chunk of four only: the others keep finite scales.
    switch (i % 1024 < kFp8ChunkElems ? pick(rng) : 40) {
      case 0:
        v[i] = std::numeric_limits<T>::quiet_NaN();
        break;
      case 1:
        v[i] = -std::numeric_limits<T>::infinity();
        break;
      case 2:
        v[i] = static_cast<T>(-0.0);
        break;
      case 3:
        v[i] = std::numeric_limits<T>::denorm_min() * 3;
        break;
      default:
        v[i] = static_cast<T>(std::ldexp(mant(rng), expo(rng)));
    }
    resA[i] = resB[i] = static_cast<T>(mant(rng) * 1e-3);
  }
  const DataType type = sizeof(T) == 8 ? DataType::kFloat64 : DataType::kFloat32;
  const size_t bytes = compressedBytes(c, count);
  std::vector<unsigned char> wireA(bytes), wireB(bytes);
  for (bool feedback : {false, true}) {
    compressValuesPortable(c, type, v.data(), feedback ? resA.data() : nullptr, count,
                           wireA.data());
    compressValuesAvx2(c, type, v.data(), feedback ? resB.data() : nullptr, count, wireB.data());
    ASSERT_EQ(wireA, wireB) << compressionName(c) << " count " << count << " feedback " << feedback;
    ASSERT_EQ(0, std::memcmp(resA.data(), resB.data(), count * sizeof(T)));
    for (bool accumulate : {false, true}) {
      std::vector<T> outA(v), outB(v);
      decompressValuesPortable(c, type, wireA.data(), count, outA.data(), accumulate);
      decompressValuesAvx2(c, type, wireA.data(), count, outB.data(), accumulate);
      ASSERT_EQ(0, std::memcmp(outA.data(), outB.data(), count * sizeof(T)))
          << compressionName(c) << " count " << count << " accumulate " << accumulate;
    }
  }
}

TEST(Compress, Avx2BuildMatchesPortableBitForBit) {
  if (!compressAvx2Supported()) GTEST_SKIP() << "this CPU has no AVX2";
  unsigned seed = 1;
  for (Compression c : {Compression::kBf16, Compression::kFp8}) {
    for (size_t count :
         {size_t(1), size_t(7), size_t(256), size_t(257), size_t(1000), size_t(70001)}) {
      expectBuildsAgree<float>(c, count, ++seed);
      expectBuildsAgree<double>(c, count, ++seed);
    }
  }
}

}  // namespace
}  // namespace chorus
