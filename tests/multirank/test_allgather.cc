// All-gather across real ranks: every rank's block lands at its place in every output, for
// several element sizes, counts around the FIFO slot size, in place and out of place.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

using chorus_test::RankMode;

namespace {

uint8_t pattern(int rank, size_t byte) {
  return static_cast<uint8_t>((rank * 131 + byte * 7 + (byte >> 8)) & 0xff);
}

void checkAllGather(int rank, int nranks, ncclComm_t comm, ncclDataType_t type, size_t count,
                    bool inPlace) {
  size_t es = chorus_test::typeSize(type);
  size_t block = count * es;
  std::vector<uint8_t> recv(block * nranks + 1, 0xEE);
  std::vector<uint8_t> send(block + 1);
  uint8_t* src = inPlace ? recv.data() + block * rank : send.data();
  for (size_t b = 0; b < block; ++b) src[b] = pattern(rank, b);
  ASSERT_EQ(ncclAllGather(src, recv.data(), count, type, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (int r = 0; r < nranks; ++r)
    for (size_t b = 0; b < block; ++b)
      if (recv[r * block + b] != pattern(r, b) && wrong++ < 3)
        ADD_FAILURE() << "rank " << rank << ": byte " << b << " of rank " << r << "'s block ("
                      << chorus_test::typeName(type) << " count " << count << ")";
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(recv[block * nranks], 0xEE) << "wrote past the end of recvbuff";
}

// (mode, socket, nranks, every send slot streamed)
using Config = std::tuple<RankMode, bool, int, bool>;
class AllGatherMatrix : public ::testing::TestWithParam<Config> {};

TEST_P(AllGatherMatrix, BlocksArriveInPlace) {
  std::vector<std::string> env = {"CHORUS_BUFFSIZE=65536"};
  if (std::get<1>(GetParam())) env.push_back("CHORUS_SHM_DISABLE=1");
  if (std::get<3>(GetParam())) env.push_back("CHORUS_SLOT_STREAM=1");
  chorus_test::runRanks(std::get<2>(GetParam()), std::get<0>(GetParam()), env,
                        [](int rank, int n, ncclComm_t& comm) {
                          for (ncclDataType_t t : {ncclInt8, ncclFloat16, ncclFloat, ncclUint64})
                            for (size_t count : {0, 1, 3, 4095, 8193, 300007})
                              for (bool inPlace : {false, true})
                                checkAllGather(rank, n, comm, t, count, inPlace);
                        });
}

std::string configName(const ::testing::TestParamInfo<Config>& info) {
  return std::string(chorus_test::modeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) ? "_tcp_" : "_shm_") + std::to_string(std::get<2>(info.param)) +
         "ranks" + (std::get<3>(info.param) ? "_streamedslots" : "");
}

INSTANTIATE_TEST_SUITE_P(Threads, AllGatherMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3, 7),
                                            ::testing::Values(false)),
                         configName);
INSTANTIATE_TEST_SUITE_P(Processes, AllGatherMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Bool(), ::testing::Values(2, 4),
                                            ::testing::Values(false)),
                         configName);
// Every send slot streamed, also into the FIFOs a socket connector's proxy sends from.
INSTANTIATE_TEST_SUITE_P(
    StreamedSlots, AllGatherMatrix,
    ::testing::Combine(::testing::Values(RankMode::kThreads, RankMode::kProcesses),
                       ::testing::Bool(), ::testing::Values(2, 3), ::testing::Values(true)),
    configName);

}  // namespace
