// Every collective and send/recv between ranks whose only path is the IB network: ranks are
// threads of this process with shared memory disabled, NCCL_NET=IB, and the stand-in verbs
// library simulating the HCAs (CHORUS_IB_VERBS_LIBRARY). Results are checked against references
// computed here; the stand-in's counters show the data went through RDMA writes.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "tests/ib/fake_verbs.h"
#include "tests/multirank/harness.h"

namespace {

using chorus_test::RankMode;
using chorus_test::runRanks;

FakeVerbsStats fakeStats() {
  FakeVerbsStats s;
  memset(&s, 0, sizeof s);
  void* lib = dlopen(getenv("CHORUS_IB_VERBS_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return s;
  auto fn = reinterpret_cast<FakeVerbsStatsFn>(dlsym(lib, "fake_verbs_stats"));
  if (fn != nullptr) fn(&s);
  return s;
}

// Element i of rank r's input: small integers, exact in float sums.
float valueOf(int r, size_t i) {
  return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 101));
}

// Runs every collective; returns the RDMA writes without immediate (FIFO entries a receiver
// posts to its sender) per message (a write with immediate on each queue pair).
double runAll(int nranks, size_t count, const std::vector<std::string>& env = {}) {
  const FakeVerbsStats before = fakeStats();
  runRanks(nranks, RankMode::kThreads, env, [&](int rank, int n, ncclComm_t& comm) {
    std::vector<float> in(count), out(count * n, -1), ref(count * n);
    for (size_t i = 0; i < count; ++i) in[i] = valueOf(rank, i);

    // all-reduce (sum)
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr),
              ncclSuccess)
        << ncclGetLastError(comm);
    for (size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int r = 0; r < n; ++r) s += valueOf(r, i);
      ASSERT_EQ(out[i], s) << "all-reduce element " << i;
    }
    // all-reduce (max) on int32
    std::vector<int32_t> iin(count), iout(count);
    for (size_t i = 0; i < count; ++i) iin[i] = static_cast<int32_t>((i * 7 + rank * 13) % 1000);
    ASSERT_EQ(ncclAllReduce(iin.data(), iout.data(), count, ncclInt32, ncclMax, comm, nullptr),
              ncclSuccess);
    for (size_t i = 0; i < count; ++i) {
      int32_t m = 0;
      for (int r = 0; r < n; ++r) m = std::max(m, static_cast<int32_t>((i * 7 + r * 13) % 1000));
      ASSERT_EQ(iout[i], m) << "max element " << i;
    }
    // broadcast from the last rank
    std::vector<float> b(count);
    for (size_t i = 0; i < count; ++i) b[i] = rank == n - 1 ? valueOf(n - 1, i) : 0.f;
    ASSERT_EQ(ncclBroadcast(b.data(), b.data(), count, ncclFloat, n - 1, comm, nullptr),
              ncclSuccess);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(b[i], valueOf(n - 1, i)) << "broadcast " << i;
    // reduce to rank 1
    std::vector<float> red(count, -1);
    ASSERT_EQ(ncclReduce(in.data(), red.data(), count, ncclFloat, ncclSum, 1, comm, nullptr),
              ncclSuccess);
    if (rank == 1)
      for (size_t i = 0; i < count; ++i) {
        float s = 0;
        for (int r = 0; r < n; ++r) s += valueOf(r, i);
        ASSERT_EQ(red[i], s) << "reduce " << i;
      }
    // all-gather
    ASSERT_EQ(ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr), ncclSuccess);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[r * count + i], valueOf(r, i)) << "all-gather " << r << "," << i;
    // reduce-scatter: block r of the sum of every rank's n-block input
    std::vector<float> big(count * n);
    for (size_t i = 0; i < big.size(); ++i) big[i] = valueOf(rank, i);
    std::vector<float> mine(count, -1);
    ASSERT_EQ(ncclReduceScatter(big.data(), mine.data(), count, ncclFloat, ncclSum, comm, nullptr),
              ncclSuccess);
    for (size_t i = 0; i < count; ++i) {
      float s = 0;
      for (int r = 0; r < n; ++r) s += valueOf(r, rank * count + i);
      ASSERT_EQ(mine[i], s) << "reduce-scatter " << i;
    }
    // all-to-all: block d of rank s goes to block s of rank d
    std::vector<float> a2a(count * n);
    for (int d = 0; d < n; ++d)
      for (size_t i = 0; i < count; ++i) a2a[d * count + i] = valueOf(rank * 16 + d, i);
    ASSERT_EQ(ncclAlltoAll(a2a.data(), out.data(), count, ncclFloat, comm, nullptr), ncclSuccess);
    for (int s = 0; s < n; ++s)
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(out[s * count + i], valueOf(s * 16 + rank, i)) << "all-to-all " << s;
    // send/recv around the ring
    std::vector<float> got(count, -1);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(in.data(), count, ncclFloat, (rank + 1) % n, comm, nullptr), ncclSuccess);
    ASSERT_EQ(ncclRecv(got.data(), count, ncclFloat, (rank + n - 1) % n, comm, nullptr),
              ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(got[i], valueOf((rank + n - 1) % n, i)) << "recv " << i;
  });
  const FakeVerbsStats after = fakeStats();
  // Each rank's all-reduce alone moves more than count floats out of it over RDMA writes.
  EXPECT_GT(after.immWrites, before.immWrites);
  EXPECT_GT(after.bytes - before.bytes, static_cast<uint64_t>(nranks) * count * sizeof(float));
  EXPECT_EQ(after.badTransitions, 0u);
  EXPECT_EQ(after.cqOverruns, 0u);
  EXPECT_EQ(after.qpsLive, before.qpsLive);  // every queue pair destroyed with its communicator
  const char* qps = getenv("NCCL_IB_QPS_PER_CONNECTION");
  const double messages =
      static_cast<double>(after.immWrites - before.immWrites) / (qps != nullptr ? atoi(qps) : 1);
  const double fifo = static_cast<double>((after.writes - before.writes) - messages);
  return messages > 0 ? fifo / messages : 0;
}

TEST(IbCollectives, TwoRanksSmall) {
  runAll(2, 1000);
}
// A slot's header and data are one grouped receive: one FIFO write to the sender for their two
// messages; two receives a slot make one a message. Both make more, as many in each run:
// receives posted ahead that the end leaves unused (8 a connection at most).
TEST(IbCollectives, ThreeRanksLarge) {
  const double grouped = runAll(3, 300000);
  const double single = runAll(3, 300000, {"CHORUS_NET_GROUPED_RECVS=0"});
  EXPECT_GE(grouped, 0.5);
  EXPECT_GE(single, 1.0);
  EXPECT_LT(grouped, single - 0.4) << grouped << " and " << single;
}
TEST(IbCollectives, FourRanks) {
  runAll(4, 20000);
}

}  // namespace
