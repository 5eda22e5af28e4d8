// Collective-mismatch detection: ranks that make different calls (collective, count, type,
// operation, root, order; or send/receive sizes) fail with ncclInvalidUsage and a message that
// names both calls, long before the timeout, instead of hanging or mixing data. Over shared
// memory the watch also catches ranks whose calls are so different that they run different
// algorithms and never exchange data, and the peers of a failed rank fail with it.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "harness.h"

namespace {

using chorus_test::RankMode;
using Clock = std::chrono::steady_clock;

// A hang would last the 60 s timeout; every failure must come well before.
constexpr double kPromptSeconds = 20;

struct Outcome {
  ncclResult_t result = ncclSuccess;
  std::string error;
  double seconds = 0;
};

// Runs body on every rank (each returns the first failing call's result) and hands every
// rank's outcome to check on rank 0's side of the test, after all ranks finished.
void runMismatch(int nranks, RankMode mode, std::vector<std::string> env,
                 const std::function<ncclResult_t(int rank, ncclComm_t comm)>& body,
                 const std::function<void(int rank, const Outcome&)>& check) {
  env.push_back("CHORUS_TIMEOUT=60");
  chorus_test::runRanks(nranks, mode, env, [&](int rank, int, ncclComm_t& comm) {
    Outcome o;
    const auto start = Clock::now();
    o.result = body(rank, comm);
    o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    o.error = ncclGetLastError(comm);
    check(rank, o);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    comm = nullptr;
  });
}

ncclResult_t allReduce(ncclComm_t comm, size_t count) {
  std::vector<float> v(count, 1.0f);
  return ncclAllReduce(v.data(), v.data(), count, ncclFloat, ncclSum, comm, nullptr);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every rank fails promptly; a rank that found the mismatch itself says ncclInvalidUsage and
// names both calls (both parts); over shared memory the others name it too, through the
// failed rank's board.
void expectMismatch(int rank, const Outcome& o, const std::string& mine, const std::string& theirs,
                    bool everyRankNamesIt) {
  EXPECT_NE(o.result, ncclSuccess) << "rank " << rank;
  EXPECT_LT(o.seconds, kPromptSeconds) << "rank " << rank << ": " << o.error;
  if (o.result == ncclInvalidUsage || everyRankNamesIt) {
    EXPECT_TRUE(has(o.error, "does not match") || has(o.error, "expects")) << o.error;
    EXPECT_TRUE(has(o.error, mine)) << o.error;
    EXPECT_TRUE(has(o.error, theirs)) << o.error;
  }
}

// Counts that differ by one element: the same algorithm on every rank, which finds the other
// rank's call in the first slot (or staged chunk) it receives. Small counts run the one-shot
// all-reduce over the shared region, large ones the ring.
TEST(Mismatch, CountsThatDifferFailEveryRankNamingBothCalls) {
  for (size_t count : {size_t(6), size_t(1) << 16}) {
    SCOPED_TRACE(count);
    const std::string a = "ncclAllReduce #1 (" + std::to_string(count) + " x float";
    const std::string b = "ncclAllReduce #1 (" + std::to_string(count + 1) + " x float";
    int invalid = 0;
    runMismatch(
        3, RankMode::kThreads, {},
        [&](int rank, ncclComm_t comm) { return allReduce(comm, count + (rank == 1 ? 1 : 0)); },
        [&](int rank, const Outcome& o) {
          expectMismatch(rank, o, a, b, true);
          if (o.result == ncclInvalidUsage) ++invalid;
        });
    EXPECT_GE(invalid, 1);
  }
}

// Different collectives of the same size meet on the ring and fail at the first slot.
TEST(Mismatch, DifferentCollectivesFail) {
  runMismatch(
      2, RankMode::kThreads, {},
      [](int rank, ncclComm_t comm) {
        const size_t count = size_t(1) << 16;
        std::vector<float> in(count, 1.0f), out(2 * count);
        if (rank == 0) return ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr);
        return ncclAllReduce(in.data(), out.data(), 2 * count, ncclFloat, ncclSum, comm, nullptr);
      },
      [](int rank, const Outcome& o) {
        expectMismatch(rank, o, "ncclAllGather #1", "ncclAllReduce #1", true);
        EXPECT_EQ(o.result, ncclInvalidUsage) << o.error;
      });
}

// Two ranks that each think they are the root of a broadcast both send and return; the data
// they left behind belongs to that broadcast, so the next collective fails instead of taking
// it for its own.
TEST(Mismatch, DisagreeingRootsFailAtTheLatestOnTheNextCall) {
  runMismatch(
      2, RankMode::kThreads, {},
      [](int rank, ncclComm_t comm) {
        std::vector<int> v(4096, rank);
        ncclResult_t r =
            ncclBroadcast(v.data(), v.data(), v.size(), ncclInt32, rank, comm, nullptr);
        if (r != ncclSuccess) return r;
        return allReduce(comm, size_t(1) << 16);
      },
      [](int rank, const Outcome& o) {
        EXPECT_NE(o.result, ncclSuccess);
        EXPECT_LT(o.seconds, kPromptSeconds) << o.error;
        EXPECT_TRUE(has(o.error, "ncclBroadcast #1")) << o.error;
        EXPECT_TRUE(has(o.error, "root " + std::to_string(1 - rank))) << o.error;
      });
}

// One rank's all-reduce is small (one-shot over the shared region), the other's large (the
// ring): they wait on different memory and would never exchange a byte. The watch compares the
// ranks' boards and fails both.
TEST(Mismatch, CallsOnDifferentAlgorithmsFailThroughTheWatch) {
  runMismatch(
      2, RankMode::kProcesses, {},
      [](int rank, ncclComm_t comm) { return allReduce(comm, rank == 0 ? 2 : size_t(1) << 20); },
      [](int rank, const Outcome& o) {
        EXPECT_EQ(o.result, ncclInvalidUsage) << "rank " << rank << ": " << o.error;
        expectMismatch(rank, o, "ncclAllReduce #1 (2 x float", "ncclAllReduce #1 (1048576 x float",
                       true);
      });
}

// Over sockets the call's tag travels in every message header.
TEST(Mismatch, OverSocketsBothRanksNameBothCalls) {
  runMismatch(
      2, RankMode::kProcesses, {"CHORUS_SHM_DISABLE=1"},
      [](int rank, ncclComm_t comm) {
        const size_t count = size_t(1) << 16;
        std::vector<float> v(count, 1.0f);
        return ncclAllReduce(v.data(), v.data(), count, rank == 0 ? ncclFloat : ncclInt32, ncclSum,
                             comm, nullptr);
      },
      [](int rank, const Outcome& o) {
        EXPECT_NE(o.result, ncclSuccess);
        EXPECT_LT(o.seconds, kPromptSeconds) << o.error;
        if (o.result == ncclInvalidUsage) {
          EXPECT_TRUE(has(o.error, "ncclAllReduce #1 (65536 x float, sum)")) << o.error;
          EXPECT_TRUE(has(o.error, "ncclAllReduce #1 (65536 x int32, sum)")) << o.error;
        }
        // The ring sends before it receives: both ranks get the other's first slot.
        EXPECT_EQ(o.result, ncclInvalidUsage) << "rank " << rank << ": " << o.error;
      });
}

// A receive smaller or larger than its send fails at the first slot, naming both sizes.
TEST(Mismatch, SendAndReceiveSizesMustAgree) {
  for (int larger : {0, 1}) {
    SCOPED_TRACE(larger);
    runMismatch(
        2, RankMode::kThreads, {},
        [&](int rank, ncclComm_t comm) {
          std::vector<char> buf(8192);
          if (rank == 0) return ncclSend(buf.data(), 4096, ncclChar, 1, comm, nullptr);
          return ncclRecv(buf.data(), larger ? 8192 : 1024, ncclChar, 0, comm, nullptr);
        },
        [&](int rank, const Outcome& o) {
          if (rank == 0) return;  // its send may complete into the FIFO
          EXPECT_EQ(o.result, ncclInvalidUsage) << o.error;
          EXPECT_LT(o.seconds, kPromptSeconds) << o.error;
          EXPECT_TRUE(has(o.error, larger ? "expects 8192 bytes" : "expects 1024 bytes"))
              << o.error;
          EXPECT_TRUE(has(o.error, "ncclSend #1 (4096 bytes)")) << o.error;
        });
  }
}

// CHORUS_CHECK_CALLS=0 turns the comparison off: the oversized send is then only caught by the
// receive's own bounds check.
TEST(Mismatch, CheckCanBeTurnedOff) {
  runMismatch(
      2, RankMode::kThreads, {"CHORUS_CHECK_CALLS=0"},
      [](int rank, ncclComm_t comm) {
        std::vector<char> buf(8192);
        if (rank == 0) return ncclSend(buf.data(), 4096, ncclChar, 1, comm, nullptr);
        return ncclRecv(buf.data(), 1024, ncclChar, 0, comm, nullptr);
      },
      [](int rank, const Outcome& o) {
        if (rank == 0) return;
        EXPECT_EQ(o.result, ncclInvalidArgument) << o.error;
        EXPECT_FALSE(has(o.error, "CHORUS_CHECK_CALLS")) << o.error;
        EXPECT_TRUE(has(o.error, "received more data than posted")) << o.error;
      });
}

// Calls that match are untouched by the check: many mixed calls, each compared, all succeed.
TEST(Mismatch, MatchingCallsPass) {
  runMismatch(
      3, RankMode::kThreads, {},
      [](int rank, ncclComm_t comm) {
        for (size_t count : {size_t(1), size_t(7), size_t(1) << 12, size_t(1) << 18}) {
          ncclResult_t r = allReduce(comm, count);
          if (r != ncclSuccess) return r;
          std::vector<float> v(count, 1.0f);
          r = ncclBroadcast(v.data(), v.data(), count, ncclFloat, 2, comm, nullptr);
          if (r != ncclSuccess) return r;
          std::vector<char> s(count), d(count);
          ncclGroupStart();
          ncclSend(s.data(), count, ncclChar, (rank + 1) % 3, comm, nullptr);
          ncclRecv(d.data(), count, ncclChar, (rank + 2) % 3, comm, nullptr);
          r = ncclGroupEnd();
          if (r != ncclSuccess) return r;
        }
        return ncclSuccess;
      },
      [](int, const Outcome& o) { EXPECT_EQ(o.result, ncclSuccess) << o.error; });
}

}  // namespace
