// All-reduce across real ranks: every datatype x op x count x in/out-of-place, on threads and
// forked processes, over shared memory and over TCP, with the ring and with the tree. Results are
// compared with a reference computed here from every rank's inputs; inputs are chosen so that every
// partial result is exactly representable, hence the comparison is exact (Avg: within one
// rounding).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "reference.h"

using chorus_test::RankMode;
using namespace chorus_test::ref;  // NOLINT: Op and the reference values

namespace {

uint64_t checksum(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

struct AlignedDelete {
  void operator()(unsigned char* p) const { free(p); }
};
using Buffer = std::unique_ptr<unsigned char, AlignedDelete>;
Buffer allocBuffer(size_t bytes) {
  return Buffer(static_cast<unsigned char*>(aligned_alloc(64, ((bytes + 64) / 64 + 1) * 64)));
}

// Runs one all-reduce and checks every element; also checks all ranks hold identical bits.
void checkCase(int rank, int nranks, ncclComm_t comm, ncclDataType_t type, Op op, size_t count,
               bool inPlace) {
  size_t es = chorus_test::typeSize(type);
  // One element of offset from a 64-byte boundary: the library must not assume alignment.
  Buffer sendBase = allocBuffer((count + 1) * es);
  Buffer recvBase = allocBuffer((count + 1) * es);
  unsigned char* send = sendBase.get() + es;
  unsigned char* recv = inPlace ? send : recvBase.get() + es;
  for (size_t i = 0; i < count; ++i)
    chorus_test::storeExact(send, i, type, inputValue(rank, i, type, op));
  ncclRedOp_t redop = static_cast<ncclRedOp_t>(op);
  if (op == kPreMulSum) {
    alignas(8) unsigned char scalar[8] = {};
    chorus_test::storeExact(scalar, 0, type, 2.0);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&redop, scalar, type, ncclScalarHostImmediate, comm),
              ncclSuccess)
        << ncclGetLastError(comm);
  }
  ASSERT_EQ(ncclAllReduce(send, recv, count, type, redop, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  if (op == kPreMulSum) {
    EXPECT_EQ(ncclRedOpDestroy(redop, comm), ncclSuccess);
  }
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = expectedValue(nranks, i, type, op);
    double got = chorus_test::loadValue(recv, i, type);
    if (!(std::fabs(got - want) <= tolerance(type, op, want))) {
      if (wrong++ < 3)
        ADD_FAILURE() << "rank " << rank << " " << chorus_test::typeName(type) << " "
                      << kOpNames[op] << " count " << count << (inPlace ? " in-place" : "")
                      << ": element " << i << " is " << got << ", expected " << want;
    }
  }
  EXPECT_EQ(wrong, 0u);
  // Bitwise agreement: the max and the min of every rank's checksum must coincide.
  uint64_t sum[2] = {checksum(recv, count * es), 0};
  sum[1] = sum[0];
  ASSERT_EQ(ncclAllReduce(&sum[0], &sum[0], 1, ncclUint64, ncclMax, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(&sum[1], &sum[1], 1, ncclUint64, ncclMin, comm, nullptr), ncclSuccess);
  EXPECT_EQ(sum[0], sum[1]) << "ranks disagree bitwise: " << chorus_test::typeName(type) << " "
                            << kOpNames[op] << " count " << count;
}

const ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                    ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                    ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

// The algorithm configuration: "" leaves the choice to the selector; "ring", "tree", "oneshot",
// "twoshot" and "rd" force one algorithm (the direct ones with small staging buffers so that calls
// span many chunks); "channels" forces rings split across three channels.
using Config = std::tuple<RankMode, bool /*socket*/, int /*nranks*/, const char* /*algorithm*/>;

class AllReduceMatrix : public ::testing::TestWithParam<Config> {};

std::vector<std::string> configEnv(const Config& config) {
  // Outputs of 4 MiB and more take the streaming-store path whatever the CPU's default.
  std::vector<std::string> env = {"CHORUS_STREAM_BYTES=4194304"};
  std::string algo = std::get<3>(config);
  if (std::get<1>(config)) {
    // Three streams per socket connector: large slots are striped over them.
    env.push_back("CHORUS_SHM_DISABLE=1");
    env.push_back("CHORUS_SOCKET_NSTREAMS=3");
  }
  if (algo == "streamedslots") {
    // The ring with every send slot written with streaming stores.
    env.push_back("CHORUS_ALGO=ring");
    env.push_back("CHORUS_SLOT_STREAM=1");
  } else if (algo == "channels") {
    env.push_back("CHORUS_ALGO=ring");
    env.push_back("CHORUS_MIN_CHANNELS=3");
    env.push_back("CHORUS_MAX_CHANNELS=3");
  } else if (!algo.empty()) {
    env.push_back("CHORUS_ALGO=" + algo);
  }
  if (algo == "oneshot" || algo == "twoshot") env.push_back("CHORUS_DIRECT_BUFFSIZE=4096");
  return env;
}

TEST_P(AllReduceMatrix, EveryTypeOpCountAndPlacement) {
  RankMode mode = std::get<0>(GetParam());
  int nranks = std::get<2>(GetParam());
  std::vector<std::string> env = configEnv(GetParam());
  // Small FIFOs make multi-slot pipelining and chunk boundaries happen at modest counts.
  env.push_back("CHORUS_BUFFSIZE=65536");
  const size_t counts[] = {0, 1, 2, 7, 13, 1031, 20011};
  chorus_test::runRanks(nranks, mode, env, [&](int rank, int n, ncclComm_t comm) {
    for (ncclDataType_t type : kAllTypes)
      for (int op = 0; op < kNumTestOps; ++op)
        for (size_t count : counts)
          for (bool inPlace : {false, true})
            checkCase(rank, n, comm, type, static_cast<Op>(op), count, inPlace);
  });
}

// Large messages: many loops of the ring (many chunks in flight along the trees), every slot
// of the FIFO reused many times.
TEST_P(AllReduceMatrix, LargeFloatSum) {
  RankMode mode = std::get<0>(GetParam());
  int nranks = std::get<2>(GetParam());
  std::vector<std::string> env = configEnv(GetParam());
  chorus_test::runRanks(nranks, mode, env, [&](int rank, int n, ncclComm_t comm) {
    const size_t count = (size_t(16) << 20) / 4 + 3;  // just over 16 MiB of floats
    checkCase(rank, n, comm, ncclFloat32, kSum, count, false);
    checkCase(rank, n, comm, ncclInt32, kMax, count / 4 + 1, true);
  });
}

// PreMulSum with a different scalar on every rank (as nccl-tests uses it): each rank scales its
// own input by its own scalar, whatever algorithm runs.
TEST_P(AllReduceMatrix, PreMulSumScalarsDifferPerRank) {
  RankMode mode = std::get<0>(GetParam());
  int nranks = std::get<2>(GetParam());
  std::vector<std::string> env = configEnv(GetParam());
  chorus_test::runRanks(nranks, mode, env, [&](int rank, int n, ncclComm_t comm) {
    for (size_t count : {size_t(1), size_t(13), size_t(5000), size_t(300007)}) {
      for (bool immediate : {true, false}) {
        std::vector<int32_t> in(count), out(count, -1);
        for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(i % 7) + rank;
        int32_t scalar = rank + 1;
        ncclRedOp_t op;
        ASSERT_EQ(
            ncclRedOpCreatePreMulSum(&op, &scalar, ncclInt32,
                                     immediate ? ncclScalarHostImmediate : ncclScalarDevice, comm),
            ncclSuccess);
        ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclInt32, op, comm, nullptr),
                  ncclSuccess)
            << ncclGetLastError(comm);
        ASSERT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          int64_t want = 0;
          for (int r = 0; r < n; ++r) want += static_cast<int64_t>(r + 1) * (i % 7 + r);
          if (out[i] != want && wrong++ < 3)
            ADD_FAILURE() << "rank " << rank << " count " << count << " element " << i << ": "
                          << out[i] << " != " << want;
        }
        EXPECT_EQ(wrong, 0u);
      }
    }
  });
}

// Sockets this process has open, as the kernel lists them (their "socket:[inode]" names).
std::set<std::string> openSockets() {
  std::set<std::string> names;
  for (int fd = 0; fd < 4096; ++fd) {
    char path[64], target[128];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t len = readlink(path, target, sizeof(target) - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    if (strncmp(target, "socket:", 7) == 0) names.insert(target);
  }
  return names;
}

// Sockets in `after` that were not open in `before`: what was made in between, whatever else
// closed meanwhile (the rendezvous may still be closing its connections after init).
int socketsMade(const std::set<std::string>& before, const std::set<std::string>& after) {
  int n = 0;
  for (const std::string& name : after) n += before.count(name) == 0 ? 1 : 0;
  return n;
}

// Recursive doubling over sockets carries both directions to a partner on one set of
// connections (streams), made on its first call; point-to-point keeps one set per direction.
// Counted by the kernel's file table of each rank process, data checked against the sums.
TEST(SocketConnections, RdSharesOneConnectionPerPartnerP2pDoesNot) {
  const int nstreams = 2;
  for (int nranks : {2, 3, 4}) {
    chorus_test::runRanks(
        nranks, RankMode::kProcesses,
        {"CHORUS_SHM_DISABLE=1", "CHORUS_ALGO=rd",
         "CHORUS_SOCKET_NSTREAMS=" + std::to_string(nstreams)},
        [&](int rank, int n, ncclComm_t comm) {
          int pw = 1;
          while (pw * 2 <= n) pw *= 2;
          int partners = 0;
          if (rank >= pw) {
            partners = 1;
          } else {
            partners = rank + pw < n ? 1 : 0;
            for (int bit = 1; bit < pw; bit <<= 1) ++partners;
          }
          const size_t count = 5;
          std::vector<float> in(count), out(count);
          for (size_t i = 0; i < count; ++i) in[i] = float(rank * 10 + i);
          const std::set<std::string> before = openSockets();
          ASSERT_EQ(
              ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr),
              ncclSuccess)
              << ncclGetLastError(comm);
          const std::set<std::string> afterRd = openSockets();
          for (size_t i = 0; i < count; ++i)
            EXPECT_EQ(out[i], float(10 * n * (n - 1) / 2 + n * i)) << "element " << i;
          EXPECT_EQ(socketsMade(before, afterRd), partners * nstreams)
              << "rank " << rank << " of " << n << ": sockets made for recursive doubling";
          // Every rank sends to and receives from every other in one group.
          std::vector<float> mine(count, float(rank)), theirs(count * n, -1.f);
          ASSERT_EQ(ncclGroupStart(), ncclSuccess);
          for (int peer = 0; peer < n; ++peer) {
            if (peer == rank) continue;
            ASSERT_EQ(ncclSend(mine.data(), count, ncclFloat32, peer, comm, nullptr), ncclSuccess);
            ASSERT_EQ(
                ncclRecv(theirs.data() + peer * count, count, ncclFloat32, peer, comm, nullptr),
                ncclSuccess);
          }
          ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
          for (int peer = 0; peer < n; ++peer)
            if (peer != rank) EXPECT_EQ(theirs[peer * count + count - 1], float(peer));
          EXPECT_EQ(socketsMade(afterRd, openSockets()), 2 * (n - 1) * nstreams)
              << "rank " << rank << " of " << n << ": sockets made for point-to-point";
        });
  }
}

std::string configName(const ::testing::TestParamInfo<Config>& info) {
  return std::string(chorus_test::modeName(std::get<0>(info.param))) +
         (std::get<1>(info.param) ? "_tcp_" : "_shm_") + std::to_string(std::get<2>(info.param)) +
         "ranks" + (std::get<3>(info.param)[0] != '\0' ? "_" : "") + std::get<3>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Threads, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values("")),
                         configName);
INSTANTIATE_TEST_SUITE_P(Processes, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Bool(), ::testing::Values(2, 3, 5),
                                            ::testing::Values("")),
                         configName);
// The tree: depths 1 to 3, interior ranks with one and two children, both transports.
INSTANTIATE_TEST_SUITE_P(ThreadsTree, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Bool(), ::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("tree")),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesTree, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Bool(), ::testing::Values(3, 5),
                                            ::testing::Values("tree")),
                         configName);
// The direct algorithms need every rank on one host with shared memory.
INSTANTIATE_TEST_SUITE_P(ThreadsDirect, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(false), ::testing::Values(2, 3, 4, 8),
                                            ::testing::Values("oneshot", "twoshot")),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesDirect, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(false), ::testing::Values(3),
                                            ::testing::Values("oneshot", "twoshot")),
                         configName);
// Recursive doubling: powers of two and folded ranks (3: one folded, 6: two). It serves paths
// through the network, so on one host it runs over sockets (the multi-host suite mixes shared
// memory and sockets).
INSTANTIATE_TEST_SUITE_P(ThreadsRd, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(true), ::testing::Values(2, 3, 6),
                                            ::testing::Values("rd")),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesRd, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(true), ::testing::Values(5),
                                            ::testing::Values("rd")),
                         configName);
// Rings alone (the selector prefers direct for small calls on one host), and split in channels.
INSTANTIATE_TEST_SUITE_P(ThreadsRing, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Bool(), ::testing::Values(2, 4),
                                            ::testing::Values("ring", "channels")),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesChannels, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Bool(), ::testing::Values(3),
                                            ::testing::Values("channels")),
                         configName);
// The ring with every send slot written with streaming stores (the path taken where cached
// stores measure slow): copies, reductions, PreMulSum scaling and Avg's final division.
INSTANTIATE_TEST_SUITE_P(ThreadsStreamedSlots, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(false), ::testing::Values(2, 3, 4),
                                            ::testing::Values("streamedslots")),
                         configName);
INSTANTIATE_TEST_SUITE_P(ProcessesStreamedSlots, AllReduceMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(false), ::testing::Values(3),
                                            ::testing::Values("streamedslots")),
                         configName);

}  // namespace
