// Direct all-reduce (one-shot and two-shot) across real ranks sharing a DirectRegion: ranks as
// threads of this process and as forked processes (separate address spaces, futexes across
// processes), each with a real bootstrap. Every datatype x op x count x in/out-of-place x mode is
// compared with the reference computed here from every rank's inputs (exact where the type
// allows, Avg of floats within one rounding), and all ranks must hold identical bits. Small
// staging buffers make chunk boundaries and buffer reuse happen at modest counts; calls follow
// each other with no synchronisation in between, so double buffering is exercised.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "exec/call_tag.h"
#include "exec/host_direct.h"
#include "harness.h"
#include "reference.h"
#include "transport/shm/direct_region.h"

namespace chorus {
namespace {

using namespace chorus_test::ref;  // NOLINT: Op and the reference values

constexpr size_t kSmallBuffer = 4096;

// What one rank's test body gets: its bootstrap, its region and an execution context.
struct RankEnv {
  int rank = 0;
  int nranks = 1;
  std::string tag;
  Bootstrap* bootstrap = nullptr;
  DirectRegion* region = nullptr;
  AbortFlag abort;
  ExecContext ctx;
  SlotStreamPolicy stores;
};
using Body = std::function<void(RankEnv&)>;

// Unique per region, also between test programs running at the same time.
std::string freshTag() {
  static std::atomic<int> counter{0};
  static const uint32_t nonce = std::random_device()();
  char buf[64];
  snprintf(buf, sizeof(buf), "dt%x-%x-%d", static_cast<unsigned>(getpid()), nonce,
           counter.fetch_add(1));
  return buf;
}

void runRank(const UniqueIdInfo& id, int rank, int nranks, const std::string& tag,
             size_t bufferBytes, const Body& body) {
  BootstrapOptions options;
  options.initTimeoutSeconds = 60;
  options.timeoutSeconds = 60;
  Result<std::unique_ptr<Bootstrap>> boot = Bootstrap::init(id, rank, nranks, options);
  ASSERT_TRUE(boot.isOk()) << "rank " << rank << ": " << boot.status().message();
  TransportContext tc;
  tc.rank = rank;
  tc.nranks = nranks;
  tc.commTag = tag;
  tc.bootstrap = boot.value().get();
  tc.timeoutSeconds = 60;
  Result<std::unique_ptr<DirectRegion>> region = DirectRegion::create(tc, bufferBytes);
  ASSERT_TRUE(region.isOk()) << "rank " << rank << ": " << region.status().message();
  RankEnv env;
  env.rank = rank;
  env.nranks = nranks;
  env.tag = tag;
  env.bootstrap = boot.value().get();
  env.region = region.value().get();
  env.ctx.rank = rank;
  env.ctx.nranks = nranks;
  env.ctx.abort = &env.abort;
  env.ctx.timeoutSeconds = 60;
  env.ctx.spinCount = 200;
  body(env);
}

void runThreads(int nranks, size_t bufferBytes, const Body& body) {
  Result<UniqueIdInfo> id = createLocalUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  const std::string tag = freshTag();
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] { runRank(id.value(), r, nranks, tag, bufferBytes, body); });
  for (std::thread& t : threads) t.join();
}

// Each rank a forked process; rank 0 hosts the rendezvous at CHORUS_COMM_ID.
void runProcesses(int nranks, size_t bufferBytes, const Body& body, double timeoutSeconds = 120) {
  const std::string commId = "127.0.0.1:" + std::to_string(chorus_test::freeLoopbackPort());
  const std::string tag = freshTag();
  std::vector<pid_t> pids;
  for (int r = 0; r < nranks; ++r) {
    fflush(nullptr);
    pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) {
      setenv("CHORUS_COMM_ID", commId.c_str(), 1);
      Result<UniqueIdInfo> id = uniqueIdFromEnvironment();
      if (!id.isOk()) {
        fprintf(stderr, "rank %d: %s\n", r, id.status().message().c_str());
        _exit(3);
      }
      runRank(id.value(), r, nranks, tag, bufferBytes, body);
      fflush(nullptr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeoutSeconds * 1000));
  for (int r = 0; r < nranks; ++r) {
    int status = 0;
    pid_t p = 0;
    while ((p = waitpid(pids[r], &status, WNOHANG)) == 0 &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // reaping, not synchronising
    if (p == 0) {
      ADD_FAILURE() << "rank " << r << " hung; killed after " << timeoutSeconds << " s";
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &status, 0);
    } else if (WIFSIGNALED(status)) {
      ADD_FAILURE() << "rank " << r << " died from signal " << WTERMSIG(status);
    } else if (WEXITSTATUS(status) != 0) {
      ADD_FAILURE() << "rank " << r << " failed (exit " << WEXITSTATUS(status) << ")";
    }
  }
}

uint64_t checksum(const void* p, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct FreeDelete {
  void operator()(unsigned char* p) const { free(p); }
};
using Buffer = std::unique_ptr<unsigned char, FreeDelete>;
Buffer allocBuffer(size_t bytes) {
  return Buffer(static_cast<unsigned char*>(aligned_alloc(64, ((bytes + 64) / 64 + 1) * 64)));
}

const ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                    ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                    ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

// Runs one all-reduce, checks every element against the reference and folds the result bits
// into *digest (compared across ranks later).
void checkCase(RankEnv& e, ncclDataType_t type, Op op, size_t count, bool inPlace, bool twoShot,
               uint64_t* digest) {
  const size_t es = chorus_test::typeSize(type);
  // One element of offset from a 64-byte boundary: nothing may assume aligned user buffers.
  Buffer sendBase = allocBuffer((count + 1) * es);
  Buffer recvBase = allocBuffer((count + 1) * es);
  unsigned char* send = sendBase.get() + es;
  unsigned char* recv = inPlace ? send : recvBase.get() + es;
  for (size_t i = 0; i < count; ++i)
    chorus_test::storeExact(send, i, type, inputValue(e.rank, i, type, op));
  if (!inPlace) memset(recv, 0xA5, count * es);
  CollArgs args;
  args.sendbuff = send;
  args.recvbuff = recv;
  args.count = count;
  args.type = static_cast<DataType>(type);
  args.op.kind = static_cast<RedKind>(op);
  args.op.nranks = e.nranks;
  if (op == kPreMulSum) chorus_test::storeExact(args.op.scalar, 0, type, 2.0);
  const char* what = twoShot ? "two-shot" : "one-shot";
  Status s = hostAllReduceDirect(e.ctx, args, *e.region, twoShot, e.stores);
  ASSERT_TRUE(s.isOk()) << s.message();
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = expectedValue(e.nranks, i, type, op);
    double got = chorus_test::loadValue(recv, i, type);
    if (!(std::fabs(got - want) <= tolerance(type, op, want)) && wrong++ < 3)
      ADD_FAILURE() << "rank " << e.rank << " of " << e.nranks << " " << what << " "
                    << chorus_test::typeName(type) << " " << kOpNames[op] << " count " << count
                    << (inPlace ? " in-place" : "") << ": element " << i << " is " << got
                    << ", expected " << want;
  }
  EXPECT_EQ(wrong, 0u);
  *digest = checksum(recv, count * es, *digest);
}

// Every rank must have folded identical bits into its digest.
void expectSameDigest(RankEnv& e, uint64_t digest, const std::string& what) {
  std::vector<uint64_t> all(static_cast<size_t>(e.nranks));
  all[static_cast<size_t>(e.rank)] = digest;
  Status s = e.bootstrap->allGather(all.data(), sizeof(uint64_t));
  ASSERT_TRUE(s.isOk()) << s.message();
  for (int r = 1; r < e.nranks; ++r)
    EXPECT_EQ(all[static_cast<size_t>(r)], all[0])
        << "ranks 0 and " << r << " disagree bitwise: " << what;
}

// The whole matrix on one region; counts include one spanning several chunks plus a remainder.
void everyTypeOpCountAndPlacement(RankEnv& e) {
  for (ncclDataType_t type : kAllTypes) {
    const size_t chunkElems = e.region->bufferBytes() / chorus_test::typeSize(type);
    const size_t counts[] = {0, 1, 2, 7, 13, 1031, 3 * chunkElems + 5};
    uint64_t digest = 0;
    for (int op = 0; op < kNumTestOps; ++op)
      for (size_t count : counts)
        for (bool inPlace : {false, true})
          for (bool twoShot : {false, true})
            checkCase(e, type, static_cast<Op>(op), count, inPlace, twoShot, &digest);
    expectSameDigest(e, digest, chorus_test::typeName(type));
  }
}

// Consecutive calls alternating modes, sizes, types and ops on one region, with no
// synchronisation between them; every rank draws the same sequence.
void mixedCallsBackToBack(RankEnv& e, int calls) {
  const ncclDataType_t types[] = {ncclFloat32, ncclInt32, ncclFloat16, ncclInt8, ncclFloat64};
  std::mt19937 rng(12345);
  uint64_t digest = 0;
  for (int c = 0; c < calls; ++c) {
    ncclDataType_t type = types[rng() % 5];
    Op op = static_cast<Op>(rng() % kNumTestOps);
    const size_t chunkElems = e.region->bufferBytes() / chorus_test::typeSize(type);
    size_t count = rng() % 4 == 0 ? rng() % 16 : rng() % (3 * chunkElems + 1);
    bool twoShot = (c / 3) % 2 == 1 ? rng() % 4 != 0 : rng() % 4 == 0;
    checkCase(e, type, op, count, rng() % 2 == 0, twoShot, &digest);
    if (::testing::Test::HasFatalFailure()) return;
  }
  expectSameDigest(e, digest, "mixed calls");
  EXPECT_EQ(e.region->broken(), false);
}

class DirectMatrix : public ::testing::TestWithParam<int> {};

TEST_P(DirectMatrix, ThreadsEveryTypeOpCountAndPlacement) {
  runThreads(GetParam(), kSmallBuffer, everyTypeOpCountAndPlacement);
}

TEST_P(DirectMatrix, ThreadsMixedModesAndSizesBackToBack) {
  runThreads(GetParam(), kSmallBuffer, [](RankEnv& e) { mixedCallsBackToBack(e, 300); });
}

// Staged chunks and two-shot results written with streaming stores (as where cached stores
// measure slow), for every type, op and placement, and in mixed calls.
TEST_P(DirectMatrix, ThreadsStreamedStores) {
  runThreads(GetParam(), kSmallBuffer, [](RankEnv& e) {
    e.ctx.slotStream = SlotStreamMode::kAlways;
    everyTypeOpCountAndPlacement(e);
    mixedCallsBackToBack(e, 100);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DirectMatrix, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

class DirectProcesses : public ::testing::TestWithParam<int> {};

TEST_P(DirectProcesses, EveryTypeOpCountAndPlacement) {
  runProcesses(GetParam(), kSmallBuffer, everyTypeOpCountAndPlacement);
}

TEST_P(DirectProcesses, MixedModesAndSizesBackToBack) {
  runProcesses(GetParam(), kSmallBuffer, [](RankEnv& e) { mixedCallsBackToBack(e, 300); });
}

INSTANTIATE_TEST_SUITE_P(Ranks, DirectProcesses, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Many chunks of a realistic buffer size, both modes.
TEST(Direct, LargeCountsWithTheDefaultBufferSize) {
  runThreads(4, 256 << 10, [](RankEnv& e) {
    uint64_t digest = 0;
    const size_t count = (size_t(3) << 20) / 4 + 3;  // just over 3 MiB of floats
    checkCase(e, ncclFloat32, kSum, count, false, false, &digest);
    checkCase(e, ncclFloat32, kSum, count, true, true, &digest);
    checkCase(e, ncclBfloat16, kAvg, count / 2 + 1, false, true, &digest);
    expectSameDigest(e, digest, "large counts");
  });
}

// Inputs of widely different magnitudes, where rounding depends on the order of the operands:
// every rank must still end with the same bits (one order, one kernel, on every rank).
TEST(Direct, RanksAgreeBitwiseWhenRoundingDependsOnOrder) {
  runThreads(5, kSmallBuffer, [](RankEnv& e) {
    const size_t count = 3000;
    uint64_t digest = 0;
    for (ncclDataType_t type : {ncclFloat32, ncclFloat16, ncclBfloat16, ncclFloat64})
      for (bool twoShot : {false, true})
        for (RedKind kind : {RedKind::kSum, RedKind::kAvg, RedKind::kProd}) {
          const size_t es = chorus_test::typeSize(type);
          std::vector<unsigned char> in(count * es), out(count * es);
          std::mt19937 rng(static_cast<uint32_t>(1000 + e.rank));
          for (size_t i = 0; i < count; ++i) {
            double mag = std::ldexp(1.0, static_cast<int>(rng() % 12) - 6);
            double v = mag * (1.0 + static_cast<double>(rng() % 1000) / 997.0);
            // Narrow types keep the leading mantissa bits (storeExact truncates the rest).
            chorus_test::storeExact(in.data(), i, type, rng() % 2 ? v : -v);
          }
          CollArgs args;
          args.sendbuff = in.data();
          args.recvbuff = out.data();
          args.count = count;
          args.type = static_cast<DataType>(type);
          args.op.kind = kind;
          args.op.nranks = e.nranks;
          ASSERT_TRUE(hostAllReduceDirect(e.ctx, args, *e.region, twoShot, e.stores).isOk());
          digest = checksum(out.data(), out.size(), digest);
        }
    expectSameDigest(e, digest, "inexact floating-point sums");
  });
}

TEST(Direct, NamesAreRemovedOnceEveryRankMappedThem) {
  runThreads(3, kSmallBuffer, [](RankEnv& e) {
    ASSERT_TRUE(e.bootstrap->barrier().isOk());
    for (int r = 0; r < e.nranks; ++r) {
      std::string name = "/chorus-" + e.tag + "-direct-" + std::to_string(r);
      int fd = shm_open(name.c_str(), O_RDWR, 0600);
      int err = errno;
      if (fd >= 0) close(fd);
      EXPECT_LT(fd, 0) << name << " still exists";
      EXPECT_EQ(err, ENOENT);
    }
  });
}

TEST(Direct, DifferentBufferSizesFailOnEveryRank) {
  Result<UniqueIdInfo> id = createLocalUniqueId();
  ASSERT_TRUE(id.isOk());
  const std::string tag = freshTag();
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      BootstrapOptions options;
      options.initTimeoutSeconds = 30;
      options.timeoutSeconds = 30;
      auto boot = Bootstrap::init(id.value(), r, 2, options);
      if (!boot.isOk()) {
        results[r] = boot.status();
        return;
      }
      TransportContext tc;
      tc.rank = r;
      tc.nranks = 2;
      tc.commTag = tag;
      tc.bootstrap = boot.value().get();
      results[r] = DirectRegion::create(tc, kSmallBuffer * (r + 1)).status();
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_FALSE(results[r].isOk()) << "rank " << r;
  EXPECT_NE(results[0].message().find("same size"), std::string::npos) << results[0].message();
}

TEST(Direct, TimeoutNamesThePeerThatNeverCame) {
  runThreads(2, kSmallBuffer, [](RankEnv& e) {
    if (e.rank == 0) {
      e.ctx.timeoutSeconds = 0.3;
      std::vector<float> buf(100, 1.0f);
      CollArgs args;
      args.sendbuff = buf.data();
      args.recvbuff = buf.data();
      args.count = buf.size();
      args.op.nranks = 2;
      args.tag = collectiveTag(Collective::kAllReduce, args, 7);
      Status s = hostAllReduceDirect(e.ctx, args, *e.region, false, e.stores);
      EXPECT_EQ(s.code(), Code::kRemoteError);
      EXPECT_NE(s.message().find("rank 0 waits for rank 1 at one-shot step 1 of ncclAllReduce #7"),
                std::string::npos)
          << s.message();
      // The ranks are out of step now: the region refuses further calls.
      Status again = hostAllReduceDirect(e.ctx, args, *e.region, true, e.stores);
      EXPECT_FALSE(again.isOk());
      EXPECT_NE(again.message().find("out of step"), std::string::npos) << again.message();
    }
    ASSERT_TRUE(e.bootstrap->barrier().isOk());
  });
}

TEST(Direct, AbortInterruptsTheWait) {
  runThreads(2, kSmallBuffer, [](RankEnv& e) {
    if (e.rank == 1) {
      e.abort.raise();
      std::vector<int32_t> buf(10, 1);
      CollArgs args;
      args.sendbuff = buf.data();
      args.recvbuff = buf.data();
      args.count = buf.size();
      args.type = DataType::kInt32;
      Status s = hostAllReduceDirect(e.ctx, args, *e.region, true, e.stores);
      EXPECT_EQ(s.code(), Code::kInvalidUsage);
      EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
    }
    ASSERT_TRUE(e.bootstrap->barrier().isOk());
  });
}

// Not a timed test: prints the time per call of a small steady-state loop.
TEST(Direct, SmallMessageLoopTime) {
  for (bool twoShot : {false, true})
    runThreads(2, 256 << 10, [twoShot](RankEnv& e) {
      std::vector<float> in(1024, 1.0f), out(1024);
      CollArgs args;
      args.sendbuff = in.data();
      args.recvbuff = out.data();
      args.count = in.size();
      args.op.nranks = e.nranks;
      const int iterations = 2000;
      auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations; ++i)
        ASSERT_TRUE(hostAllReduceDirect(e.ctx, args, *e.region, twoShot, e.stores).isOk());
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          iterations;
      EXPECT_EQ(out[0], 2.0f);
      if (e.rank == 0)
        printf("2 ranks, 4 KiB float sum, %s: %.2f us per call\n",
               twoShot ? "two-shot" : "one-shot", us);
    });
}

}  // namespace
}  // namespace chorus

int main(int argc, char** argv) {
  // Bootstrap traffic stays on the loopback interface.
  setenv("CHORUS_SOCKET_IFNAME", "=lo", 0);
  setenv("CHORUS_SOCKET_FAMILY", "AF_INET", 0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
