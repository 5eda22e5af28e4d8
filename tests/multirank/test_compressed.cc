// The compressed all-reduce across real ranks (threads and processes): every rank gets the same
// bits; the result is within the format's rounding of an exact sum computed here; error feedback
// keeps the sum over many calls within one rounding; the bytes on the wire are reported; other
// calls stay exact; bad modes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "chorus.h"
#include "harness.h"

using chorus_test::RankMode;

namespace {

uint64_t hashBytes(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Rank r's input: values in [-1, 1) from a generator seeded by the rank.
template <class T>
std::vector<T> inputOf(int rank, size_t count) {
  std::mt19937 rng(1000 + rank);
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(count);
  for (T& x : v) x = static_cast<T>(d(rng));
  return v;
}

// Two roundings (each rank's block, then the owner's sum), each at most 2^-8 of the magnitude
// for bf16 and 2^-4 of the chunk's largest for fp8, magnitudes here at most n; error feedback
// may add the last call's rounding of the same buffer to each: twice that.
double bound(chorusCompression_t mode, int n) {
  return (mode == chorusCompressBf16 ? std::ldexp(1.0, -6) : std::ldexp(1.0, -2)) * n;
}

template <class T>
void checkOne(int rank, int n, ncclComm_t comm, chorusCompression_t mode, size_t count,
              bool inPlace, bool avg) {
  const ncclDataType_t type = sizeof(T) == 4 ? ncclFloat32 : ncclFloat64;
  std::vector<T> send = inputOf<T>(rank, count), recv(count + 1, T(-7));
  T* out = inPlace ? send.data() : recv.data();
  ASSERT_EQ(ncclAllReduce(send.data(), out, count, type, avg ? ncclAvg : ncclSum, comm, nullptr),
            ncclSuccess)
      << ncclGetLastError(comm);
  double worst = 0;
  std::vector<std::vector<T>> inputs;
  for (int r = 0; r < n; ++r) inputs.push_back(inputOf<T>(r, count));
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int r = 0; r < n; ++r) exact += static_cast<double>(inputs[r][i]);
    if (avg) exact /= n;
    worst = std::fmax(worst, std::fabs(static_cast<double>(out[i]) - exact));
  }
  const std::string what = "rank " + std::to_string(rank) + " count " + std::to_string(count) +
                           (inPlace ? " in place" : "") + (avg ? " avg" : " sum");
  EXPECT_LE(worst, bound(mode, n)) << what;
  if (!inPlace) EXPECT_EQ(recv[count], T(-7)) << what << ": wrote past the output";
  std::vector<uint64_t> hashes(n);
  hashes[rank] = hashBytes(out, count * sizeof(T));
  ASSERT_EQ(ncclAllGather(&hashes[rank], hashes.data(), 1, ncclUint64, comm, nullptr), ncclSuccess);
  for (int r = 0; r < n; ++r) EXPECT_EQ(hashes[r], hashes[0]) << what << ": rank " << r;
}

void everything(int rank, int n, ncclComm_t comm, chorusCompression_t mode) {
  ASSERT_EQ(chorusCommSetCompression(comm, mode), ncclSuccess) << ncclGetLastError(comm);
  for (size_t count : {size_t{1}, size_t{3}, size_t{1000}, size_t{70001}})
    for (bool inPlace : {false, true}) {
      checkOne<float>(rank, n, comm, mode, count, inPlace, false);
      checkOne<double>(rank, n, comm, mode, count, inPlace, count == 1000);
    }
  // The bytes on the wire: bf16 halves float32 exactly; fp8 about quarters it.
  unsigned long long raw0 = 0, wire0 = 0, raw = 0, wire = 0;
  ASSERT_EQ(chorusCommCompressionStats(comm, &raw0, &wire0), ncclSuccess);
  std::vector<float> big = inputOf<float>(rank, size_t{1} << 16);
  ASSERT_EQ(ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat32, ncclSum, comm, nullptr),
            ncclSuccess);
  ASSERT_EQ(chorusCommCompressionStats(comm, &raw, &wire), ncclSuccess);
  const double sentRaw = static_cast<double>(raw - raw0),
               sentWire = static_cast<double>(wire - wire0);
  // 2 (n-1)/n of the buffer leaves each rank (blocks differ by an element at most).
  EXPECT_NEAR(sentRaw, 2.0 * (n - 1) / n * big.size() * 4, 8.0 * n);
  if (mode == chorusCompressBf16)
    EXPECT_DOUBLE_EQ(sentWire, sentRaw / 2);
  else
    EXPECT_NEAR(sentWire / sentRaw, 0.25 * (1 + 4.0 / 256), 0.01);
  // Other calls stay exact: a max, an int32 sum.
  std::vector<int32_t> ints(100, rank + 1);
  ASSERT_EQ(ncclAllReduce(ints.data(), ints.data(), 100, ncclInt32, ncclSum, comm, nullptr),
            ncclSuccess);
  for (int32_t v : ints) ASSERT_EQ(v, n * (n + 1) / 2);
  std::vector<float> third(10, (rank + 1) / 3.0f), mx(10);
  ASSERT_EQ(ncclAllReduce(third.data(), mx.data(), 10, ncclFloat32, ncclMax, comm, nullptr),
            ncclSuccess);
  for (float v : mx) ASSERT_EQ(v, n / 3.0f);
  // Error feedback: the same buffer all-reduced many times sums to the repeats times the exact
  // sum within about one rounding, where the rounding alone would add up every time.
  const size_t count = 512;
  std::vector<float> x = inputOf<float>(rank, count), y(count);
  std::vector<double> total(count, 0.0);
  const int repeats = 100;
  for (int t = 0; t < repeats; ++t) {
    ASSERT_EQ(ncclAllReduce(x.data(), y.data(), count, ncclFloat32, ncclSum, comm, nullptr),
              ncclSuccess);
    for (size_t i = 0; i < count; ++i) total[i] += y[i];
  }
  double worst = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int r = 0; r < n; ++r) exact += static_cast<double>(inputOf<float>(r, count)[i]);
    worst = std::fmax(worst, std::fabs(total[i] - repeats * exact));
  }
  EXPECT_LE(worst, 3 * bound(mode, n)) << "sum of " << repeats << " calls drifted";
  // Off again: exact.
  ASSERT_EQ(chorusCommSetCompression(comm, chorusCompressNone), ncclSuccess);
  std::vector<float> quarter(100, 0.25f);
  ASSERT_EQ(ncclAllReduce(quarter.data(), quarter.data(), 100, ncclFloat32, ncclSum, comm, nullptr),
            ncclSuccess);
  for (float v : quarter) ASSERT_EQ(v, 0.25f * n);
}

class Compressed : public ::testing::TestWithParam<std::tuple<int, RankMode, int>> {};

TEST_P(Compressed, AllReduce) {
  const int n = std::get<0>(GetParam());
  const auto mode = static_cast<chorusCompression_t>(std::get<2>(GetParam()));
  chorus_test::runRanks(
      n, std::get<1>(GetParam()), {},
      [mode](int rank, int nranks, ncclComm_t& comm) { everything(rank, nranks, comm, mode); });
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, Compressed,
    ::testing::Values(std::make_tuple(2, RankMode::kThreads, int{chorusCompressBf16}),
                      std::make_tuple(3, RankMode::kThreads, int{chorusCompressFp8}),
                      std::make_tuple(4, RankMode::kProcesses, int{chorusCompressBf16}),
                      std::make_tuple(2, RankMode::kProcesses, int{chorusCompressFp8})));

// CHORUS_COMPRESS sets the default; bad values fail init and bad modes are refused.
TEST(CompressedSettings, EnvironmentAndErrors) {
  chorus_test::runRanks(
      2, RankMode::kThreads, {"CHORUS_COMPRESS=bf16"}, [](int rank, int n, ncclComm_t& comm) {
        std::vector<float> v(1000, 1.0f / 3);
        ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat32, ncclSum, comm, nullptr),
                  ncclSuccess);
        unsigned long long raw = 0, wire = 0;
        ASSERT_EQ(chorusCommCompressionStats(comm, &raw, &wire), ncclSuccess);
        EXPECT_EQ(wire * 2, raw);
        EXPECT_GT(wire, 0u);
        EXPECT_EQ(chorusCommSetCompression(comm, static_cast<chorusCompression_t>(9)),
                  ncclInvalidArgument);
        EXPECT_NE(std::string(ncclGetLastError(comm)).find("mode 9"), std::string::npos);
        EXPECT_EQ(chorusCommCompressionStats(comm, nullptr, &wire), ncclInvalidArgument);
        (void)rank;
        (void)n;
      });
  setenv("CHORUS_COMPRESS", "int4", 1);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(chorusCommInitRankHost(&comm, 1, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("CHORUS_COMPRESS"), std::string::npos)
      << ncclGetLastError(nullptr);
  unsetenv("CHORUS_COMPRESS");
}

}  // namespace
