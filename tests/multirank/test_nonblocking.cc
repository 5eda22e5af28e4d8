// Non-blocking communicators (ncclConfig_t.blocking = 0), ncclCommAbort during init and
// ncclCommRevoke: calls that wait for peers return ncclInProgress and ncclCommGetAsyncError
// polls them to their end; an init that waits for ranks that never come is ended by
// ncclCommAbort from any thread; a revoked communicator stops its calls and can still be split.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "chorus.h"

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string lastError(ncclComm_t comm = nullptr) {
  return ncclGetLastError(comm);
}

// Runs body(rank) on one thread per rank and waits for all of them.
void onThreads(int nranks, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < nranks; ++rank) threads.emplace_back(body, rank);
  for (std::thread& t : threads) t.join();
}

// Polls until comm's state is not ncclInProgress, at most limitSeconds (then ncclInProgress).
ncclResult_t poll(ncclComm_t comm, double limitSeconds = 60) {
  const Clock::time_point start = Clock::now();
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && secondsSince(start) < limitSeconds) {
    EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess) << lastError(comm);
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

// A call on a non-blocking communicator: ncclInProgress (or ncclSuccess when it already ended),
// then polled to its end.
void expectCompletes(ncclComm_t comm, ncclResult_t r) {
  ASSERT_TRUE(r == ncclSuccess || r == ncclInProgress) << r << ": " << lastError(comm);
  ASSERT_EQ(poll(comm), ncclSuccess) << lastError(comm);
}

ncclResult_t initNonBlocking(ncclComm_t* comm, int nranks, const ncclUniqueId& id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return chorusCommInitRankHost(comm, nranks, id, rank, &config);
}

// Every rank's value at element i, and the sum over ranks (exact in float).
float valueOf(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 97));
}
float sumOf(int nranks, size_t i) {
  float s = 0;
  for (int r = 0; r < nranks; ++r) s += valueOf(r, i);
  return s;
}

// The whole life of non-blocking communicators: init, collectives (alone and grouped),
// point-to-point, finalize, destroy; each call returns at once and is polled to its end, and
// the results match a reference computed here.
TEST(NonBlocking, InitCollectivesGroupsFinalizeAndDestroy) {
  const int n = 3;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  onThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    ncclResult_t r = initNonBlocking(&comm, n, id, rank);
    ASSERT_NE(comm, nullptr);
    expectCompletes(comm, r);
    int count = 0;
    ASSERT_EQ(ncclCommCount(comm, &count), ncclSuccess);
    EXPECT_EQ(count, n);

    const size_t elems = 100000;
    std::vector<float> a(elems), b(elems, -1.0f);
    for (size_t i = 0; i < elems; ++i) a[i] = valueOf(rank, i);
    // Several calls queued before one poll keep their order.
    std::vector<float> twice(elems);
    r = ncclAllReduce(a.data(), b.data(), elems, ncclFloat, ncclSum, comm, nullptr);
    ASSERT_TRUE(r == ncclInProgress || r == ncclSuccess) << lastError(comm);
    r = ncclAllReduce(b.data(), twice.data(), elems, ncclFloat, ncclSum, comm, nullptr);
    ASSERT_TRUE(r == ncclInProgress || r == ncclSuccess) << lastError(comm);
    ASSERT_EQ(poll(comm), ncclSuccess) << lastError(comm);
    for (size_t i = 0; i < elems; ++i) {
      ASSERT_EQ(b[i], sumOf(n, i)) << i;
      ASSERT_EQ(twice[i], n * sumOf(n, i)) << i;
    }

    // A group of a broadcast and an all-gather.
    std::vector<int32_t> root(64), gathered(64 * n, -1);
    for (int i = 0; i < 64; ++i) root[i] = rank == 1 ? 7 * i + 3 : -5;
    std::vector<int32_t> mine(64, rank * 11);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclBroadcast(root.data(), root.data(), 64, ncclInt32, 1, comm, nullptr),
              ncclSuccess);
    ASSERT_EQ(ncclAllGather(mine.data(), gathered.data(), 64, ncclInt32, comm, nullptr),
              ncclSuccess);
    expectCompletes(comm, ncclGroupEnd());
    for (int i = 0; i < 64; ++i) ASSERT_EQ(root[i], 7 * i + 3) << i;
    for (int r2 = 0; r2 < n; ++r2)
      for (int i = 0; i < 64; ++i) ASSERT_EQ(gathered[r2 * 64 + i], r2 * 11) << r2 << " " << i;

    // Point to point around the ring.
    std::vector<double> out(1000, rank + 0.5), in(1000, -1);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(out.data(), out.size(), ncclFloat64, (rank + 1) % n, comm, nullptr),
              ncclSuccess);
    ASSERT_EQ(ncclRecv(in.data(), in.size(), ncclFloat64, (rank + n - 1) % n, comm, nullptr),
              ncclSuccess);
    expectCompletes(comm, ncclGroupEnd());
    for (double v : in) ASSERT_EQ(v, (rank + n - 1) % n + 0.5);

    expectCompletes(comm, ncclCommFinalize(comm));
    EXPECT_EQ(ncclAllReduce(a.data(), b.data(), elems, ncclFloat, ncclSum, comm, nullptr),
              ncclInvalidUsage);
    EXPECT_NE(lastError(comm).find("finalized"), std::string::npos) << lastError(comm);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError(comm);
  });
}

// One thread drives both ranks: non-blocking inits and an all-reduce on each, inside groups;
// each group end hands every communicator's share to its own runner and returns at once.
TEST(NonBlocking, OneThreadDrivesTwoRanksThroughGroups) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) ASSERT_EQ(initNonBlocking(&comms[r], 2, id, r), ncclSuccess);
  ncclResult_t end = ncclGroupEnd();
  ASSERT_TRUE(end == ncclInProgress || end == ncclSuccess) << lastError();
  for (ncclComm_t c : comms) ASSERT_EQ(poll(c), ncclSuccess) << lastError(c);
  const size_t elems = 5000;
  std::vector<float> bufs[2];
  for (int r = 0; r < 2; ++r) {
    bufs[r].resize(elems);
    for (size_t i = 0; i < elems; ++i) bufs[r][i] = valueOf(r, i);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r)
    ASSERT_EQ(
        ncclAllReduce(bufs[r].data(), bufs[r].data(), elems, ncclFloat, ncclSum, comms[r], nullptr),
        ncclSuccess);
  end = ncclGroupEnd();
  ASSERT_TRUE(end == ncclInProgress || end == ncclSuccess) << lastError();
  for (ncclComm_t c : comms) ASSERT_EQ(poll(c), ncclSuccess) << lastError(c);
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < elems; ++i) ASSERT_EQ(bufs[r][i], sumOf(2, i)) << r << " " << i;
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess) << lastError(c);
}

// An init whose peers never come: polling says ncclInProgress, other calls are refused with a
// message that says what to do, and ncclCommAbort on the same thread ends it within 2 s.
TEST(NonBlocking, AbortEndsAnInitWhosePeersNeverCome) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclResult_t r = initNonBlocking(&comm, 2, id, 0);
  ASSERT_EQ(r, ncclInProgress) << lastError();
  ASSERT_NE(comm, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ncclResult_t state = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  float v[4] = {1, 2, 3, 4};
  EXPECT_EQ(ncclAllReduce(v, v, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("still being initialized"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidUsage);
  EXPECT_NE(lastError().find("ncclCommAbort"), std::string::npos) << lastError();
  const Clock::time_point start = Clock::now();
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess) << lastError();
  EXPECT_LT(secondsSince(start), 2.0);
  // The handle is stale now.
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclInvalidUsage);
  EXPECT_EQ(ncclCommAbort(comm), ncclInvalidUsage);
}

// A blocking ncclCommInitRank waiting for a rank that never comes, aborted from another thread:
// the init returns an error promptly and the abort returns within 2 s.
TEST(AbortDuringInit, BlockingInitIsEndedFromAnotherThread) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;  // written by the library (atomically) before the init waits
  ncclResult_t initResult = ncclSuccess;
  double initSeconds = 0;
  std::thread initer([&] {
    const Clock::time_point start = Clock::now();
    initResult = chorusCommInitRankHost(&comm, 2, id, 0, nullptr);
    initSeconds = secondsSince(start);
  });
  ncclComm_t seen = nullptr;
  const Clock::time_point start = Clock::now();
  while ((seen = __atomic_load_n(&comm, __ATOMIC_ACQUIRE)) == nullptr && secondsSince(start) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_NE(seen, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // well inside the rendezvous
  const Clock::time_point abortStart = Clock::now();
  EXPECT_EQ(ncclCommAbort(seen), ncclSuccess) << lastError();
  EXPECT_LT(secondsSince(abortStart), 2.0);
  initer.join();
  EXPECT_EQ(initResult, ncclInvalidUsage);
  EXPECT_LT(initSeconds, 5.0);
  EXPECT_EQ(comm, nullptr);  // a failed init hands back no communicator
}

// A non-blocking init that fails (its only peer never comes within CHORUS_INIT_TIMEOUT) says so
// through ncclCommGetAsyncError and ncclGetLastError; the handle is then destroyed.
TEST(NonBlocking, InitFailureIsReportedByPolling) {
  setenv("CHORUS_INIT_TIMEOUT", "1", 1);
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(initNonBlocking(&comm, 2, id, 0), ncclInProgress) << lastError();
  ncclResult_t state = poll(comm, 30);
  unsetenv("CHORUS_INIT_TIMEOUT");
  EXPECT_NE(state, ncclSuccess);
  EXPECT_NE(state, ncclInProgress);
  EXPECT_NE(lastError().find("timed out"), std::string::npos) << lastError();
  float v[4] = {1, 2, 3, 4};
  EXPECT_EQ(ncclAllReduce(v, v, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidUsage);
  EXPECT_NE(lastError().find("init failed"), std::string::npos) << lastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclInvalidUsage);
}

// Two ranks of non-blocking communicators; rank 1 stops taking part after the init. Rank 0's
// all-reduce stays in progress without blocking its thread, and ncclCommAbort on that thread
// ends it within 2 s. Then a mismatched pair of calls on fresh communicators fails both ranks
// with ncclInvalidUsage through polling, and later calls get the same error.
TEST(NonBlocking, StuckCallIsAbortedAndFailedCallIsReported) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::atomic<bool> rank0Done{false};
  onThreads(2, [&](int rank) {
    ncclComm_t comm = nullptr;
    expectCompletes(comm, initNonBlocking(&comm, 2, id, rank));
    if (rank == 1) {
      while (!rank0Done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError(comm);
      return;
    }
    std::vector<float> v(1 << 16, 1.0f);
    ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr);
    EXPECT_EQ(r, ncclInProgress) << lastError(comm);
    EXPECT_EQ(poll(comm, 0.3), ncclInProgress);
    const Clock::time_point start = Clock::now();
    EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
    EXPECT_LT(secondsSince(start), 2.0);
    rank0Done = true;
  });

  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  onThreads(2, [&](int rank) {
    ncclComm_t comm = nullptr;
    expectCompletes(comm, initNonBlocking(&comm, 2, id, rank));
    std::vector<float> a(4096, 1.0f), b(4096 * 2);
    ncclResult_t r =
        rank == 0 ? ncclAllReduce(a.data(), b.data(), 4096, ncclFloat, ncclSum, comm, nullptr)
                  : ncclAllGather(a.data(), b.data(), 4096, ncclFloat, comm, nullptr);
    EXPECT_TRUE(r == ncclInProgress || r == ncclInvalidUsage) << r;
    EXPECT_EQ(poll(comm), ncclInvalidUsage);
    const std::string e = lastError(comm);
    EXPECT_NE(e.find("does not match"), std::string::npos) << e;
    EXPECT_EQ(ncclAllReduce(a.data(), b.data(), 4096, ncclFloat, ncclSum, comm, nullptr),
              ncclInvalidUsage);
    EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  });
}

// Three ranks; ranks 0 and 1 wait in an all-reduce that rank 2 never joins. Each revokes its
// communicator from another thread: the waiting calls fail at once, polling reaches success
// once nothing runs, calls other than destroy/split/shrink are refused, and the revoked
// communicators are split into a new one that computes correctly.
TEST(Revoke, StopsWaitingCallsAndLeavesSplitPossible) {
  const int n = 3;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  onThreads(n, [&](int rank) {
    ncclComm_t comm = nullptr;
    ASSERT_EQ(chorusCommInitRankHost(&comm, n, id, rank, nullptr), ncclSuccess) << lastError();
    std::vector<float> v(1 << 14, 1.0f);
    if (rank < 2) {
      ncclResult_t stuck = ncclSuccess;
      double stuckSeconds = 0;
      std::thread caller([&] {
        const Clock::time_point start = Clock::now();
        stuck = ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr);
        stuckSeconds = secondsSince(start);
      });
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ncclResult_t r = ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT);
      EXPECT_TRUE(r == ncclSuccess || r == ncclInProgress) << lastError(comm);
      caller.join();
      EXPECT_NE(stuck, ncclSuccess);
      EXPECT_LT(stuckSeconds, 2.0);
    } else {
      EXPECT_EQ(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess) << lastError(comm);
    }
    EXPECT_EQ(poll(comm, 10), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(v.data(), v.data(), v.size(), ncclFloat, ncclSum, comm, nullptr),
              ncclInvalidUsage);
    EXPECT_NE(lastError(comm).find("revoked"), std::string::npos) << lastError(comm);
    EXPECT_EQ(ncclCommFinalize(comm), ncclInvalidUsage);
    EXPECT_EQ(ncclCommRevoke(comm, 5), ncclInvalidArgument);

    ncclComm_t fresh = nullptr;
    ASSERT_EQ(ncclCommSplit(comm, 0, n - rank, &fresh, nullptr), ncclSuccess) << lastError(comm);
    int newRank = -1;
    ASSERT_EQ(ncclCommUserRank(fresh, &newRank), ncclSuccess);
    EXPECT_EQ(newRank, n - 1 - rank);  // keys n - rank order the ranks backwards
    std::vector<float> a(1000), b(1000);
    for (size_t i = 0; i < a.size(); ++i) a[i] = valueOf(rank, i);
    ASSERT_EQ(ncclAllReduce(a.data(), b.data(), a.size(), ncclFloat, ncclSum, fresh, nullptr),
              ncclSuccess)
        << lastError(fresh);
    for (size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], sumOf(n, i)) << i;
    EXPECT_EQ(ncclCommDestroy(fresh), ncclSuccess) << lastError(fresh);
    EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess) << lastError(comm);
  });
}

}  // namespace
