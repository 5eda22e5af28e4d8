// The C API under misuse and in its lifecycle corners: every bad argument gets a named error
// and a message that names it, stale handles are refused, waits end by timeout or abort, and
// group calls drive several communicators of one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "chorus.h"
#include "harness.h"

namespace {

std::string lastError(ncclComm_t comm = nullptr) {
  return ncclGetLastError(comm);
}

// One communicator of one rank: enough for argument checks.
struct SoloComm {
  SoloComm() {
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    EXPECT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess) << lastError();
  }
  ~SoloComm() {
    if (comm != nullptr) ncclCommDestroy(comm);
  }
  ncclComm_t comm = nullptr;
};

TEST(ApiErrors, NullAndInvalidArgumentsAreNamed) {
  SoloComm s;
  float a[4] = {1, 2, 3, 4}, b[4];
  EXPECT_EQ(ncclAllReduce(a, b, 4, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError().find("comm is NULL"), std::string::npos) << lastError();
  EXPECT_EQ(ncclAllReduce(nullptr, b, 4, ncclFloat, ncclSum, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("sendbuff is NULL"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(a, nullptr, 4, ncclFloat, ncclSum, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("recvbuff is NULL"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(a, b, 4, static_cast<ncclDataType_t>(42), ncclSum, s.comm, nullptr),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("datatype 42"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(a, b, 4, ncclFloat, static_cast<ncclRedOp_t>(77), s.comm, nullptr),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("op 77"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(a, b, SIZE_MAX / 2, ncclFloat, ncclSum, s.comm, nullptr),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("overflows"), std::string::npos);
  EXPECT_EQ(ncclAllReduce(a, a + 1, 3, ncclFloat, ncclSum, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("overlap"), std::string::npos);
  // Empty calls accept NULL buffers.
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat, ncclSum, s.comm, nullptr), ncclSuccess);
}

// C callers may pass any int for an enum: values outside the enums' ranges, negative ones
// included, are refused by name on every entry point that takes one.
TEST(ApiErrors, EnumArgumentsOutOfRangeAreNamed) {
  SoloComm s;
  float a[4] = {1, 2, 3, 4}, b[4];
  const ncclDataType_t badType = static_cast<ncclDataType_t>(-3);
  const ncclRedOp_t badOp = static_cast<ncclRedOp_t>(-2);
  auto expectType = [&](ncclResult_t r, const char* fn) {
    EXPECT_EQ(r, ncclInvalidArgument) << fn;
    EXPECT_NE(lastError(s.comm).find("datatype -3"), std::string::npos)
        << fn << ": " << lastError(s.comm);
  };
  expectType(ncclAllReduce(a, b, 4, badType, ncclSum, s.comm, nullptr), "ncclAllReduce");
  expectType(ncclBroadcast(a, b, 4, badType, 0, s.comm, nullptr), "ncclBroadcast");
  expectType(ncclReduce(a, b, 4, badType, ncclSum, 0, s.comm, nullptr), "ncclReduce");
  expectType(ncclAllGather(a, b, 4, badType, s.comm, nullptr), "ncclAllGather");
  expectType(ncclReduceScatter(a, b, 4, badType, ncclSum, s.comm, nullptr), "ncclReduceScatter");
  expectType(ncclAlltoAll(a, b, 4, badType, s.comm, nullptr), "ncclAlltoAll");
  expectType(ncclSend(a, 4, badType, 0, s.comm, nullptr), "ncclSend");
  expectType(ncclRecv(b, 4, badType, 0, s.comm, nullptr), "ncclRecv");
  EXPECT_EQ(ncclAllReduce(a, b, 4, ncclFloat, badOp, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("op -2"), std::string::npos) << lastError(s.comm);
  EXPECT_EQ(ncclRedOpDestroy(badOp, s.comm), ncclInvalidArgument);
  float scalar = 2;
  ncclRedOp_t made;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&made, &scalar, ncclFloat,
                                     static_cast<ncclScalarResidence_t>(9), s.comm),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("residence 9"), std::string::npos) << lastError(s.comm);
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&made, &scalar, badType, ncclScalarHostImmediate, s.comm),
            ncclInvalidArgument);
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(-1)), "unknown result code");
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(1000)), "unknown result code");
}

TEST(ApiErrors, RootsAndRootOnlyBuffers) {
  SoloComm s;
  float a[4] = {1, 2, 3, 4}, b[4];
  EXPECT_EQ(ncclBroadcast(a, b, 4, ncclFloat, 1, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("root 1"), std::string::npos) << lastError(s.comm);
  EXPECT_EQ(ncclReduce(a, b, 4, ncclFloat, ncclSum, -1, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(a, nullptr, 4, ncclFloat, ncclSum, 0, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("recvbuff is NULL"), std::string::npos);
  EXPECT_EQ(ncclReduceScatter(a, a + 1, 2, ncclFloat, ncclSum, s.comm, nullptr),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("overlap"), std::string::npos);
  EXPECT_EQ(ncclAllGather(a + 1, a, 2, ncclFloat, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclReduce(a, b, 4, ncclFloat, ncclMax, 0, s.comm, nullptr), ncclSuccess);
  EXPECT_EQ(b[3], 4);
}

TEST(ApiErrors, QueriesCheckTheirOutputPointers) {
  SoloComm s;
  int v = -5;
  EXPECT_EQ(ncclCommCount(s.comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommCount(s.comm, &v), ncclSuccess);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(ncclCommUserRank(s.comm, &v), ncclSuccess);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(ncclCommCuDevice(s.comm, &v), ncclSuccess);
  EXPECT_EQ(v, -1);
  chorusMemType_t mt;
  EXPECT_EQ(chorusCommMemType(s.comm, &mt), ncclSuccess);
  EXPECT_EQ(mt, chorusMemHost);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(s.comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
}

TEST(ApiErrors, InitRejectsBadRanksIdsAndConfigs) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("nranks"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_NE(lastError().find("rank 2"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  ncclUniqueId garbage;
  memset(&garbage, 0xab, sizeof(garbage));
  EXPECT_EQ(ncclCommInitRank(&comm, 1, garbage, 0), ncclInvalidArgument);
  EXPECT_NE(lastError().find("uniqueId"), std::string::npos) << lastError();
  ncclConfig_t config;
  memset(&config, 0, sizeof(config));
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclInvalidArgument);
  EXPECT_NE(lastError().find("NCCL_CONFIG_INITIALIZER"), std::string::npos) << lastError();
  EXPECT_EQ(ncclGetUniqueId(nullptr), ncclInvalidArgument);
}

TEST(ApiErrors, UnknownAlgorithmFailsInit) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  setenv("CHORUS_ALGO", "bogus", 1);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  std::string message = lastError();
  unsetenv("CHORUS_ALGO");
  EXPECT_EQ(r, ncclInvalidArgument);
  EXPECT_NE(message.find("CHORUS_ALGO"), std::string::npos) << message;
  EXPECT_NE(message.find("bogus"), std::string::npos) << message;
  if (r == ncclSuccess) ncclCommDestroy(comm);
  // Any case of a known name is accepted.
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  setenv("CHORUS_ALGO", "Tree", 1);
  r = ncclCommInitRank(&comm, 1, id, 0);
  unsetenv("CHORUS_ALGO");
  ASSERT_EQ(r, ncclSuccess) << lastError();
  float x = 2, y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 2);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// CHORUS_HOST_COMM=0 asks for a device communicator: where no GPU is usable (or the build has no
// CUDA) init fails and says why, never falling back to host memory silently.
TEST(ApiErrors, DeviceCommWithoutAGpuSaysWhy) {
  const char* before = getenv("CHORUS_HOST_COMM");
  std::string saved = before != nullptr ? before : "";
  setenv("CHORUS_HOST_COMM", "0", 1);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRank(&comm, 1, id, 0);
  std::string message = lastError();
  ncclComm_t all[2] = {nullptr, nullptr};
  ncclResult_t rAll = ncclCommInitAll(all, 2, nullptr);
  std::string messageAll = lastError();
  if (before != nullptr) {
    setenv("CHORUS_HOST_COMM", saved.c_str(), 1);
  } else {
    unsetenv("CHORUS_HOST_COMM");
  }
  if (r == ncclSuccess) {
    chorusMemType_t type = chorusMemHost;
    EXPECT_EQ(chorusCommMemType(comm, &type), ncclSuccess);
    EXPECT_EQ(type, chorusMemDevice);
    ncclCommDestroy(comm);
    if (rAll == ncclSuccess)
      for (ncclComm_t c : all) ncclCommDestroy(c);
    GTEST_SKIP() << "a GPU is usable here: the device communicator was created";
  }
  EXPECT_EQ(r, ncclInvalidUsage);
  EXPECT_NE(message.find("CHORUS_HOST_COMM=0"), std::string::npos) << message;
  EXPECT_NE(message.find("set CHORUS_HOST_COMM=1"), std::string::npos) << message;
  const bool explained = message.find("no usable CUDA device") != std::string::npos ||
                         message.find("no CUDA support") != std::string::npos;
  EXPECT_TRUE(explained) << message;
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(rAll, ncclInvalidUsage);
  EXPECT_NE(messageAll.find("ncclCommInitAll"), std::string::npos) << messageAll;
}

TEST(ApiErrors, ConfigInitializerIsAccepted) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 1;  // non-blocking communicators: test_nonblocking.cc
  config.commName = "solo";
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 1, id, 0, &config), ncclSuccess) << lastError();
  double x = 3, y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclDouble, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 3);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(ApiErrors, StaleHandlesAreRefused) {
  SoloComm s;
  ncclComm_t comm = s.comm;
  ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
  s.comm = nullptr;
  float a = 1;
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("destroyed"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidUsage);

  SoloComm t;
  ASSERT_EQ(ncclCommAbort(t.comm), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, t.comm, nullptr), ncclInvalidUsage);
  EXPECT_EQ(ncclCommAbort(t.comm), ncclInvalidUsage);
  t.comm = nullptr;
}

TEST(ApiErrors, FinalizedCommAcceptsOnlyDestroy) {
  SoloComm s;
  ASSERT_EQ(ncclCommFinalize(s.comm), ncclSuccess);
  float a = 1;
  EXPECT_EQ(ncclAllReduce(&a, &a, 1, ncclFloat, ncclSum, s.comm, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError(s.comm).find("finalized"), std::string::npos);
}

TEST(ApiErrors, GroupEndWithoutStartIsInvalidUsage) {
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_NE(lastError().find("ncclGroupStart"), std::string::npos);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

TEST(ApiErrors, PreMulSumOpsAreTiedToTheirType) {
  SoloComm s;
  float scalar = 3;
  ncclRedOp_t op;
  EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarHostImmediate, s.comm),
            ncclInvalidArgument);
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, s.comm),
            ncclSuccess);
  float x = 2, y = 0;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, op, s.comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 6);
  double dx = 2, dy = 0;
  EXPECT_EQ(ncclAllReduce(&dx, &dy, 1, ncclDouble, op, s.comm, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("created for datatype float"), std::string::npos)
      << lastError(s.comm);
  EXPECT_EQ(ncclRedOpDestroy(op, s.comm), ncclSuccess);
  EXPECT_EQ(ncclRedOpDestroy(op, s.comm), ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, op, s.comm, nullptr), ncclInvalidArgument);
  // ncclScalarDevice on a host communicator: the scalar is read when the collective runs.
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarDevice, s.comm),
            ncclSuccess);
  scalar = 5;
  EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, op, s.comm, nullptr), ncclSuccess);
  EXPECT_EQ(y, 10);
}

TEST(ApiErrors, ShrinkRefusesBadArguments) {
  SoloComm s;
  ncclComm_t child = reinterpret_cast<ncclComm_t>(&s);
  int list[2] = {0, 0};
  EXPECT_EQ(ncclCommShrink(s.comm, list, 1, &child, nullptr, NCCL_SHRINK_DEFAULT),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("holds this rank"), std::string::npos) << lastError(s.comm);
  EXPECT_EQ(child, nullptr);
  list[0] = 5;
  EXPECT_EQ(ncclCommShrink(s.comm, list, 1, &child, nullptr, NCCL_SHRINK_DEFAULT),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("rank 5, outside [0, 1)"), std::string::npos)
      << lastError(s.comm);
  EXPECT_EQ(ncclCommShrink(s.comm, nullptr, 1, &child, nullptr, NCCL_SHRINK_DEFAULT),
            ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("excludeRanksList is NULL"), std::string::npos);
  EXPECT_EQ(ncclCommShrink(s.comm, nullptr, 0, &child, nullptr, 7), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("shrinkFlags 7"), std::string::npos);
  EXPECT_EQ(ncclCommShrink(s.comm, nullptr, 0, nullptr, nullptr, 0), ncclInvalidArgument);
  // Excluding no one: a communicator of the same ranks.
  ASSERT_EQ(ncclCommShrink(s.comm, nullptr, 0, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess);
  int n = 0;
  EXPECT_EQ(ncclCommCount(child, &n), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
}

TEST(ApiErrors, SplitRefusesABadColorAndANullResult) {
  SoloComm s;
  ncclComm_t child = reinterpret_cast<ncclComm_t>(&s);
  EXPECT_EQ(ncclCommSplit(s.comm, -5, 0, &child, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("color -5"), std::string::npos) << lastError(s.comm);
  EXPECT_EQ(child, nullptr);
  EXPECT_EQ(ncclCommSplit(s.comm, 0, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_NE(lastError(s.comm).find("newcomm"), std::string::npos) << lastError(s.comm);
  // A split of one rank is a communicator of one rank.
  ASSERT_EQ(ncclCommSplit(s.comm, 3, 0, &child, nullptr), ncclSuccess);
  int n = 0, r = -1;
  EXPECT_EQ(ncclCommCount(child, &n), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(child, &r), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
}

// ncclCommSplit on 5 ranks, as threads and as processes (whose parent came from
// CHORUS_COMM_ID: the children get rendezvous of their own): by rank mod 2 with keys reversing
// the order, then with rank 0 joining none; each child's ranks talk only among themselves.
TEST(Split, ByColorOrderedByKey) {
  for (chorus_test::RankMode mode :
       {chorus_test::RankMode::kThreads, chorus_test::RankMode::kProcesses}) {
    SCOPED_TRACE(chorus_test::modeName(mode));
    chorus_test::runRanks(5, mode, {}, [](int rank, int nranks, ncclComm_t& comm) {
      ncclComm_t child = nullptr;
      ASSERT_EQ(ncclCommSplit(comm, rank % 2, -rank, &child, nullptr), ncclSuccess);
      ASSERT_NE(child, nullptr);
      std::vector<int> members;  // the new order: descending rank
      for (int r = nranks - 1; r >= 0; --r)
        if (r % 2 == rank % 2) members.push_back(r);
      int n = 0, r = -1;
      EXPECT_EQ(ncclCommCount(child, &n), ncclSuccess);
      EXPECT_EQ(ncclCommUserRank(child, &r), ncclSuccess);
      EXPECT_EQ(n, static_cast<int>(members.size()));
      EXPECT_EQ(
          r, static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin()));
      int64_t mine = rank + 1, sum = 0, first = -1;
      EXPECT_EQ(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, child, nullptr), ncclSuccess);
      EXPECT_EQ(ncclBroadcast(&mine, &first, 1, ncclInt64, 0, child, nullptr), ncclSuccess);
      int64_t want = 0;
      for (int m : members) want += m + 1;
      EXPECT_EQ(sum, want);
      EXPECT_EQ(first, members.front() + 1);
      EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);

      child = reinterpret_cast<ncclComm_t>(&comm);
      ASSERT_EQ(ncclCommSplit(comm, rank == 0 ? NCCL_SPLIT_NOCOLOR : 0, 0, &child, nullptr),
                ncclSuccess);
      if (rank == 0) {
        EXPECT_EQ(child, nullptr);
      } else {
        ASSERT_NE(child, nullptr);
        float one = 1, total = 0;
        EXPECT_EQ(ncclAllReduce(&one, &total, 1, ncclFloat, ncclSum, child, nullptr), ncclSuccess);
        EXPECT_EQ(total, nranks - 1);
        EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
      }
      // The parent still works.
      float x = 1, y = 0;
      EXPECT_EQ(ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
      EXPECT_EQ(y, nranks);
    });
  }
}

// A rank that never joins a collective: the other times out with a message naming the peer.
TEST(ApiErrors, MissingPeerTimesOutWithoutHanging) {
  chorus_test::runRanks(
      2, chorus_test::RankMode::kThreads, {"CHORUS_TIMEOUT=1"}, [](int rank, int, ncclComm_t comm) {
        if (rank != 0) return;
        std::vector<float> v(1000, 1.0f);
        EXPECT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr),
                  ncclRemoteError);
        std::string e = lastError(comm);
        EXPECT_NE(e.find("timed out"), std::string::npos) << e;
        // Who waits for whom, where in which call.
        EXPECT_NE(e.find("rank 0 waits for rank 1 at "), std::string::npos) << e;
        EXPECT_NE(e.find(" step 1 of ncclAllReduce #1 (1000 x float, sum)"), std::string::npos)
            << e;
      });
}

// Abort from another thread ends a collective that waits for a peer that will never come.
TEST(ApiErrors, AbortFromAnotherThreadEndsAWait) {
  chorus_test::runRanks(
      2, chorus_test::RankMode::kThreads, {}, [](int rank, int, ncclComm_t& comm) {
        if (rank != 0) return;
        std::atomic<bool> started{false};
        ncclResult_t result = ncclSuccess;
        std::thread waiter([&] {
          std::vector<float> v(1000, 1.0f);
          started = true;
          result = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr);
        });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
        waiter.join();
        EXPECT_NE(result, ncclSuccess);
        comm = nullptr;
      });
}

// Two processes each do one all-reduce of count floats; then rank 1 dies without destroying
// anything, and rank 0 makes up to `calls` more (data in flight may still be taken before the
// loss is seen). The failure must come long before the timeout (120 s), name rank 1, and leave
// a communicator that can be destroyed; `check` looks at the result and the message.
void expectDeadPeerFailsFast(
    const std::vector<std::string>& env, size_t count, int calls,
    const std::function<void(ncclResult_t, const std::string&, ncclComm_t)>& check) {
  std::vector<std::string> all = env;
  all.push_back("CHORUS_TIMEOUT=120");
  chorus_test::runRanks(
      2, chorus_test::RankMode::kProcesses, all, [&](int rank, int, ncclComm_t& comm) {
        std::vector<float> v(count, 1.0f);
        ASSERT_EQ(ncclAllReduce(v.data(), v.data(), count, ncclFloat, ncclSum, comm, nullptr),
                  ncclSuccess)
            << lastError(comm);
        if (rank == 1) _exit(0);
        auto start = std::chrono::steady_clock::now();
        ncclResult_t r = ncclSuccess;
        for (int i = 0; i < calls && r == ncclSuccess; ++i)
          r = ncclAllReduce(v.data(), v.data(), count, ncclFloat, ncclSum, comm, nullptr);
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_NE(r, ncclSuccess);
        EXPECT_LT(seconds, 30.0) << "the failure waited for the timeout";
        std::string e = lastError(comm);
        EXPECT_NE(e.find("rank 1"), std::string::npos) << e;
        check(r, e, comm);
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError(comm);
        comm = nullptr;
      });
}

// Over sockets a dead peer's connections close with it: the survivor's next collective
// (recursive doubling for 8 B, the ring for 1 MiB) fails at once.
TEST(PeerFailure, DeadPeerOverSocketsFailsFastNamingIt) {
  for (size_t count : {size_t(2), size_t(1) << 18})
    expectDeadPeerFailsFast({"CHORUS_SHM_DISABLE=1"}, count, 3,
                            [](ncclResult_t, const std::string&, ncclComm_t) {});
}

// Over shared memory a dead peer closes nothing; its liveness lock goes with its process, so
// the survivor's next collective (one-shot for 8 B, the ring for 1 MiB) fails within the watch
// interval, with a remote error that says what happened, also as the communicator's async
// error.
TEST(PeerFailure, DeadPeerOverShmFailsFastNamingIt) {
  for (size_t count : {size_t(2), size_t(1) << 18})
    expectDeadPeerFailsFast({}, count, 1, [](ncclResult_t r, const std::string& e, ncclComm_t c) {
      EXPECT_EQ(r, ncclRemoteError);
      EXPECT_NE(e.find("rank 1 (pid"), std::string::npos) << e;
      EXPECT_NE(e.find("ended without destroying its communicator"), std::string::npos) << e;
      ncclResult_t async = ncclSuccess;
      EXPECT_EQ(ncclCommGetAsyncError(c, &async), ncclSuccess);
      EXPECT_EQ(async, ncclRemoteError);
    });
}

// A peer that destroys its communicator first is not taken for a dead one: the other rank's
// communicator, watched for 30 intervals after that, reports no error and is destroyed without
// one.
TEST(PeerFailure, PeerThatDestroysFirstIsNoError) {
  chorus_test::runRanks(
      2, chorus_test::RankMode::kProcesses, {"CHORUS_PEER_WATCH_MS=10"},
      [&](int rank, int, ncclComm_t& comm) {
        std::vector<float> v(64, 1.0f);
        ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr),
                  ncclSuccess)
            << lastError(comm);
        if (rank == 1) {
          ASSERT_EQ(ncclCommDestroy(comm), ncclSuccess);
          comm = nullptr;
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(300));  // 30 watch intervals
        ncclResult_t async = ncclInternalError;
        EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
        EXPECT_EQ(async, ncclSuccess) << lastError(comm);
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError(comm);
        comm = nullptr;
      });
}

// Recovery: of 4 ranks one process dies; the survivors' next all-reduce fails promptly, they
// shrink the communicator without it and go on with correct results (over shared memory and
// over sockets, where the parent's own links are what failed).
TEST(PeerFailure, SurvivorsShrinkAndFinishTheJob) {
  // Shared memory, the socket transport, and the socket network (net transport), whose failed
  // ranks end their connections as the socket transport's do.
  const std::vector<std::vector<std::string>> transports = {
      {"CHORUS_SHM_DISABLE=0"},
      {"CHORUS_SHM_DISABLE=1"},
      {"CHORUS_SHM_DISABLE=1", "CHORUS_SOCKET_NET=1", "NCCL_NET=Socket"}};
  for (std::vector<std::string> env : transports) {
    SCOPED_TRACE(env.back());
    env.push_back("CHORUS_TIMEOUT=60");
    chorus_test::runRanks(
        4, chorus_test::RankMode::kProcesses, env, [&](int rank, int, ncclComm_t& comm) {
          std::vector<double> v(4096, rank + 1.0);
          ASSERT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclDouble, ncclSum, comm, nullptr),
                    ncclSuccess)
              << lastError(comm);
          ASSERT_EQ(v[0], 10.0);
          const int dead = 2;
          if (rank == dead) {
            // Its all-reduce returned once it had its own result; its last sends may still be
            // queued for its proxy thread, which exiting at once could cut off before the
            // others had theirs (the first all-reduce must succeed everywhere).
            std::this_thread::sleep_for(std::chrono::milliseconds(500));
            _exit(0);
          }
          const auto start = std::chrono::steady_clock::now();
          ncclResult_t r = ncclSuccess;
          for (int i = 0; i < 3 && r == ncclSuccess; ++i)
            r = ncclAllReduce(v.data(), v.data(), v.size(), ncclDouble, ncclSum, comm, nullptr);
          EXPECT_NE(r, ncclSuccess);
          // Promptly (a survivor not linked to the dead rank learns of it from the peers that
          // failed first, which end their connections), naming the rank it heard it from.
          EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                    20.0)
              << lastError(comm);
          EXPECT_NE(lastError(comm).find("rank "), std::string::npos) << lastError(comm);
          int excluded[1] = {dead};
          ncclComm_t survivors = nullptr;
          ASSERT_EQ(ncclCommShrink(comm, excluded, 1, &survivors, nullptr, NCCL_SHRINK_ABORT),
                    ncclSuccess)
              << lastError(comm);
          int n = 0, me = -1;
          EXPECT_EQ(ncclCommCount(survivors, &n), ncclSuccess);
          EXPECT_EQ(ncclCommUserRank(survivors, &me), ncclSuccess);
          EXPECT_EQ(n, 3);
          EXPECT_EQ(me, rank < dead ? rank : rank - 1);
          for (int step = 0; step < 3; ++step) {
            std::vector<double> w(1 << 16, rank + 1.0 + step);
            ASSERT_EQ(ncclAllReduce(w.data(), w.data(), w.size(), ncclDouble, ncclSum, survivors,
                                    nullptr),
                      ncclSuccess)
                << lastError(survivors);
            EXPECT_EQ(w[0], 1 + 2 + 4 + 3.0 * step);  // ranks 0, 1 and 3 contribute rank + 1
            EXPECT_EQ(w.back(), w[0]);
          }
          EXPECT_EQ(ncclCommDestroy(survivors), ncclSuccess);
          EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
          comm = nullptr;
        });
  }
}

// Ranks left out of a shrink do not call it; the others continue among themselves.
TEST(Shrink, HealthyCommunicatorWithoutRankZero) {
  chorus_test::runRanks(
      3, chorus_test::RankMode::kThreads, {}, [](int rank, int, ncclComm_t& comm) {
        if (rank == 0) return;
        int excluded[1] = {0};
        ncclComm_t rest = nullptr;
        ASSERT_EQ(ncclCommShrink(comm, excluded, 1, &rest, nullptr, NCCL_SHRINK_DEFAULT),
                  ncclSuccess)
            << lastError(comm);
        int me = -1;
        EXPECT_EQ(ncclCommUserRank(rest, &me), ncclSuccess);
        EXPECT_EQ(me, rank - 1);
        int x = rank, sum = 0;
        EXPECT_EQ(ncclAllReduce(&x, &sum, 1, ncclInt, ncclSum, rest, nullptr), ncclSuccess);
        EXPECT_EQ(sum, 3);
        EXPECT_EQ(ncclCommDestroy(rest), ncclSuccess);
      });
}

// One thread drives several ranks: ncclCommInitAll and grouped collectives.
TEST(GroupCalls, InitAllAndGroupedAllReduce) {
  const int n = 3;
  ncclComm_t comms[n];
  ASSERT_EQ(ncclCommInitAll(comms, n, nullptr), ncclSuccess) << lastError();
  std::vector<std::vector<int>> bufs(n, std::vector<int>(257));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = r * 1000 + static_cast<int>(i);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), bufs[r].size(), ncclInt, ncclSum,
                            comms[r], nullptr),
              ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bufs[r].size(); ++i)
      ASSERT_EQ(bufs[r][i], 3000 + 3 * static_cast<int>(i));
  for (int r = 0; r < n; ++r) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
}

TEST(GroupCalls, InitRankInsideAGroup) {
  const int n = 2;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[n];
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r) ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comms[0], &count), ncclInvalidUsage);  // not yet initialised
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
  EXPECT_EQ(ncclCommCount(comms[1], &count), ncclSuccess);
  EXPECT_EQ(count, 2);
  for (int r = 0; r < n; ++r) EXPECT_EQ(ncclCommDestroy(comms[r]), ncclSuccess);
}

}  // namespace
