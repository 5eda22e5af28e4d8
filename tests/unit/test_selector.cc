// The algorithm selector: parsing of CHORUS_ALGO and the channel bounds, and decisions checked
// against a brute-force minimum over the cost model's predictions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "algorithms/selector.h"

namespace chorus {
namespace {

TEST(AlgorithmList, NamesListsAndExclusions) {
  auto bit = [](Algorithm a) { return 1u << static_cast<int>(a); };
  Result<AlgorithmMask> m = parseAlgorithmList("tree", "CHORUS_ALGO");
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m.value().bits, bit(Algorithm::kTree));
  m = parseAlgorithmList(" Ring , TREE ", "CHORUS_ALGO");
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m.value().bits, bit(Algorithm::kRing) | bit(Algorithm::kTree));
  m = parseAlgorithmList("^direct", "NCCL_ALGO");
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m.value().bits, bit(Algorithm::kRing) | bit(Algorithm::kTree) | bit(Algorithm::kRd) |
                                bit(Algorithm::kHier));
  EXPECT_EQ(m.value().text, "NCCL_ALGO=^direct");
  m = parseAlgorithmList("hier", "CHORUS_ALGO");
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m.value().bits, bit(Algorithm::kHier));
  m = parseAlgorithmList("", "CHORUS_ALGO");
  ASSERT_TRUE(m.isOk());
  EXPECT_FALSE(m.value().isSet);
  EXPECT_TRUE(m.value().allows(Algorithm::kOneShot));
}

TEST(AlgorithmList, UnknownNamesAndEmptySetsAreErrors) {
  Result<AlgorithmMask> m = parseAlgorithmList("ring,nvls", "CHORUS_ALGO");
  ASSERT_FALSE(m.isOk());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("CHORUS_ALGO"), std::string::npos);
  EXPECT_NE(m.status().message().find("nvls"), std::string::npos);
  m = parseAlgorithmList("ring,", "CHORUS_ALGO");
  EXPECT_FALSE(m.isOk());
  m = parseAlgorithmList("^ring,tree,direct,rd,hier", "CHORUS_ALGO");
  ASSERT_FALSE(m.isOk());
  EXPECT_NE(m.status().message().find("excludes every algorithm"), std::string::npos);
}

TEST(ChannelBounds, DefaultsRangeAndOrder) {
  unsetenv("CHORUS_MIN_CHANNELS");
  unsetenv("CHORUS_MAX_CHANNELS");
  unsetenv("NCCL_MIN_CHANNELS");
  unsetenv("NCCL_MAX_CHANNELS");
  int lo = 0, hi = 0;
  ASSERT_TRUE(channelBounds(&lo, &hi).isOk());
  EXPECT_EQ(lo, 1);
  EXPECT_EQ(hi, kMaxChannels);
  setenv("NCCL_MAX_CHANNELS", "4", 1);
  ASSERT_TRUE(channelBounds(&lo, &hi).isOk());
  EXPECT_EQ(hi, 4);
  setenv("CHORUS_MIN_CHANNELS", "5", 1);
  Status s = channelBounds(&lo, &hi);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("CHORUS_MIN_CHANNELS=5"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("NCCL_MAX_CHANNELS=4"), std::string::npos) << s.message();
  for (const char* bad : {"0", "17", "two", "3x", "-1"}) {
    setenv("CHORUS_MIN_CHANNELS", bad, 1);
    s = channelBounds(&lo, &hi);
    ASSERT_FALSE(s.isOk()) << bad;
    EXPECT_NE(s.message().find("CHORUS_MIN_CHANNELS"), std::string::npos);
  }
  unsetenv("CHORUS_MIN_CHANNELS");
  unsetenv("NCCL_MAX_CHANNELS");
}

TuningInfo oneHost(int nranks, double coresPerRank) {
  TuningInfo info;
  info.nranks = nranks;
  info.localRanks = nranks;
  info.coresPerRank = coresPerRank;
  info.directPossible = nranks > 1;
  return info;
}

// nranks over nhosts hosts, evenly, coresPerRank each.
TuningInfo hostsOf(int nranks, int nhosts, double coresPerRank) {
  TuningInfo info = oneHost(nranks, coresPerRank);
  info.nnodes = nhosts;
  info.localRanks = nranks / nhosts;
  info.directPossible = false;
  return info;
}

// The decision is the fastest allowed (algorithm, channels) by brute force over predictUs.
void expectArgmin(const TuningInfo& info, Collective coll, size_t bytes) {
  Decision d = selectAlgorithm(info, coll, bytes);
  double best = -1;
  for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a) {
    if (!info.allowed.allows(static_cast<Algorithm>(a))) continue;
    for (int ch = info.minChannels; ch <= info.maxChannels; ++ch) {
      double us = predictUs(info, coll, static_cast<Algorithm>(a), ch, bytes);
      if (us >= 0 && (best < 0 || us < best)) best = us;
    }
  }
  ASSERT_GE(best, 0);
  EXPECT_DOUBLE_EQ(d.us, best) << collectiveName(coll) << " " << bytes;
  EXPECT_DOUBLE_EQ(predictUs(info, coll, d.algo, d.nchannels, bytes), d.us);
  EXPECT_TRUE(info.allowed.allows(d.algo));
  EXPECT_FALSE(d.overrideIgnored);
}

TEST(Selector, PicksTheCheapestAllowedChoice) {
  for (int n : {2, 3, 4, 8, 16}) {
    for (int nodes : {1, 2}) {
      for (double cores : {0.5, 1.0, 8.0}) {
        TuningInfo info = oneHost(n, cores);
        info.nnodes = nodes;
        info.directPossible = nodes == 1;
        for (int c = 0; c < static_cast<int>(Collective::kCount); ++c)
          for (size_t bytes = 8; bytes <= (size_t(1) << 30); bytes *= 4)
            expectArgmin(info, static_cast<Collective>(c), bytes);
      }
    }
  }
}

TEST(Selector, ApplicabilityOfEachAlgorithm) {
  TuningInfo info = oneHost(4, 1.0);
  // Tree and the direct algorithms are all-reduce only.
  for (Collective c : {Collective::kAllGather, Collective::kReduceScatter, Collective::kBroadcast,
                       Collective::kReduce}) {
    EXPECT_LT(predictUs(info, c, Algorithm::kTree, 1, 1024), 0);
    EXPECT_LT(predictUs(info, c, Algorithm::kOneShot, 1, 1024), 0);
    EXPECT_GT(predictUs(info, c, Algorithm::kRing, 1, 1024), 0);
  }
  // Direct needs one host's shared memory; only rings have channels.
  info.nnodes = 2;
  info.directPossible = false;
  EXPECT_LT(predictUs(info, Collective::kAllReduce, Algorithm::kTwoShot, 1, 1024), 0);
  EXPECT_LT(predictUs(info, Collective::kAllReduce, Algorithm::kTree, 2, 1024), 0);
  EXPECT_GT(predictUs(info, Collective::kAllReduce, Algorithm::kRing, 2, 1024), 0);
  // One rank: a local copy.
  TuningInfo single = oneHost(1, 1.0);
  Decision d = selectAlgorithm(single, Collective::kAllReduce, 4096);
  EXPECT_EQ(d.algo, Algorithm::kRing);
  EXPECT_EQ(d.nalternatives, 1);
}

// Several hosts of L ranks each: the hierarchical algorithm's time is the sum of its phases,
// each what its own communicator's selection predicts.
TEST(Selector, HierarchicalIsPricedByItsPhases) {
  TuningInfo info = oneHost(128, 1.0);
  info.nnodes = 16;
  info.localRanks = 8;
  info.directPossible = false;
  info.hierRanksPerHost = 8;
  const TuningInfo local = hierLocalInfo(info), cross = hierCrossInfo(info);
  EXPECT_EQ(local.nranks, 8);
  EXPECT_EQ(local.nnodes, 1);
  EXPECT_TRUE(local.directPossible);
  EXPECT_EQ(cross.nranks, 16);
  EXPECT_EQ(cross.nnodes, 16);
  EXPECT_EQ(cross.localRanks, 1);
  EXPECT_FALSE(cross.directPossible);
  // The eight ranks of a host share its link in the cross-host phase.
  EXPECT_DOUBLE_EQ(cross.netLinkGBps, costModel().netMaxGBps / 8);
  info.netLinkGBps = 12.5;
  EXPECT_DOUBLE_EQ(hierCrossInfo(info).netLinkGBps, 12.5 / 8);
  // Net devices: the host's devices together are what its ranks share (a NIC per rank here).
  TuningInfo nics = info;
  nics.netDevice = true;
  nics.netHostGBps = 8 * 12.5;
  EXPECT_DOUBLE_EQ(hierCrossInfo(nics).netLinkGBps, 12.5);
  for (size_t bytes : {size_t{8}, size_t{1} << 16, size_t{64} << 20}) {
    const double s = static_cast<double>(bytes);
    auto us = [](const TuningInfo& i, Collective c, double b) {
      return selectAlgorithm(i, c, static_cast<size_t>(b)).us;
    };
    const TuningInfo l = hierLocalInfo(info), x = hierCrossInfo(info);
    EXPECT_DOUBLE_EQ(predictUs(info, Collective::kAllReduce, Algorithm::kHier, 1, bytes),
                     us(l, Collective::kReduceScatter, s) + us(x, Collective::kAllReduce, s / 8) +
                         us(l, Collective::kAllGather, s));
    EXPECT_DOUBLE_EQ(predictUs(info, Collective::kBroadcast, Algorithm::kHier, 1, bytes),
                     us(x, Collective::kBroadcast, s) + us(l, Collective::kBroadcast, s));
    EXPECT_GT(predictUs(info, Collective::kAllGather, Algorithm::kHier, 1, bytes), 0);
    EXPECT_GT(predictUs(info, Collective::kReduceScatter, Algorithm::kHier, 1, bytes), 0);
    EXPECT_LT(predictUs(info, Collective::kReduce, Algorithm::kHier, 1, bytes), 0);
    expectArgmin(info, Collective::kAllReduce, bytes);
  }
  // Far fewer network hand-offs than any flat algorithm at 128 ranks: chosen for small calls.
  EXPECT_EQ(selectAlgorithm(info, Collective::kAllReduce, 8).algo, Algorithm::kHier);
  // Excluded, never chosen.
  TuningInfo flat = info;
  flat.allowed.bits &= ~(1u << static_cast<int>(Algorithm::kHier));
  for (size_t bytes = 8; bytes <= (size_t{1} << 28); bytes *= 16)
    EXPECT_NE(selectAlgorithm(flat, Collective::kAllReduce, bytes).algo, Algorithm::kHier);
  // It does not apply to uneven hosts, one rank per host, or one host.
  TuningInfo uneven = info;
  uneven.hierRanksPerHost = 0;
  EXPECT_LT(predictUs(uneven, Collective::kAllReduce, Algorithm::kHier, 1, 1 << 20), 0);
  TuningInfo single = oneHost(8, 1.0);
  single.hierRanksPerHost = 8;
  EXPECT_LT(predictUs(single, Collective::kAllReduce, Algorithm::kHier, 1, 1 << 20), 0);
  TuningInfo perHostOne = info;
  perHostOne.nranks = 16;
  perHostOne.localRanks = 1;
  perHostOne.hierRanksPerHost = 1;
  EXPECT_LT(predictUs(perHostOne, Collective::kAllReduce, Algorithm::kHier, 1, 1 << 20), 0);
}

TEST(Selector, ModelShape) {
  // Small messages on one host go direct; large ones take the ring; predictions grow with size.
  TuningInfo info = oneHost(2, 1.0);
  EXPECT_EQ(selectAlgorithm(info, Collective::kAllReduce, 8).algo, Algorithm::kOneShot);
  EXPECT_EQ(selectAlgorithm(info, Collective::kAllReduce, size_t(64) << 20).algo, Algorithm::kRing);
  // Across hosts with many ranks, recursive doubling's log2(n) exchanges win for small
  // messages, and the tree's log depth when it is excluded.
  TuningInfo net = oneHost(64, 1.0);
  net.nnodes = 32;
  net.localRanks = 2;
  net.directPossible = false;
  EXPECT_EQ(selectAlgorithm(net, Collective::kAllReduce, 1024).algo, Algorithm::kRd);
  TuningInfo noRd = net;
  noRd.allowed.bits &= ~(1u << static_cast<int>(Algorithm::kRd));
  EXPECT_EQ(selectAlgorithm(noRd, Collective::kAllReduce, 1024).algo, Algorithm::kTree);
  EXPECT_EQ(selectAlgorithm(net, Collective::kAllReduce, size_t(256) << 20).algo, Algorithm::kRing);
  for (int c = 0; c < static_cast<int>(Collective::kCount); ++c) {
    double last = 0;
    for (size_t bytes = 8; bytes <= (size_t(1) << 28); bytes *= 2) {
      double us = selectAlgorithm(info, static_cast<Collective>(c), bytes).us;
      EXPECT_GE(us, last);
      last = us;
    }
  }
  // More channels only pay off with spare cores and large messages.
  TuningInfo wide = oneHost(2, 8.0);
  EXPECT_EQ(selectAlgorithm(wide, Collective::kAllGather, 1024).nchannels, 1);
  EXPECT_GT(selectAlgorithm(wide, Collective::kAllGather, size_t(64) << 20).nchannels, 1);
  EXPECT_EQ(selectAlgorithm(info, Collective::kAllGather, size_t(64) << 20).nchannels, 1);
  // Through the network a channel keeps two cores busy (its thread and the kernel's TCP work):
  // two cores per rank carry one channel, eight carry more.
  TuningInfo tcp = oneHost(2, 2.0);
  tcp.nnodes = 2;
  tcp.localRanks = 1;
  tcp.directPossible = false;
  EXPECT_EQ(selectAlgorithm(tcp, Collective::kAllGather, size_t(64) << 20).nchannels, 1);
  EXPECT_EQ(selectAlgorithm(tcp, Collective::kAllReduce, size_t(64) << 20).nchannels, 1);
  tcp.coresPerRank = 8.0;
  EXPECT_GT(selectAlgorithm(tcp, Collective::kAllGather, size_t(64) << 20).nchannels, 1);
}

// Rings and trees follow the hosts: of a host-shaped ring's hops one per host crosses the
// network, and a tree's path passes one network hop per level of the tree over hosts plus each
// host's chain of ranks. With one rank per host, or shared memory disabled, every hop is a
// network hop.
TEST(Selector, HostShapedHopsCostWhatTheyCross) {
  const CostModel& m = costModel();
  TuningInfo hosts = hostsOf(16, 2, 1.0);
  const double hop = (2.0 * m.netStepUs + 14.0 * m.shmStepUs) / 16;
  EXPECT_NEAR(predictUs(hosts, Collective::kAllReduce, Algorithm::kRing, 1, 0), 2 * 15 * hop, 1e-9);
  EXPECT_NEAR(predictUs(hosts, Collective::kAllGather, Algorithm::kRing, 1, 0), 15 * hop, 1e-9);
  // Two hosts: one level, the chains of both hosts on the way.
  EXPECT_NEAR(predictUs(hosts, Collective::kAllReduce, Algorithm::kTree, 1, 0),
              4 * (m.netStepUs + 2 * 7 * m.shmStepUs), 1e-9);
  TuningInfo tcp = hosts;
  tcp.shm = false;
  EXPECT_NEAR(predictUs(tcp, Collective::kAllReduce, Algorithm::kRing, 1, 0), 2 * 15 * m.netStepUs,
              1e-9);
  EXPECT_NEAR(predictUs(tcp, Collective::kAllReduce, Algorithm::kTree, 1, 0), 4 * 4 * m.netStepUs,
              1e-9);
  TuningInfo spread = oneHost(16, 1.0);
  spread.nnodes = 16;
  spread.localRanks = 1;
  spread.directPossible = false;
  EXPECT_NEAR(predictUs(spread, Collective::kAllReduce, Algorithm::kRing, 1, 0),
              2 * 15 * m.netStepUs, 1e-9);
  // The bandwidth term is the network's either way.
  const size_t big = size_t(64) << 20;
  EXPECT_NEAR(predictUs(hosts, Collective::kAllReduce, Algorithm::kRing, 1, big) -
                  predictUs(hosts, Collective::kAllReduce, Algorithm::kRing, 1, 0),
              predictUs(tcp, Collective::kAllReduce, Algorithm::kRing, 1, big) -
                  predictUs(tcp, Collective::kAllReduce, Algorithm::kRing, 1, 0),
              1e-6);
}

// Through a net device (plugin or IB) a channel is one core's copy into registered memory and
// the devices' speed caps the sum: neither the sockets' per-stream figure nor their two cores a
// channel apply.
TEST(Selector, NetDeviceTakesItsSpeedNotTheSocketsFigures) {
  const CostModel& m = costModel();
  TuningInfo dev = hostsOf(2, 2, 2.0);
  dev.netDevice = true;
  dev.netLinkGBps = 25;              // 200 Gbit/s
  const size_t s = size_t(4) << 20;  // a rank's buffers stay in the caches
  auto bandwidthUs = [&](const TuningInfo& i, int ch) {
    return predictUs(i, Collective::kAllReduce, Algorithm::kRing, ch, s) -
           predictUs(i, Collective::kAllReduce, Algorithm::kRing, ch, 0);
  };
  const double moved = 2.0 * (2 - 1) / 2 * static_cast<double>(s);
  EXPECT_NEAR(bandwidthUs(dev, 1), moved / (std::fmin(m.shmGBps, 25.0) * 1e3), 1e-6);
  // Two cores carry two channels' copies.
  EXPECT_NEAR(bandwidthUs(dev, 2), moved / (std::fmin(2 * m.shmGBps, m.shmMaxGBps) * 1e3), 1e-6);
  TuningInfo tcp = dev;
  tcp.netDevice = false;
  EXPECT_NEAR(bandwidthUs(tcp, 2), moved / (std::fmin(m.netGBps, m.netMaxGBps) * 1e3), 1e-6);
  // A device slower than the copies is the limit, whatever the channels.
  TuningInfo slow = dev;
  slow.netLinkGBps = 1.25;
  EXPECT_NEAR(bandwidthUs(slow, 1), moved / 1.25e3, 1e-6);
  EXPECT_NEAR(bandwidthUs(slow, 2), moved / 1.25e3, 1e-6);
  EXPECT_EQ(selectAlgorithm(slow, Collective::kAllReduce, s).nchannels, 1);
  // With cores to spare, a fast device takes more channels than the sockets' cap pays for.
  dev.coresPerRank = tcp.coresPerRank = 16;
  const size_t big = size_t(64) << 20;
  EXPECT_GT(selectAlgorithm(dev, Collective::kAllReduce, big).nchannels,
            selectAlgorithm(tcp, Collective::kAllReduce, big).nchannels);
  EXPECT_LT(selectAlgorithm(dev, Collective::kAllReduce, big).us,
            selectAlgorithm(tcp, Collective::kAllReduce, big).us);
  for (size_t bytes : {size_t{8}, size_t{1} << 16, s, big}) {
    expectArgmin(dev, Collective::kAllReduce, bytes);
    expectArgmin(slow, Collective::kAllGather, bytes);
  }
}

TEST(Selector, OverridesWin) {
  TuningInfo info = oneHost(4, 1.0);
  info.allowed = parseAlgorithmList("tree", "CHORUS_ALGO").value();
  Decision d = selectAlgorithm(info, Collective::kAllReduce, 8);
  EXPECT_EQ(d.algo, Algorithm::kTree);
  // Tree does not apply to all-gather: the ring runs and the decision says the list was moot.
  d = selectAlgorithm(info, Collective::kAllGather, 8);
  EXPECT_EQ(d.algo, Algorithm::kRing);
  EXPECT_TRUE(d.overrideIgnored);
  // Channel bounds hold even where the model would pick fewer.
  info.allowed = AlgorithmMask();
  info.minChannels = 3;
  info.maxChannels = 3;
  d = selectAlgorithm(info, Collective::kReduceScatter, 8);
  EXPECT_EQ(d.nchannels, 3);
  info.allowed = parseAlgorithmList("ring", "CHORUS_ALGO").value();
  d = selectAlgorithm(info, Collective::kAllReduce, 8);
  EXPECT_EQ(d.algo, Algorithm::kRing);
  EXPECT_EQ(d.nchannels, 3);
}

}  // namespace
}  // namespace chorus
