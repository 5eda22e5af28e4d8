// Reduce-scatter, reduce and broadcast across real ranks, for every root, several types and
// ops, counts around the FIFO slot size, in place and out of place, over shm and TCP (the socket
// transport, and the socket network behind the net plugin interface).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "reference.h"

using chorus_test::RankMode;
using namespace chorus_test::ref;  // NOLINT: Op and the reference values

namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint32,   ncclFloat16,   ncclFloat32,
                                 ncclFloat64, ncclBfloat16, ncclFloat8e4m3};
const Op kOps[] = {kSum, kProd, kMax, kMin, kAvg, kPreMulSum};
const size_t kCounts[] = {0, 1, 5, 4099, 40009};

void checkReduce(int rank, int n, ncclComm_t comm, ncclDataType_t type, Op op, size_t count,
                 int root, bool inPlace) {
  size_t es = chorus_test::typeSize(type);
  std::vector<unsigned char> send(count * es + 8), recv(count * es + 8, 0);
  for (size_t i = 0; i < count; ++i)
    chorus_test::storeExact(send.data(), i, type, inputValue(rank, i, type, op));
  // Non-root ranks pass NULL: only the root's recvbuff is used.
  void* out = rank != root ? nullptr : (inPlace ? send.data() : recv.data());
  ScopedOp redop(op, type, comm);
  ASSERT_EQ(ncclReduce(send.data(), out, count, type, redop.value, root, comm, nullptr),
            ncclSuccess)
      << ncclGetLastError(comm);
  if (rank != root) return;
  std::string what = "root " + std::to_string(root) + " reduce " + chorus_test::typeName(type) +
                     " " + kOpNames[op] + " count " + std::to_string(count);
  EXPECT_EQ(countWrong(out, count, 0, n, type, op, what), 0u);
}

void checkBroadcast(int rank, ncclComm_t comm, size_t bytes, int root, bool inPlace) {
  std::vector<uint8_t> send(bytes + 1), recv(bytes + 1, 0xEE);
  auto pattern = [root](size_t b) { return static_cast<uint8_t>(b * 13 + root * 101 + 7); };
  uint8_t* src = inPlace ? recv.data() : send.data();
  if (rank == root)
    for (size_t b = 0; b < bytes; ++b) src[b] = pattern(b);
  ASSERT_EQ(ncclBroadcast(src, recv.data(), bytes, ncclUint8, root, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (size_t b = 0; b < bytes; ++b)
    if (recv[b] != pattern(b) && wrong++ < 3)
      ADD_FAILURE() << "rank " << rank << " broadcast from " << root << ": byte " << b;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(recv[bytes], 0xEE) << "wrote past the end";
}

// How ranks talk: shared memory, the socket transport, the socket network (net transport).
enum Link { kShm, kTcp, kSocketNet };

// (mode, link, nranks, channels, streamed slots): channels > 1 forces rings split across that
// many channels; streamed slots makes every send slot take streaming stores.
using Config = std::tuple<RankMode, Link, int, int, bool>;
class CollectiveMatrix : public ::testing::TestWithParam<Config> {
 protected:
  void run(const std::function<void(int, int, ncclComm_t&)>& body) {
    // Outputs of 4 MiB and more take the streaming-store path whatever the CPU's default.
    std::vector<std::string> env = {"CHORUS_BUFFSIZE=65536", "CHORUS_STREAM_BYTES=4194304"};
    if (std::get<1>(GetParam()) != kShm) {
      // Three streams per socket connection: large slots are striped over them.
      env.push_back("CHORUS_SHM_DISABLE=1");
      env.push_back("CHORUS_SOCKET_NSTREAMS=3");
    }
    if (std::get<1>(GetParam()) == kSocketNet) {
      // NCCL_NET=Socket: no plugin or HCA found on the machine takes the links instead.
      env.push_back("CHORUS_SOCKET_NET=1");
      env.push_back("NCCL_NET=Socket");
    }
    if (std::get<3>(GetParam()) > 1) {
      env.push_back("CHORUS_MIN_CHANNELS=" + std::to_string(std::get<3>(GetParam())));
      env.push_back("CHORUS_MAX_CHANNELS=" + std::to_string(std::get<3>(GetParam())));
    }
    if (std::get<4>(GetParam())) env.push_back("CHORUS_SLOT_STREAM=1");
    chorus_test::runRanks(std::get<2>(GetParam()), std::get<0>(GetParam()), env, body);
  }
};

TEST_P(CollectiveMatrix, ReduceScatter) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (ncclDataType_t t : kTypes)
      for (Op op : kOps)
        for (size_t count : kCounts)
          for (bool inPlace : {false, true})
            checkReduceScatter(rank, n, comm, t, op, count, inPlace);
  });
}

TEST_P(CollectiveMatrix, ReduceToEveryRoot) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (int root = 0; root < n; ++root)
      for (ncclDataType_t t : {ncclInt32, ncclFloat32, ncclBfloat16})
        for (Op op : kOps)
          for (size_t count : kCounts)
            for (bool inPlace : {false, true})
              checkReduce(rank, n, comm, t, op, count, root, inPlace);
  });
}

TEST_P(CollectiveMatrix, BroadcastFromEveryRoot) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (int root = 0; root < n; ++root)
      for (size_t bytes : {size_t(0), size_t(1), size_t(65535), size_t(1000003)})
        for (bool inPlace : {false, true}) checkBroadcast(rank, comm, bytes, root, inPlace);
    // ncclBcast is the in-place form.
    std::vector<int> v(1000, rank == n - 1 ? 42 : 0);
    ASSERT_EQ(ncclBcast(v.data(), v.size(), ncclInt, n - 1, comm, nullptr), ncclSuccess);
    EXPECT_EQ(v[0], 42);
    EXPECT_EQ(v[999], 42);
  });
}

// Messages of at least 16 MiB: many ring loops per channel, every FIFO slot reused many times.
TEST_P(CollectiveMatrix, LargeMessages) {
  run([](int rank, int n, ncclComm_t& comm) {
    const size_t floats = (size_t(16) << 20) / 4;
    checkReduceScatter(rank, n, comm, ncclFloat32, kSum, floats / n + 5, false);
    checkReduce(rank, n, comm, ncclFloat32, kSum, floats + 3, n - 1, false);
    checkBroadcast(rank, comm, (size_t(16) << 20) + 1, 0, true);
    // All-gather: every rank's block lands at its place in every output.
    size_t count = floats / n + 7;
    std::vector<int32_t> send(count), recv(count * n, -1);
    for (size_t i = 0; i < count; ++i) send[i] = static_cast<int32_t>(rank * 1000003 + i);
    ASSERT_EQ(ncclAllGather(send.data(), recv.data(), count, ncclInt32, comm, nullptr), ncclSuccess)
        << ncclGetLastError(comm);
    size_t wrong = 0;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        if (recv[r * count + i] != static_cast<int32_t>(r * 1000003 + i) && wrong++ < 3)
          ADD_FAILURE() << "rank " << rank << " all-gather block " << r << " element " << i;
    EXPECT_EQ(wrong, 0u);
  });
}

// Several collectives in one group run as one launch, in call order: each may read what the one
// before it wrote, even when their channels run on different threads.
TEST_P(CollectiveMatrix, GroupedDependentCollectivesRunInOrder) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (size_t count : {size_t(1), size_t(1000), size_t(300001)}) {
      std::vector<int32_t> a(count, rank + 1), sum(count, -1), gathered(count * n, -1),
          scattered(count, -1), bcast(count, -1);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      // sum = n(n+1)/2 everywhere; gathered = n copies of sum; scattered = n * sum;
      // bcast = scattered of rank n-1.
      ASSERT_EQ(ncclAllReduce(a.data(), sum.data(), count, ncclInt32, ncclSum, comm, nullptr),
                ncclSuccess);
      ASSERT_EQ(ncclAllGather(sum.data(), gathered.data(), count, ncclInt32, comm, nullptr),
                ncclSuccess);
      ASSERT_EQ(ncclReduceScatter(gathered.data(), scattered.data(), count, ncclInt32, ncclSum,
                                  comm, nullptr),
                ncclSuccess);
      ASSERT_EQ(
          ncclBroadcast(scattered.data(), bcast.data(), count, ncclInt32, n - 1, comm, nullptr),
          ncclSuccess);
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
      const int32_t s = n * (n + 1) / 2;
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        if (sum[i] != s || scattered[i] != n * s || bcast[i] != n * s) ++wrong;
        for (int r = 0; r < n; ++r)
          if (gathered[r * count + i] != s) ++wrong;
      }
      EXPECT_EQ(wrong, 0u) << "rank " << rank << " count " << count;
    }
  });
}

std::string configName(const ::testing::TestParamInfo<Config>& info) {
  return std::string(chorus_test::modeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) == kShm   ? "_shm_"
          : std::get<1>(info.param) == kTcp ? "_tcp_"
                                            : "_socketnet_") +
         std::to_string(std::get<2>(info.param)) + "ranks" +
         (std::get<3>(info.param) > 1 ? "_" + std::to_string(std::get<3>(info.param)) + "channels"
                                      : "") +
         (std::get<4>(info.param) ? "_streamedslots" : "");
}

INSTANTIATE_TEST_SUITE_P(Threads, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(kShm, kTcp),
                                            ::testing::Values(1, 2, 3, 5), ::testing::Values(1),
                                            ::testing::Values(false)),
                         configName);
INSTANTIATE_TEST_SUITE_P(ThreadsChannels, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(kShm, kTcp), ::testing::Values(2, 3),
                                            ::testing::Values(3), ::testing::Values(false)),
                         configName);
INSTANTIATE_TEST_SUITE_P(Processes, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(kShm, kTcp), ::testing::Values(2, 4),
                                            ::testing::Values(1, 2), ::testing::Values(false)),
                         configName);
// Every send slot written with streaming stores (the path taken when cached stores measure
// slow): steps that copy, reduce, scale and finalise into a streamed slot.
INSTANTIATE_TEST_SUITE_P(ThreadsStreamedSlots, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(kShm), ::testing::Values(2, 3),
                                            ::testing::Values(1, 2), ::testing::Values(true)),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesStreamedSlots, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(kShm), ::testing::Values(4),
                                            ::testing::Values(1), ::testing::Values(true)),
                         configName);
// Through the socket network: ranks of one process and of several, rings split over channels.
INSTANTIATE_TEST_SUITE_P(SocketNet, CollectiveMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads,
                                                              RankMode::kProcesses),
                                            ::testing::Values(kSocketNet), ::testing::Values(3),
                                            ::testing::Values(2), ::testing::Values(false)),
                         configName);

}  // namespace
