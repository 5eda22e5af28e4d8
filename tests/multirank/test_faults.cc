// Failures that spread: a rank whose collective failed fails its communicator, and tells its
// peers why before closing its connections (over sockets a failure notice, on one host its
// board), so that ranks which never talk to the rank at the root of it still name it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using chorus_test::RankMode;

bool names(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Four ranks on a ring over sockets (0 -> 1 -> 2 -> 3 -> 0): rank 3 dies after the first call.
// Rank 0 receives from it and sees its connection close, rank 2 sends to it; rank 1 has no
// connection to it at all and learns why its neighbours stopped from the notices they send
// before closing theirs. All fail long before the timeout, and every error names rank 3.
TEST(FailureNotice, SocketPeersOfAFailedRankNameTheCause) {
  chorus_test::runRanks(
      4, RankMode::kProcesses, {"CHORUS_SHM_DISABLE=1", "CHORUS_TIMEOUT=60", "CHORUS_ALGO=ring"},
      [](int rank, int, ncclComm_t& comm) {
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
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const std::string e = ncclGetLastError(comm);
        EXPECT_EQ(r, ncclRemoteError) << e;
        EXPECT_LT(seconds, 20.0) << e;
        EXPECT_TRUE(names(e, "rank 3")) << e;
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

}  // namespace
