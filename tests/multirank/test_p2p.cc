// Point-to-point transfers and the collectives built on them (all-to-all, gather, scatter):
// sends and receives of one group may be posted in any order on both sides, messages between
// two ranks keep their order, and a send nobody receives fails by timeout naming both ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

using chorus_test::RankMode;

namespace {

// Content of the message from `from` to `to` (tag distinguishes several between one pair).
uint32_t word(int from, int to, int tag, size_t i) {
  return static_cast<uint32_t>(from * 1000003u + to * 7919u + tag * 104729u + i * 2654435761u);
}

std::vector<uint32_t> message(int from, int to, int tag, size_t n) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = word(from, to, tag, i);
  return v;
}

void expectMessage(const std::vector<uint32_t>& got, int from, int to, int tag) {
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != word(from, to, tag, i) && wrong++ < 3)
      ADD_FAILURE() << "rank " << to << ": word " << i << " of message " << tag << " from rank "
                    << from;
  EXPECT_EQ(wrong, 0u);
}

// How ranks talk: shared memory, the socket transport, the socket network (net transport).
enum Link { kShm, kTcp, kSocketNet };
using Config = std::tuple<RankMode, Link, int>;
class P2pMatrix : public ::testing::TestWithParam<Config> {
 protected:
  void run(const std::function<void(int, int, ncclComm_t&)>& body) {
    std::vector<std::string> env = {"CHORUS_BUFFSIZE=65536"};
    if (std::get<1>(GetParam()) != kShm) env.push_back("CHORUS_SHM_DISABLE=1");
    if (std::get<1>(GetParam()) == kSocketNet) {
      // NCCL_NET=Socket: no plugin or HCA found on the machine takes the links instead.
      env.push_back("CHORUS_SOCKET_NET=1");
      env.push_back("NCCL_NET=Socket");
    }
    chorus_test::runRanks(std::get<2>(GetParam()), std::get<0>(GetParam()), env, body);
  }
};

// Every rank sends to next and receives from prev in one group; half the ranks post the send
// first. Messages larger than the FIFO need both directions to progress at once.
TEST_P(P2pMatrix, RingExchangeInAnyOrder) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (size_t words : {size_t(0), size_t(1), size_t(1000), size_t(300001)}) {
      int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      std::vector<uint32_t> out = message(rank, next, 0, words), in(words);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      if (rank % 2 == 0) {
        ASSERT_EQ(ncclSend(out.data(), words, ncclUint32, next, comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclRecv(in.data(), words, ncclUint32, prev, comm, nullptr), ncclSuccess);
      } else {
        ASSERT_EQ(ncclRecv(in.data(), words, ncclUint32, prev, comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclSend(out.data(), words, ncclUint32, next, comm, nullptr), ncclSuccess);
      }
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
      expectMessage(in, prev, rank, 0);
    }
  });
}

// Point-to-point connectors are made when a direction is first used, so the second direction
// between two ranks may come long after the first: one direction at a time, each order on some
// pair, then both directions at once with messages larger than the FIFO.
TEST_P(P2pMatrix, DirectionsConnectedOneAtATime) {
  run([](int rank, int n, ncclComm_t& comm) {
    auto firstSender = [](int a, int b) {
      const int lo = std::min(a, b), hi = std::max(a, b);
      return (lo + hi) % 2 == 0 ? lo : hi;
    };
    for (int phase = 0; phase < 3; ++phase) {
      const size_t words = phase < 2 ? 1000 : 300001;
      std::vector<std::vector<uint32_t>> out(n), in(n);
      std::vector<bool> receives(n, false);
      ASSERT_EQ(ncclGroupStart(), ncclSuccess);
      for (int peer = 0; peer < n; ++peer) {
        if (peer == rank) continue;
        const int first = firstSender(rank, peer);
        // Phase 0: each pair's first direction; phase 1: the other; phase 2: both.
        const bool sends = phase == 2 || (phase == 0) == (first == rank);
        receives[peer] = phase == 2 || (phase == 0) == (first == peer);
        if (sends) {
          out[peer] = message(rank, peer, phase, words);
          ASSERT_EQ(ncclSend(out[peer].data(), words, ncclUint32, peer, comm, nullptr),
                    ncclSuccess);
        }
        if (receives[peer]) {
          in[peer].resize(words);
          ASSERT_EQ(ncclRecv(in[peer].data(), words, ncclUint32, peer, comm, nullptr), ncclSuccess);
        }
      }
      ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
      for (int peer = 0; peer < n; ++peer)
        if (receives[peer]) expectMessage(in[peer], peer, rank, phase);
    }
  });
}

// All pairs at once, posted in a different random order on every rank, with two messages per
// pair that must arrive in the order they were sent.
TEST_P(P2pMatrix, AllPairsTwoMessagesEachKeepOrder) {
  run([](int rank, int n, ncclComm_t& comm) {
    const size_t words = 20011;
    std::vector<std::vector<uint32_t>> out, in;
    struct Call {
      bool send;
      int peer;
      int tag;
    };
    std::vector<Call> calls;
    for (int p = 0; p < n; ++p)
      for (int tag = 0; tag < 2; ++tag) {
        calls.push_back({true, p, tag});
        calls.push_back({false, p, tag});
      }
    std::mt19937 rng(rank * 31 + 7);
    std::shuffle(calls.begin(), calls.end(), rng);
    // Keep per-pair order: the k-th posted send to p carries tag k, likewise for receives.
    std::vector<int> sendTag(n), recvTag(n);
    std::vector<std::vector<uint32_t>> recvBufs(n * 2, std::vector<uint32_t>(words));
    std::vector<std::vector<uint32_t>> sendBufs;
    sendBufs.reserve(n * 2);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    for (Call& c : calls) {
      if (c.send) {
        int tag = sendTag[c.peer]++;
        sendBufs.push_back(message(rank, c.peer, tag, words));
        ASSERT_EQ(ncclSend(sendBufs.back().data(), words, ncclUint32, c.peer, comm, nullptr),
                  ncclSuccess);
      } else {
        int tag = recvTag[c.peer]++;
        ASSERT_EQ(
            ncclRecv(recvBufs[c.peer * 2 + tag].data(), words, ncclUint32, c.peer, comm, nullptr),
            ncclSuccess);
      }
    }
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
    for (int p = 0; p < n; ++p)
      for (int tag = 0; tag < 2; ++tag) expectMessage(recvBufs[p * 2 + tag], p, rank, tag);
  });
}

TEST_P(P2pMatrix, AlltoAll) {
  run([](int rank, int n, ncclComm_t& comm) {
    for (size_t count : {size_t(0), size_t(1), size_t(5003), size_t(70001)}) {
      std::vector<uint32_t> send(count * n), recv(count * n, 0);
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i) send[p * count + i] = word(rank, p, 9, i);
      ASSERT_EQ(ncclAlltoAll(send.data(), recv.data(), count, ncclUint32, comm, nullptr),
                ncclSuccess)
          << ncclGetLastError(comm);
      for (int p = 0; p < n; ++p)
        expectMessage(
            std::vector<uint32_t>(recv.begin() + p * count, recv.begin() + (p + 1) * count), p,
            rank, 9);
      // In place: one buffer holds the blocks to send and receives the blocks sent here.
      ASSERT_EQ(ncclAlltoAll(send.data(), send.data(), count, ncclUint32, comm, nullptr),
                ncclSuccess)
          << ncclGetLastError(comm);
      EXPECT_EQ(send, recv);
    }
  });
}

TEST_P(P2pMatrix, GatherAndScatterAtEveryRoot) {
  run([](int rank, int n, ncclComm_t& comm) {
    const size_t count = 30011;
    for (int root = 0; root < n; ++root) {
      for (bool inPlace : {false, true}) {
        // Gather: block r of the root's output is rank r's message.
        std::vector<uint32_t> all(count * n, 0), mine = message(rank, root, 3, count);
        const uint32_t* src = mine.data();
        if (inPlace && rank == root) {
          std::copy(mine.begin(), mine.end(), all.begin() + root * count);
          src = all.data() + root * count;
        }
        ASSERT_EQ(ncclGather(src, all.data(), count, ncclUint32, root, comm, nullptr), ncclSuccess)
            << ncclGetLastError(comm);
        if (rank == root)
          for (int p = 0; p < n; ++p)
            expectMessage(
                std::vector<uint32_t>(all.begin() + p * count, all.begin() + (p + 1) * count), p,
                root, 3);
        // Scatter: rank r receives block r of the root's input.
        std::vector<uint32_t> blocks(count * n), got(count, 0);
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < count; ++i) blocks[p * count + i] = word(root, p, 4, i);
        uint32_t* dst = (inPlace && rank == root) ? blocks.data() + root * count : got.data();
        ASSERT_EQ(ncclScatter(blocks.data(), dst, count, ncclUint32, root, comm, nullptr),
                  ncclSuccess)
            << ncclGetLastError(comm);
        expectMessage(std::vector<uint32_t>(dst, dst + count), root, rank, 4);
      }
    }
  });
}

std::string configName(const ::testing::TestParamInfo<Config>& info) {
  return std::string(chorus_test::modeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) == kShm   ? "_shm_"
          : std::get<1>(info.param) == kTcp ? "_tcp_"
                                            : "_socketnet_") +
         std::to_string(std::get<2>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Threads, P2pMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(kShm, kTcp),
                                            ::testing::Values(1, 2, 3, 6)),
                         configName);
INSTANTIATE_TEST_SUITE_P(Processes, P2pMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(kShm, kTcp), ::testing::Values(2, 4)),
                         configName);
// Through the socket network, peers connected as they are first used.
INSTANTIATE_TEST_SUITE_P(SocketNet, P2pMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads,
                                                              RankMode::kProcesses),
                                            ::testing::Values(kSocketNet), ::testing::Values(3)),
                         configName);

// A send that nobody receives fails after the timeout with a message naming both ranks,
// instead of hanging: before the pair is connected (the peer never joins) and after (the peer
// joined earlier transfers but posts no receive for a send larger than the FIFO).
TEST(P2pErrors, UnmatchedSendTimesOutNamingBothRanks) {
  std::atomic<bool> firstDone{false}, senderDone{false};
  chorus_test::runRanks(
      2, RankMode::kThreads, {"CHORUS_TIMEOUT=1", "CHORUS_BUFFSIZE=65536"},
      [&](int rank, int, ncclComm_t& comm) {
        std::vector<uint32_t> big(1 << 20, 1);
        if (rank == 0) {
          EXPECT_EQ(ncclSend(big.data(), big.size(), ncclUint32, 1, comm, nullptr),
                    ncclRemoteError);
          std::string e = ncclGetLastError(comm);
          EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
          EXPECT_NE(e.find("ncclSend to rank 1"), std::string::npos) << e;
          firstDone = true;
          // Connect the pair with a matched exchange, then send with no receive.
          int x = 1;
          EXPECT_EQ(ncclSend(&x, 1, ncclInt, 1, comm, nullptr), ncclSuccess);
          EXPECT_EQ(ncclSend(big.data(), big.size(), ncclUint32, 1, comm, nullptr),
                    ncclRemoteError);
          e = ncclGetLastError(comm);
          EXPECT_NE(e.find("rank 0"), std::string::npos) << e;
          // Numbered among the sends to that rank (the one that failed to connect is not).
          EXPECT_NE(e.find("ncclSend #2 to rank 1"), std::string::npos) << e;
          EXPECT_NE(e.find("no progress"), std::string::npos) << e;
          senderDone = true;
        } else {
          // Joins only the small exchange, once the first send has given up.
          while (!firstDone) std::this_thread::yield();
          int x = 0;
          EXPECT_EQ(ncclRecv(&x, 1, ncclInt, 0, comm, nullptr), ncclSuccess);
          EXPECT_EQ(x, 1);
          while (!senderDone) std::this_thread::yield();
        }
      });
}

TEST(P2pErrors, BadPeersAndBuffers) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  int x = 0;
  EXPECT_EQ(ncclSend(&x, 1, ncclInt, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("peer 1"), std::string::npos);
  EXPECT_EQ(ncclRecv(nullptr, 1, ncclInt, 0, comm, nullptr), ncclInvalidArgument);
  int arr[3] = {};
  EXPECT_EQ(ncclAlltoAll(arr, arr + 1, 2, ncclInt, comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(comm)).find("overlap"), std::string::npos);
  EXPECT_EQ(ncclGather(&x, &x, 1, ncclInt, 3, comm, nullptr), ncclInvalidArgument);
  // A send to itself needs the matching receive in the same group.
  EXPECT_EQ(ncclSend(&x, 1, ncclInt, 0, comm, nullptr), ncclInvalidUsage);
  int y = 5;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(&y, 1, ncclInt, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(&x, 1, ncclInt, 0, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(x, 5);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

}  // namespace
