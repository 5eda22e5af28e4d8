// The collective kernel's code (cuda/dev_kernel.h) run on the CPU by the emulator: every
// collective, type and reduction over 1-4 ranks with both protocols, against the independent
// reference of the multi-rank tests; step counters carried across launches; works of one
// launch ordered by the grid barrier; a rank whose peer never comes stops on abort. Also the LL
// line format itself.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/dev_emulator.h"
#include "device/comm_host_links.h"
#include "device/kernel_calls.h"
#include "cuda/dev_memory.h"
#include "cuda/dev_plan.h"
#include "exec/reduce.h"
#include "multirank/reference.h"

namespace chorus {
namespace dev {
namespace {

TEST(LlLine, CarriesDataWithItsFlag) {
  LlLine line{};
  uint64_t data = 0;
  EXPECT_FALSE(llTryLoad(&line, llFlag(0), &data)) << "a fresh line must not look written";
  llStore(&line, 0x1122334455667788ull, llFlag(5));
  ASSERT_TRUE(llTryLoad(&line, llFlag(5), &data));
  EXPECT_EQ(data, 0x1122334455667788ull);
  EXPECT_FALSE(llTryLoad(&line, llFlag(4), &data)) << "the previous step's flag";
  EXPECT_FALSE(llTryLoad(&line, llFlag(6), &data)) << "the next step's flag";
}

TEST(LlLine, TornLineIsNotTaken) {
  LlLine line{};
  llStore(&line, 0xaaaaaaaabbbbbbbbull, llFlag(1));
  // Only the first half of the next step's store has landed.
  line.data0 = 0x12345678u;
  line.flag0 = llFlag(2);
  uint64_t data = 0;
  EXPECT_FALSE(llTryLoad(&line, llFlag(2), &data));
  EXPECT_FALSE(llTryLoad(&line, llFlag(1), &data));
  line.data1 = 0x9abcdef0u;
  line.flag1 = llFlag(2);
  ASSERT_TRUE(llTryLoad(&line, llFlag(2), &data));
  EXPECT_EQ(data, 0x9abcdef012345678ull);
}

TEST(LlLine, FlagsOfOneSlotDifferAcrossWraps) {
  for (uint64_t step : {0ull, 7ull, 0xffffffffull, 0x100000000ull}) {
    EXPECT_NE(llFlag(step), 0u) << step;
    EXPECT_NE(llFlag(step), llFlag(step + 8)) << step;
  }
}

const ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                    ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                    ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

class AllReduceOnHost : public ::testing::TestWithParam<std::tuple<int, Proto>> {};

// Every type and reduction; counts below one slot, across loops, and not a multiple of a line.
TEST_P(AllReduceOnHost, EveryTypeAndOp) {
  const int nranks = std::get<0>(GetParam());
  const Proto proto = std::get<1>(GetParam());
  std::vector<Call> calls;
  for (ncclDataType_t t : kAllTypes)
    for (int op = 0; op < ref::kNumTestOps; ++op)
      for (size_t count : {size_t{1}, size_t{37}, size_t{3001}})
        calls.push_back(Call{Coll::kAllReduce, t, static_cast<ref::Op>(op), count, proto, 2});
  runCalls(nranks, calls, /*fused=*/false, /*threadsPerBlock=*/1);
}

INSTANTIATE_TEST_SUITE_P(RanksAndProtocols, AllReduceOnHost,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Proto::kLl, Proto::kSimple)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Proto>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Proto::kLl ? "LL" : "Simple");
                         });

class CollectivesOnHost : public ::testing::TestWithParam<std::tuple<int, Proto>> {};

TEST_P(CollectivesOnHost, ReduceScatterAllGatherBroadcastReduce) {
  const int nranks = std::get<0>(GetParam());
  const Proto proto = std::get<1>(GetParam());
  std::vector<Call> calls;
  for (ncclDataType_t t :
       {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3})
    for (size_t count : {size_t{1}, size_t{33}, size_t{2500}}) {
      for (int op = 0; op < ref::kNumTestOps; ++op) {
        calls.push_back(Call{Coll::kReduceScatter, t, static_cast<ref::Op>(op), count, proto, 2});
        calls.push_back(
            Call{Coll::kReduce, t, static_cast<ref::Op>(op), count, proto, 2, nranks - 1});
      }
      calls.push_back(Call{Coll::kAllGather, t, ref::kSum, count, proto, 2});
      calls.push_back(Call{Coll::kBroadcast, t, ref::kSum, count, proto, 2, nranks / 2});
    }
  runCalls(nranks, calls, false, 1);
}

INSTANTIATE_TEST_SUITE_P(RanksAndProtocols, CollectivesOnHost,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(Proto::kLl, Proto::kSimple)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Proto>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Proto::kLl ? "LL" : "Simple");
                         });

// Several threads per block stripe each slot; in place; the scalar read from memory.
TEST(KernelOnHost, ThreadsOfABlockInPlaceAndDeviceScalar) {
  std::vector<Call> calls;
  for (Proto p : {Proto::kLl, Proto::kSimple}) {
    Call c{Coll::kAllReduce, ncclFloat32, ref::kPreMulSum, 5000, p, 3};
    c.deviceScalar = true;
    calls.push_back(c);
    c = Call{Coll::kAllReduce, ncclBfloat16, ref::kSum, 4099, p, 2};
    c.inPlace = true;
    calls.push_back(c);
    c = Call{Coll::kAllGather, ncclInt32, ref::kSum, 777, p, 2};
    c.inPlace = true;
    calls.push_back(c);
    c = Call{Coll::kBroadcast, ncclUint8, ref::kSum, 1001, p, 2, 0};
    c.inPlace = true;
    calls.push_back(c);
  }
  EmuGeometry g;
  g.nchannels = 3;
  runCalls(3, calls, false, 4, g);
}

// Links that are not peer-to-peer (shared memory, sockets, networks): each kernel sends into a
// FIFO of its own rank and proxy threads carry the slots through host FIFOs. Every collective,
// both protocols, counts past the FIFO, several threads per block, fused and separate launches
// on one clique (the proxies resume where the last launch stopped).
TEST(KernelOnHost, ProxiedLinksCarryEveryCollective) {
  for (int nranks : {2, 3}) {
    std::vector<Call> calls;
    for (Proto p : {Proto::kLl, Proto::kSimple})
      for (size_t count : {size_t{1}, size_t{3001}, size_t{20000}}) {
        calls.push_back(Call{Coll::kAllReduce, ncclFloat32, ref::kSum, count, p, 2});
        calls.push_back(Call{Coll::kAllReduce, ncclBfloat16, ref::kMax, count, p, 1});
        calls.push_back(Call{Coll::kAllReduce, ncclFloat8e4m3, ref::kAvg, count, p, 2});
        calls.push_back(Call{Coll::kReduceScatter, ncclInt32, ref::kProd, count, p, 2});
        calls.push_back(Call{Coll::kAllGather, ncclFloat16, ref::kSum, count, p, 2});
        calls.push_back(Call{Coll::kBroadcast, ncclUint8, ref::kSum, count, p, 2, nranks - 1});
        calls.push_back(Call{Coll::kReduce, ncclFloat64, ref::kMin, count, p, 2, 0});
      }
    EmuGeometry g;
    g.proxied = true;
    runCalls(nranks, calls, /*fused=*/false, 2, g);
    // A launch runs on one kernel: the float32 sums fused.
    std::vector<Call> sums;
    for (const Call& c : calls)
      if (c.type == ncclFloat32) sums.push_back(c);
    runCalls(nranks, sums, /*fused=*/true, 1, g);
  }
}

// The same links through a communicator's own host transports, as a device communicator
// builds them for pairs without a P2P path: host communicators of 3 ranks make the connectors
// of every ring channel and protocol (Communicator::connectDeviceHost) and the emulated
// kernels' proxies drive them; over shared memory, over TCP, and over TCP with launches that
// fuse several calls (a launch runs one kernel: the float32 sums). Each on communicators of its
// own: a device communicator's proxies and FIFOs live as long as its connectors.
TEST(KernelOnHost, CommunicatorTransportsCarryProxiedLinks) {
  constexpr int kRanks = 3;
  for (int round = 0; round < 3; ++round) {
    const bool tcp = round > 0, fused = round == 2;
    SCOPED_TRACE(tcp ? (fused ? "TCP, fused" : "TCP") : "shared memory");
    EmuGeometry g;
    g.proxied = true;
    CommHostLinks links(kRanks, tcp, g.nchannels, /*p2p=*/false);
    ASSERT_EQ(links.error(), "");
    g.hostLinks = [&links](int sender, int receiver, int channel, int proto, SendConnector** send,
                           RecvConnector** recv) {
      return links.link(sender, receiver, channel, proto, send, recv);
    };
    std::vector<Call> calls;
    for (Proto p : {Proto::kLl, Proto::kSimple})
      for (size_t count : {size_t{1}, size_t{3001}, size_t{70000}}) {
        calls.push_back(Call{Coll::kAllReduce, ncclFloat32, ref::kSum, count, p, 2});
        if (fused) continue;
        calls.push_back(Call{Coll::kReduceScatter, ncclInt32, ref::kProd, count, p, 2});
        calls.push_back(Call{Coll::kAllGather, ncclFloat16, ref::kSum, count, p, 2});
        calls.push_back(Call{Coll::kBroadcast, ncclUint8, ref::kSum, count, p, 1, 1});
      }
    runCalls(kRanks, calls, fused, 2, g);
    // Every ring link went through the communicators' connectors.
    EXPECT_EQ(links.supplied(), kRanks * g.nchannels * kNumProtos);
  }
}

// One launch of several works: each channel runs them in order, the grid barrier between; and
// the FIFOs' step counters carry over from launch to launch and between protocols.
TEST(KernelOnHost, FusedLaunchesAndStepsAcrossLaunches) {
  std::vector<Call> calls;
  for (int i = 0; i < 12; ++i) {
    Proto p = i % 3 == 0 ? Proto::kLl : Proto::kSimple;
    calls.push_back(Call{Coll::kAllReduce, ncclFloat32, ref::kSum,
                         static_cast<size_t>(100 + 997 * i), p, 1 + i % 2});
  }
  runCalls(4, calls, /*fused=*/true, 2);
  runCalls(2, calls, /*fused=*/false, 1);
}

// A rank whose peer never launches waits until the communicator is aborted, then stops and
// flags the error for the host.
// Runs one all-reduce of `rank` alone on a clique of nranks (its peers never launch) after
// the clique was aborted; true when the launch returned and flagged the error for the host.
bool stopsOnAbort(const EmuGeometry& g, int nranks, int rank, Algo algo, Proto proto,
                  int nchannels) {
  EmuClique clique(nranks, g);
  std::vector<float> in(4096, 1.0f), out(4096, 0.0f);
  Launch l;
  l.comm = clique.comm(rank);
  l.nworks = 1;
  l.works[0].count = in.size();
  l.works[0].sendbuff = in.data();
  l.works[0].recvbuff = out.data();
  l.works[0].proto = proto;
  l.works[0].algo = algo;
  l.works[0].nchannels = static_cast<int16_t>(nchannels);
  clique.abort();
  return emuRunLaunch(l, 2) && clique.comm(rank)->errorFlag[0] == 1u;
}

TEST(KernelOnHost, AbortStopsAWaitingRank) {
  for (Proto p : {Proto::kLl, Proto::kSimple})
    EXPECT_TRUE(stopsOnAbort(EmuGeometry(), 2, 0, Algo::kRing, p, 2)) << protoName(p);
}

// ---- The direct all-reduce (cuda/dev_direct.h) through direct regions in host memory. ----

struct DirectCase {
  int nranks;
  Algo algo;
  Proto proto;
};

class DirectOnHost : public ::testing::TestWithParam<DirectCase> {};

// Every type and reduction; counts within one sequence and across many (buffers of 1 KiB per
// channel: a 3001-element call of 8-byte types runs a dozen sequences on each channel).
TEST_P(DirectOnHost, EveryTypeAndOp) {
  const DirectCase& d = GetParam();
  std::vector<Call> calls;
  for (ncclDataType_t t : kAllTypes)
    for (int op = 0; op < ref::kNumTestOps; ++op)
      for (size_t count : {size_t{1}, size_t{37}, size_t{3001}}) {
        Call c{Coll::kAllReduce, t, static_cast<ref::Op>(op), count, d.proto, 2};
        c.algo = d.algo;
        calls.push_back(c);
      }
  EmuGeometry g;
  g.directBytes = 1024;
  runCalls(d.nranks, calls, /*fused=*/false, /*threadsPerBlock=*/2, g);
}

INSTANTIATE_TEST_SUITE_P(RanksAndAlgorithms, DirectOnHost,
                         ::testing::Values(DirectCase{2, Algo::kOneShot, Proto::kLl},
                                           DirectCase{2, Algo::kOneShot, Proto::kSimple},
                                           DirectCase{2, Algo::kTwoShot, Proto::kSimple},
                                           DirectCase{3, Algo::kOneShot, Proto::kLl},
                                           DirectCase{3, Algo::kTwoShot, Proto::kSimple},
                                           DirectCase{4, Algo::kOneShot, Proto::kSimple},
                                           DirectCase{4, Algo::kTwoShot, Proto::kSimple},
                                           DirectCase{5, Algo::kOneShot, Proto::kLl},
                                           DirectCase{8, Algo::kTwoShot, Proto::kSimple}),
                         [](const ::testing::TestParamInfo<DirectCase>& info) {
                           return std::to_string(info.param.nranks) + "ranks_" +
                                  (info.param.algo == Algo::kOneShot ? "oneshot_" : "twoshot_") +
                                  (info.param.proto == Proto::kLl ? "LL" : "Simple");
                         });

// Direct and ring works mixed in one launch and across launches, in place, with a device
// scalar and several threads per block: each channel's sequence, and the buffer parity with
// it, carries over whatever the algorithm and protocol of the call before (LL and Simple
// staging alternate on the same channel).
TEST(KernelOnHost, DirectAndRingWorksShareLaunches) {
  std::vector<Call> calls;
  const Algo algos[] = {Algo::kOneShot, Algo::kTwoShot, Algo::kRing};
  for (int i = 0; i < 15; ++i) {
    // One kernel per launch: every call a PreMulSum, the scalar given or read from memory.
    Call c{Coll::kAllReduce,
           ncclFloat32,
           ref::kPreMulSum,
           static_cast<size_t>(1 + 613 * i),
           i % 4 == 0 ? Proto::kLl : Proto::kSimple,
           1 + i % 3};
    c.algo = algos[i % 3];
    c.inPlace = i % 5 == 1;
    c.deviceScalar = i % 2 == 1;
    calls.push_back(c);
  }
  EmuGeometry g;
  g.nchannels = 3;
  g.directBytes = 512;
  runCalls(4, calls, /*fused=*/true, 3, g);
  runCalls(3, calls, /*fused=*/false, 1, g);
}

// A rank whose peers never stage waits in the direct all-reduce until the communicator is
// aborted, then stops and flags the error for the host.
TEST(KernelOnHost, AbortStopsARankWaitingInDirectAllReduce) {
  EmuGeometry g;
  g.directBytes = 1024;
  for (Algo a : {Algo::kOneShot, Algo::kTwoShot})
    for (Proto p : {Proto::kLl, Proto::kSimple})
      EXPECT_TRUE(stopsOnAbort(g, 3, 1, a, p, 2)) << algoName(a) << ", " << protoName(p);
}

// ---- The tree all-reduce (cuda/dev_tree.h) over the tree links of every pair. ----

class TreeOnHost : public ::testing::TestWithParam<std::tuple<int, Proto>> {};

// Every type and reduction on 2-8 ranks (trees of depth 1-3, interior ranks with one and two
// children); counts within a chunk, across many chunks and FIFO wraps (slots of 1 KiB and 4 KiB,
// 4 of them), not a multiple of a line, and with tree 1's half starting on 16 bytes.
TEST_P(TreeOnHost, EveryTypeAndOp) {
  const int nranks = std::get<0>(GetParam());
  const Proto proto = std::get<1>(GetParam());
  std::vector<Call> calls;
  for (ncclDataType_t t : kAllTypes)
    for (int op = 0; op < ref::kNumTestOps; ++op)
      for (size_t count : {size_t{1}, size_t{37}, size_t{3001}}) {
        Call c{Coll::kAllReduce, t, static_cast<ref::Op>(op), count, proto, 2};
        c.algo = Algo::kTree;
        calls.push_back(c);
      }
  EmuGeometry g;
  g.treeChannels = 2;
  runCalls(nranks, calls, /*fused=*/false, /*threadsPerBlock=*/1, g);
}

INSTANTIATE_TEST_SUITE_P(RanksAndProtocols, TreeOnHost,
                         ::testing::Combine(::testing::Values(2, 3, 5, 8),
                                            ::testing::Values(Proto::kLl, Proto::kSimple)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Proto>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Proto::kLl ? "LL" : "Simple");
                         });

// ---- Recursive doubling (cuda/dev_rd.h) over the partner links of every pair. ----

class RdOnHost : public ::testing::TestWithParam<std::tuple<int, Proto>> {};

// Every type and reduction on 2-8 ranks, powers of two and not (ranks past the power fold in
// and take the result back); counts within a chunk and across many.
TEST_P(RdOnHost, EveryTypeAndOp) {
  const int nranks = std::get<0>(GetParam());
  const Proto proto = std::get<1>(GetParam());
  std::vector<Call> calls;
  for (ncclDataType_t t : kAllTypes)
    for (int op = 0; op < ref::kNumTestOps; ++op)
      for (size_t count : {size_t{1}, size_t{37}, size_t{3001}}) {
        Call c{Coll::kAllReduce, t, static_cast<ref::Op>(op), count, proto, 2};
        c.algo = Algo::kRd;
        calls.push_back(c);
      }
  EmuGeometry g;
  g.rdChannels = 2;
  runCalls(nranks, calls, /*fused=*/false, /*threadsPerBlock=*/2, g);
}

INSTANTIATE_TEST_SUITE_P(RanksAndProtocols, RdOnHost,
                         ::testing::Combine(::testing::Values(2, 3, 4, 7, 8),
                                            ::testing::Values(Proto::kLl, Proto::kSimple)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Proto>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Proto::kLl ? "LL" : "Simple");
                         });

// Tree, recursive doubling, ring and direct works mixed in one launch and across launches, one
// and two channels, in place, with a device scalar and several threads per block: every tree
// and partner FIFO's step carries over from launch to launch, whatever ran between.
TEST(KernelOnHost, TreeRdRingAndDirectWorksShareLaunches) {
  std::vector<Call> calls;
  const Algo algos[] = {Algo::kTree, Algo::kRing, Algo::kRd, Algo::kOneShot, Algo::kRd};
  for (int i = 0; i < 20; ++i) {
    Call c{Coll::kAllReduce,
           ncclFloat32,
           ref::kPreMulSum,
           static_cast<size_t>(1 + 1409 * i),
           i % 3 == 0 ? Proto::kLl : Proto::kSimple,
           1 + i % 2};
    c.algo = algos[i % 5];
    c.inPlace = i % 7 == 2;
    c.deviceScalar = i % 2 == 0;
    calls.push_back(c);
  }
  EmuGeometry g;
  g.nchannels = 3;
  g.treeChannels = 2;
  g.rdChannels = 2;
  g.directBytes = 512;
  runCalls(6, calls, /*fused=*/true, 3, g);
  runCalls(4, calls, /*fused=*/false, 2, g);
}

// Tree and partner links through host memory and proxies (pairs without a P2P path): the
// emulator's own host FIFOs, then a host communicator's connectors over shared memory and TCP.
TEST(KernelOnHost, ProxiedLinksCarryTreeAndRd) {
  std::vector<Call> calls;
  for (Algo a : {Algo::kTree, Algo::kRd})
    for (Proto p : {Proto::kLl, Proto::kSimple})
      for (size_t count : {size_t{1}, size_t{3001}, size_t{40000}}) {
        Call c{Coll::kAllReduce, ncclFloat32, ref::kSum, count, p, 2};
        c.algo = a;
        calls.push_back(c);
        c.type = ncclBfloat16;
        c.op = ref::kAvg;
        calls.push_back(c);
      }
  EmuGeometry g;
  g.proxied = true;
  g.treeChannels = 2;
  g.rdChannels = 2;
  runCalls(5, calls, /*fused=*/false, 2, g);
  constexpr int kRanks = 3;
  for (bool tcp : {false, true}) {
    SCOPED_TRACE(tcp ? "TCP" : "shared memory");
    const int extra = 2 * g.treeChannels + g.rdChannels;
    CommHostLinks links(kRanks, tcp, g.nchannels, /*p2p=*/false, extra);
    ASSERT_EQ(links.error(), "");
    g.hostLinks = [&links](int sender, int receiver, int channel, int proto, SendConnector** send,
                           RecvConnector** recv) {
      return links.link(sender, receiver, channel, proto, send, recv);
    };
    runCalls(kRanks, calls, /*fused=*/false, 2, g);
    // Every ring, tree and partner link went through the communicators' connectors.
    EXPECT_EQ(links.supplied(),
              kRanks * g.nchannels * kNumProtos + kRanks * (kRanks - 1) * extra * kNumProtos);
  }
}

// A rank whose tree neighbours (or partners) never come waits until the communicator is
// aborted, then stops and flags the error for the host; a communicator without such links runs
// these works on the ring rather than wait on links it does not have.
TEST(KernelOnHost, AbortStopsARankWaitingInTreeOrRdAllReduce) {
  EmuGeometry g;
  g.treeChannels = 1;
  g.rdChannels = 1;
  for (Algo a : {Algo::kTree, Algo::kRd})
    for (Proto p : {Proto::kLl, Proto::kSimple})
      EXPECT_TRUE(stopsOnAbort(g, 5, 1, a, p, 1)) << algoName(a) << ", " << protoName(p);
  std::vector<Call> calls;
  for (Algo a : {Algo::kTree, Algo::kRd})
    for (Proto p : {Proto::kLl, Proto::kSimple}) {
      Call c{Coll::kAllReduce, ncclInt32, ref::kSum, 5000, p, 2};
      c.algo = a;
      calls.push_back(c);
    }
  runCalls(3, calls, /*fused=*/false, 1);  // no tree or partner links: the ring
}

TEST(KernelOnHost, UnknownKernelKeyIsRefused) {
  EmuClique clique(1, EmuGeometry());
  Launch l;
  l.comm = clique.comm(0);
  l.nworks = 1;
  l.works[0].type = 12;
  EXPECT_FALSE(emuRunLaunch(l, 1));
}

}  // namespace
}  // namespace dev
}  // namespace chorus
