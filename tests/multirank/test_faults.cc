// Failures that spread: a rank whose collective failed fails its communicator, and tells its
// peers why before closing its connections (over sockets a failure notice, on one host its
// board), so that ranks which never talk to the rank at the root of it still name it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using chorus_test::RankMode;

bool names(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A call that failed with ncclRemoteError long before the timeout (60 s), naming `who`; returns
// the error text.
std::string expectPromptFailure(ncclResult_t r, ncclComm_t comm,
                                std::chrono::steady_clock::time_point start, const char* who) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string e = ncclGetLastError(comm);
  EXPECT_EQ(r, ncclRemoteError) << e;
  EXPECT_LT(seconds, 20.0) << e;
  EXPECT_TRUE(names(e, who)) << e;
  return e;
}

// Four ranks on a ring over sockets (0 -> 1 -> 2 -> 3 -> 0): rank 3 dies after the first call.
// Rank 0 receives from it and sees its connection close, rank 2 sends to it; rank 1 has no
// connection to it at all and learns why its neighbours stopped from the notices they send
// before closing theirs. All fail long before the timeout, and every error names rank 3.
// Through the socket transport, and through the socket network behind the net plugin
// interface (the net transport sends its notices as a slot of their own kind).
void peersOfAFailedRankNameTheCause(const std::vector<std::string>& extra) {
  std::vector<std::string> env = {"CHORUS_SHM_DISABLE=1", "CHORUS_TIMEOUT=60", "CHORUS_ALGO=ring"};
  env.insert(env.end(), extra.begin(), extra.end());
  chorus_test::runRanks(4, RankMode::kProcesses, env, [](int rank, int, ncclComm_t& comm) {
    std::vector<float> v(size_t(1) << 18, 1.0f);
    ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr),
              ncclSuccess);
    // Its sends leave through the proxy thread after the call returned: give them time to
    // reach the peers before the process goes.
    if (rank == 3) {
      usleep(300000);
      _exit(0);
    }
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t r = ncclSuccess;
    for (int i = 0; i < 3 && r == ncclSuccess; ++i)
      r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr);
    const std::string e = expectPromptFailure(r, comm, start, "rank 3");
    if (rank == 1) {
      EXPECT_TRUE(names(e, "its communicator failed")) << e;
    }
    // The failure stays: later calls fail at once with the same error.
    EXPECT_EQ(ncclAllReduce(v.data(), v.data(), 1, ncclFloat, ncclSum, comm, nullptr),
              ncclRemoteError);
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclRemoteError);
  });
}

TEST(FailureNotice, SocketPeersOfAFailedRankNameTheCause) {
  peersOfAFailedRankNameTheCause({});
}

TEST(FailureNotice, SocketNetworkPeersOfAFailedRankNameTheCause) {
  peersOfAFailedRankNameTheCause({"CHORUS_SOCKET_NET=1", "NCCL_NET=Socket"});
}

// Two ranks on one host (shared memory): rank 0 destroys its communicator while rank 1 waits
// in ncclRecv for data from it. A rank that leaves on purpose is no failure to its peers, but a
// receive it will never serve is: rank 1's call fails at once, naming rank 0, instead of
// waiting for its timeout, as it does when a socket closes.
TEST(FailureNotice, ShmRecvFromARankThatDestroyedItsCommunicatorFails) {
  chorus_test::runRanks(
      2, RankMode::kProcesses, {"CHORUS_TIMEOUT=60"}, [](int rank, int, ncclComm_t& comm) {
        std::vector<int32_t> out(1024, rank), in(1024, -1);
        const int peer = 1 - rank;
        // Both directions connected and used once.
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        ASSERT_EQ(ncclSend(out.data(), out.size(), ncclInt32, peer, comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclRecv(in.data(), in.size(), ncclInt32, peer, comm, nullptr), ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
        ASSERT_EQ(in[0], peer);
        if (rank == 0) {
          ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
          comm = nullptr;
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        ncclResult_t r = ncclRecv(in.data(), in.size(), ncclInt32, 0, comm, nullptr);
        expectPromptFailure(r, comm, start, "rank 0");
      });
}

// A split whose first member (which hosts the new communicator's rendezvous) fails its init
// after the split was planned (here a bad CHORUS_DIRECT_BUFFSIZE in its process only) and
// lives on: the other member learns it at once, with the reason, instead of at
// CHORUS_INIT_TIMEOUT (60 s). Both then meet in an all-reduce of the parent communicator.
TEST(FailureNotice, SplitMemberWhoseInitFailsEndsTheOthersInit) {
  chorus_test::runRanks(
      2, RankMode::kProcesses, {"CHORUS_INIT_TIMEOUT=60"}, [](int rank, int, ncclComm_t& comm) {
        if (rank == 0) setenv("CHORUS_DIRECT_BUFFSIZE", "1", 1);
        ncclComm_t child = nullptr;
        const auto start = std::chrono::steady_clock::now();
        ncclResult_t r = ncclCommSplit(comm, 0, rank, &child, nullptr);
        if (rank == 0) {
          EXPECT_EQ(r, ncclInvalidArgument) << ncclGetLastError(comm);
          unsetenv("CHORUS_DIRECT_BUFFSIZE");
        } else {
          // Its reason when it reached the rendezvous first, else that the root is gone.
          const std::string e = expectPromptFailure(r, comm, start, "rank 0");
          EXPECT_TRUE(names(e, "DIRECT_BUFFSIZE") || names(e, "is gone")) << e;
        }
        float v = 1.0f;
        EXPECT_EQ(ncclAllReduce(&v, &v, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
        EXPECT_EQ(v, 2.0f);
      });
}

}  // namespace
