// Tuning files (the cost model's figures by name) and the fit behind chorus-tune --calibrate:
// what is written reads back, every malformed line is refused with its file and line, and the
// fit recovers the figures of a known model from its own predictions, noise and outliers
// included, so that the selector then decides as under that model.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "algorithms/calibrate.h"
#include "algorithms/cost_model.h"
#include "algorithms/selector.h"

namespace {

using chorus::Algorithm;
using chorus::Collective;
using chorus::CostModel;

std::string tempPath(const char* name) {
  return std::string(testing::TempDir()) + "/" + name + "_" + std::to_string(getpid());
}

std::string writeText(const char* name, const std::string& text) {
  const std::string path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

TEST(TuningFile, ReadsBackWhatItWrites) {
  CostModel m;
  double scale = 1.1;
  for (const chorus::CostField& f : chorus::costFields()) {
    // Distinct values, within the bounds of those that have them.
    m.*(f.member) *= f.highest > 0 ? 1 / scale : scale;
    scale += 0.37;
  }
  const std::string path = tempPath("roundtrip");
  ASSERT_TRUE(chorus::writeTuningFile(path, m, {"a comment", "another"}).isOk());
  auto back = chorus::readTuningFile(path);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  for (const chorus::CostField& f : chorus::costFields())
    EXPECT_NEAR(back.value().*(f.member), m.*(f.member), 1e-3 * m.*(f.member)) << f.name;
  std::ifstream in(path);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "# a comment");
  unlink(path.c_str());
}

TEST(TuningFile, FiguresLeftOutKeepTheBuiltInValues) {
  const std::string path =
      writeText("partial", "# only two\n\nshm_step_us 1.5  # us\nnet_gbps 9\n");
  auto m = chorus::readTuningFile(path);
  ASSERT_TRUE(m.isOk()) << m.status().message();
  EXPECT_EQ(m.value().shmStepUs, 1.5);
  EXPECT_EQ(m.value().netGBps, 9);
  EXPECT_EQ(m.value().memGBps, CostModel().memGBps);
  unlink(path.c_str());
}

TEST(TuningFile, MalformedLinesAreRefusedWithFileAndLine) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"shm_step_us 1\nbogus 2\n", "line 2: unknown figure \"bogus\" (known: shm_step_us,"},
      {"shm_step_us 1\nshm_step_us 2\n", "line 2: shm_step_us given twice"},
      {"mem_gbps 0\n", "line 1: mem_gbps = \"0\" is not a positive number"},
      {"mem_gbps -3\n", "is not a positive number"},
      {"mem_gbps fast\n", "mem_gbps = \"fast\" is not a positive number"},
      {"mem_gbps 1 2\n", "line 1: expected \"name value\""},
      {"# fine\nmem_gbps\n", "line 2: expected \"name value\""},
      // Figures with a meaning only within bounds: a tree is never faster than the ring, and
      // oversubscribed network work does not gain throughput.
      {"tree_cost 0.5\n", "line 1: tree_cost = 0.5 is outside [1, inf]"},
      {"shm_step_us 1\noversub_share 1.5\n", "line 2: oversub_share = 1.5 is outside [0, 1]"},
  };
  for (const Case& c : cases) {
    const std::string path = writeText("bad", c.text);
    auto m = chorus::readTuningFile(path);
    ASSERT_FALSE(m.isOk()) << c.text;
    EXPECT_EQ(m.status().code(), chorus::Code::kInvalidArgument);
    EXPECT_NE(m.status().message().find("tuning file " + path), std::string::npos)
        << m.status().message();
    EXPECT_NE(m.status().message().find(c.expected), std::string::npos) << m.status().message();
    unlink(path.c_str());
  }
  auto missing = chorus::readTuningFile("/nonexistent/chorus.tuning");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("cannot read tuning file /nonexistent/chorus.tuning"),
            std::string::npos)
      << missing.status().message();
}

// The process's model comes from CHORUS_TUNING_FILE, read once: checked in fresh processes.
int childModel(const char* file, double* shmStep, std::string* why) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("CHORUS_TUNING_FILE", file, 1);
    char out[600];
    snprintf(out, sizeof out, "%g|%s", chorus::costModel().shmStepUs,
             chorus::costModelStatus().message().c_str());
    ssize_t w = write(fds[1], out, strlen(out));
    _exit(w > 0 ? 0 : 1);
  }
  close(fds[1]);
  char buf[600] = {};
  ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (n <= 0) return -1;
  std::string got(buf);
  *shmStep = atof(got.substr(0, got.find('|')).c_str());
  *why = got.substr(got.find('|') + 1);
  return 0;
}

TEST(TuningFile, TheProcessModelFollowsChorusTuningFile) {
  const std::string good = writeText("good", "shm_step_us 2.5\n");
  double step = 0;
  std::string why;
  ASSERT_EQ(childModel(good.c_str(), &step, &why), 0);
  EXPECT_EQ(step, 2.5);
  EXPECT_EQ(why, "");
  const std::string bad = writeText("badfile", "shm_step_us x\n");
  ASSERT_EQ(childModel(bad.c_str(), &step, &why), 0);
  EXPECT_EQ(step, CostModel().shmStepUs);  // the built-in figures stay
  EXPECT_EQ(why.rfind("CHORUS_TUNING_FILE=" + bad + ": tuning file " + bad + " line 1", 0), 0u)
      << why;
  unlink(good.c_str());
  unlink(bad.c_str());
}

// Measurements of all-reduce as chorus-tune --calibrate takes them, their times predicted by
// truth and distorted by a deterministic +-4% pattern: 2 ranks on four cores or, with four,
// 2 and 4 ranks on two cores (4 ranks take two a core).
std::vector<chorus::Measurement> synthetic(const CostModel& truth, bool four = false) {
  std::vector<chorus::Measurement> out;
  struct Config {
    Algorithm algo;
    int channels;
    bool net;
    bool big;  // also at 32 MiB, as the calibration measures it
    int nranks = 2;
    size_t largest = 0;  // sizes up to this only (0: all)
  };
  const Config configs[] = {{Algorithm::kRing, 1, false, true},
                            {Algorithm::kRing, 2, false, false},
                            {Algorithm::kTree, 1, false, false},
                            {Algorithm::kOneShot, 1, false, true},
                            {Algorithm::kTwoShot, 1, false, true},
                            {Algorithm::kRing, 1, true, false},
                            {Algorithm::kTree, 1, true, false},
                            {Algorithm::kRd, 1, true, false},
                            {Algorithm::kOneShot, 1, false, false, 4, size_t(2) << 20},
                            {Algorithm::kTwoShot, 1, false, false, 4, size_t(2) << 20},
                            {Algorithm::kRing, 1, false, false, 4, 65536},
                            {Algorithm::kRing, 1, true, false, 4},
                            {Algorithm::kRd, 1, true, false, 4, size_t(1) << 20}};
  int k = 0;
  for (const Config& c : configs) {
    if (c.nranks == 4 && !four) continue;
    std::vector<size_t> sizes;
    for (size_t s : {size_t(8), size_t(4096), size_t(65536), size_t(1) << 20, size_t(2) << 20,
                     size_t(8) << 20})
      if (c.largest == 0 || s <= c.largest) sizes.push_back(s);
    if (c.big) sizes.push_back(size_t(32) << 20);
    for (size_t bytes : sizes) {
      chorus::Measurement m;
      m.info.nranks = c.nranks;
      m.info.localRanks = c.nranks;
      m.info.coresPerRank = (four ? 2.0 : 4.0) / c.nranks;
      m.info.shm = !c.net;
      m.info.directPossible = !c.net;
      m.algo = c.algo;
      m.nchannels = c.channels;
      m.bytes = bytes;
      m.us = chorus::predictUs(m.info, m.coll, m.algo, m.nchannels, bytes, truth) *
             (1 + 0.04 * std::sin(++k * 2.3));
      out.push_back(m);
    }
  }
  return out;
}

CostModel otherMachine() {
  CostModel t;
  t.shmStepUs *= 1.8;
  t.shmGBps *= 0.6;
  t.netStepUs *= 0.4;
  t.netGBps *= 2.5;
  t.directSyncUs *= 1.5;
  t.memGBps *= 0.7;
  return t;
}

TEST(CostModelFit, RecoversAKnownModelFromItsPredictions) {
  const CostModel truth = otherMachine();
  const std::vector<chorus::Measurement> ms = synthetic(truth);
  const chorus::Fit fit = chorus::fitCostModel(ms, CostModel());
  EXPECT_EQ(fit.used, static_cast<int>(ms.size()));
  EXPECT_GT(fit.medianErrorBefore, 0.2);
  EXPECT_LT(fit.medianErrorAfter, 0.04);
  EXPECT_LT(fit.maxErrorAfter, 0.1);
  for (double CostModel::*f : {&CostModel::shmStepUs, &CostModel::shmGBps, &CostModel::netStepUs,
                               &CostModel::netGBps, &CostModel::memGBps}) {
    EXPECT_NEAR(fit.model.*f / truth.*f, 1.0, 0.1);
  }
  // Figures no measurement depends on keep their values (4 ranks oversubscribed never ran).
  EXPECT_NEAR(fit.model.wakeUs, CostModel().wakeUs, 1e-9);
}

// Four ranks on two cores reveal what oversubscription costs (waking a peer through shared
// memory and through the network, the network's throughput left) and the tree's throughput
// against the ring's: the fit recovers them.
TEST(CostModelFit, RecoversTheOversubscribedAndTreeFigures) {
  CostModel truth = otherMachine();
  truth.treeCost = 1.4;
  truth.wakeUs = 1.6;
  truth.netWakeUs = 16;
  truth.oversubShare = 0.9;
  truth.netRingShare = 0.6;
  const std::vector<chorus::Measurement> ms = synthetic(truth, true);
  const chorus::Fit fit = chorus::fitCostModel(ms, CostModel());
  EXPECT_EQ(fit.used, static_cast<int>(ms.size()));
  EXPECT_LT(fit.medianErrorAfter, 0.04);
  EXPECT_LT(fit.maxErrorAfter, 0.1);
  EXPECT_NEAR(fit.model.treeCost / truth.treeCost, 1.0, 0.1);
  EXPECT_NEAR(fit.model.wakeUs / truth.wakeUs, 1.0, 0.25);
  EXPECT_NEAR(fit.model.netWakeUs / truth.netWakeUs, 1.0, 0.15);
  EXPECT_NEAR(fit.model.oversubShare / truth.oversubShare, 1.0, 0.1);
  EXPECT_NEAR(fit.model.netRingShare / truth.netRingShare, 1.0, 0.1);
  // Without the 4-rank measurements, none of the oversubscribed figures moves.
  const chorus::Fit two = chorus::fitCostModel(synthetic(truth), CostModel());
  EXPECT_EQ(two.model.wakeUs, CostModel().wakeUs);
  EXPECT_EQ(two.model.netWakeUs, CostModel().netWakeUs);
  EXPECT_EQ(two.model.oversubShare, CostModel().oversubShare);
  EXPECT_EQ(two.model.netRingShare, CostModel().netRingShare);
}

// nranks on one host sharing memory, with coresPerRank cores each.
chorus::TuningInfo oneHost(int nranks, double coresPerRank) {
  chorus::TuningInfo info;
  info.nranks = nranks;
  info.localRanks = nranks;
  info.coresPerRank = coresPerRank;
  info.shm = true;
  info.directPossible = true;
  return info;
}

// A hand-off to a peer that is not running waits for the ranks ahead of it on its core: with
// 2, 3 and 4 ranks a core, 1, 2 and 3 wake-ups per ring step of a small call.
TEST(CostModel, WakeUpsGrowWithTheRanksSharingACore) {
  CostModel m, none;
  m.wakeUs = 10;
  none.wakeUs = 1e-9;
  for (int perCore : {2, 3, 4}) {
    const chorus::TuningInfo info = oneHost(8, 1.0 / perCore);
    const double extra =
        chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, 8, m) -
        chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, 8, none);
    EXPECT_NEAR(extra, 2 * 7 * (perCore - 1) * m.wakeUs, 1e-6) << perCore;
  }
  // A core each: no wake-up.
  EXPECT_EQ(chorus::predictUs(oneHost(8, 1), Collective::kAllReduce, Algorithm::kRing, 1, 8, m),
            chorus::predictUs(oneHost(8, 1), Collective::kAllReduce, Algorithm::kRing, 1, 8, none));
}

// A fit that starts outside a figure's bounds (a hand-made start) begins at the bound and
// stays within: the file it writes is one readTuningFile takes.
TEST(CostModelFit, BoundedFiguresStayWithinTheirBounds) {
  CostModel truth = otherMachine();
  truth.treeCost = 1.2;
  truth.oversubShare = 0.8;
  CostModel start;
  start.treeCost = 0.5;
  start.oversubShare = 3;
  const chorus::Fit fit = chorus::fitCostModel(synthetic(truth, true), start);
  for (const chorus::CostField& f : chorus::costFields()) {
    if (f.lowest > 0) EXPECT_GE(fit.model.*(f.member), f.lowest) << f.name;
    if (f.highest > 0) EXPECT_LE(fit.model.*(f.member), f.highest) << f.name;
  }
  EXPECT_NEAR(fit.model.treeCost / truth.treeCost, 1.0, 0.1);
  EXPECT_NEAR(fit.model.oversubShare / truth.oversubShare, 1.0, 0.1);
  const std::string path = tempPath("bounded");
  ASSERT_TRUE(chorus::writeTuningFile(path, fit.model, {}).isOk());
  EXPECT_TRUE(chorus::readTuningFile(path).isOk());
  unlink(path.c_str());
}

// Where each new figure enters: the tree's throughput term; the network's wake-up in hand-offs
// through the network of oversubscribed ranks only; the share of the cores in the throughput of
// oversubscribed ranks only.
TEST(CostModel, OversubscribedAndTreeFiguresPriceOnlyTheirPart) {
  chorus::TuningInfo info = oneHost(4, 0.5);
  const size_t big = size_t(8) << 20;
  CostModel m, wake, share;
  wake.netWakeUs = 100;
  share.oversubShare = 0.25;
  for (Algorithm a : {Algorithm::kRing, Algorithm::kTree, Algorithm::kOneShot}) {
    // Shared memory: the network's wake-up does not matter; the share does, in large calls
    // (the throughput a quarter, the time about four times).
    EXPECT_EQ(chorus::predictUs(info, Collective::kAllReduce, a, 1, big, m),
              chorus::predictUs(info, Collective::kAllReduce, a, 1, big, wake));
    EXPECT_GT(chorus::predictUs(info, Collective::kAllReduce, a, 1, big, share),
              3 * chorus::predictUs(info, Collective::kAllReduce, a, 1, big, m));
  }
  // The network, oversubscribed: small calls pay the wake-ups (6 steps of the ring, each after
  // the one other rank on its peer's core), large ones the throughput.
  info.shm = false;
  info.directPossible = false;
  const double small = chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, 8, m);
  EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, 8, wake) - small,
              6 * (wake.netWakeUs - m.netWakeUs), 0.1);
  const double large = chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, m);
  EXPECT_GT(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, share),
            3 * large);
  // One core per rank: no figure of oversubscription matters.
  info.coresPerRank = 1;
  for (const CostModel& other : {wake, share})
    EXPECT_EQ(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, m),
              chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, other));
  // tree_cost stretches the tree's throughput term alone.
  CostModel tree2;
  tree2.treeCost = 2;
  info.shm = true;
  const double t1 = chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTree, 1, big, m);
  const double t2 =
      chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTree, 1, big, tree2);
  const double t0 = chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTree, 1, 8, m);
  EXPECT_GT(t2 / t1, 1.7);
  EXPECT_LT(t2 / t1, 2.0);
  EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTree, 1, 8, tree2), t0,
              0.01 * t0);
  EXPECT_EQ(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, m),
            chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, big, tree2));
}

// oversub_share is what two ranks a core keep; each halving of a rank's part of a core costs
// that fraction again: at four ranks a core a large call's throughput term takes 1 / share^2
// times as long, at two 1 / share.
TEST(CostModel, OversubShareCompoundsWithEachHalvingOfARanksCore) {
  const size_t big = size_t(8) << 20;
  CostModel m, half;
  half.oversubShare = 0.5;
  for (double cores : {0.5, 0.25}) {
    const chorus::TuningInfo info = oneHost(8, cores);
    const double full =
        chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTwoShot, 1, big, m);
    const double slow =
        chorus::predictUs(info, Collective::kAllReduce, Algorithm::kTwoShot, 1, big, half);
    // The throughput term (most of a large call's time; the waits are the rest).
    const double expected = cores == 0.5 ? 2.0 : 4.0;
    EXPECT_GT(slow / full, 0.9 * expected) << cores;
    EXPECT_LE(slow / full, expected + 1e-9) << cores;
  }
}

// net_ring_share slows the ring through sockets of oversubscribed ranks alone: not recursive
// doubling or the tree on the same path, not two ranks' ring, not shared memory, not ranks with
// a core each, and not where a shaped link, not the CPUs, is the limit.
TEST(CostModel, NetRingShareSlowsOnlyTheOversubscribedRingThroughSockets) {
  chorus::TuningInfo info = oneHost(4, 0.5);
  info.shm = false;
  info.directPossible = false;
  const size_t big = size_t(8) << 20;
  CostModel m, half;
  half.netRingShare = 0.5;
  auto us = [&](Algorithm a, size_t bytes, const CostModel& model) {
    return chorus::predictUs(info, Collective::kAllReduce, a, 1, bytes, model);
  };
  EXPECT_GT(us(Algorithm::kRing, big, half), 1.8 * us(Algorithm::kRing, big, m));
  EXPECT_NEAR(us(Algorithm::kRing, 8, half), us(Algorithm::kRing, 8, m),
              0.01 * us(Algorithm::kRing, 8, m));
  for (Algorithm a : {Algorithm::kRd, Algorithm::kTree})
    EXPECT_EQ(us(a, big, half), us(a, big, m)) << chorus::algorithmName(a);
  // A link of 10 MB/s is the limit long before the CPUs.
  info.netLinkGBps = 0.01;
  EXPECT_EQ(us(Algorithm::kRing, big, half), us(Algorithm::kRing, big, m));
  info.netLinkGBps = 0;
  // Two ranks' ring is an exchange, as recursive doubling is.
  chorus::TuningInfo two = info;
  two.nranks = 2;
  EXPECT_EQ(chorus::predictUs(two, Collective::kAllReduce, Algorithm::kRing, 1, big, half),
            chorus::predictUs(two, Collective::kAllReduce, Algorithm::kRing, 1, big, m));
  for (bool shm : {true, false}) {
    info.shm = shm;
    info.coresPerRank = shm ? 0.5 : 1;
    EXPECT_EQ(us(Algorithm::kRing, big, half), us(Algorithm::kRing, big, m)) << shm;
  }
}

// The figure the calibration measures directly (the memory's speed, from its probe) is not
// fitted: it keeps the starting value even where the measurements would pull it.
TEST(CostModelFit, ProbedFiguresKeepTheirMeasuredValues) {
  CostModel truth = otherMachine();
  truth.cacheMiB = 8;
  truth.dramGBps = 6;
  CostModel start;
  start.dramGBps = 30;
  const chorus::Fit fit = chorus::fitCostModel(synthetic(truth), start);
  EXPECT_EQ(fit.model.dramGBps, 30);
  int probed = 0;
  for (const chorus::CostField& f : chorus::costFields()) probed += f.probed ? 1 : 0;
  EXPECT_EQ(probed, 1);
  // Given the memory's true speed, the rest, the cache edge included, is recovered from the
  // calls (32 MiB ones included) as before.
  start.dramGBps = truth.dramGBps;
  start.cacheMiB = 20;
  const chorus::Fit good = chorus::fitCostModel(synthetic(truth), start);
  EXPECT_LT(good.medianErrorAfter, 0.04);
  EXPECT_LT(good.maxErrorAfter, 0.1);
  EXPECT_NEAR(good.model.cacheMiB / truth.cacheMiB, 1.0, 0.25);
}

// Buffers beyond the cache: the share of a call's traffic that does not fit streams at the
// memory's speed. One-shot on 2 ranks of one host moves (3 + n) * s bytes through memory; its
// buffers are an input and an output per rank.
TEST(CostModel, TrafficBeyondTheCacheStreamsAtMemorySpeed) {
  chorus::TuningInfo info = oneHost(2, 1);
  info.directChunkBytes = size_t(1) << 20;
  CostModel m;
  m.cacheMiB = 16;
  m.memGBps = 80;
  m.dramGBps = 20;
  auto expect = [&](size_t bytes) {
    const double s = static_cast<double>(bytes);
    const double buffers = 2 * 2 * s, cache = 16.0 * (1 << 20);
    const double hit = buffers <= cache ? 1 : cache / buffers;
    const double chunks = std::ceil(s / (1 << 20));
    return chunks * m.directSyncUs + 5 * s * (hit / 80 + (1 - hit) / 20) / 1e3;
  };
  for (size_t bytes : {size_t(1) << 20, size_t(4) << 20, size_t(16) << 20, size_t(64) << 20}) {
    EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kOneShot, 1, bytes, m),
                expect(bytes), 1e-6 * expect(bytes))
        << bytes;
  }
  // Within the cache the memory's speed does not matter; beyond it, it does.
  CostModel slow = m;
  slow.dramGBps = 5;
  const auto oneshot = [&](size_t bytes, const CostModel& model) {
    return chorus::predictUs(info, Collective::kAllReduce, Algorithm::kOneShot, 1, bytes, model);
  };
  EXPECT_EQ(oneshot(size_t(4) << 20, m), oneshot(size_t(4) << 20, slow));
  EXPECT_GT(oneshot(size_t(64) << 20, slow), 2 * oneshot(size_t(64) << 20, m));
  // A ring reads and writes about 3 bytes of memory per byte it moves (ring_traffic): memory
  // caps it at a third of dram_gbps, and a channel slower than that is not slowed.
  info.directPossible = false;
  const double s = 256.0 * (1 << 20), hit = 16.0 / 1024;
  m.shmGBps = 4;
  m.shmStepUs = 1;
  EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, size_t(s), m),
              2 * 1 + s / 4 / 1e3, 1e-6 * s);
  m.shmGBps = 12;
  EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, size_t(s), m),
              2 * 1 + s * (hit / 12 + (1 - hit) / (20.0 / 3)) / 1e3, 1e-6 * s);
  // ring_traffic: where writes first read their lines, more bytes per byte moved.
  m.ringTraffic = 5;
  EXPECT_NEAR(chorus::predictUs(info, Collective::kAllReduce, Algorithm::kRing, 1, size_t(s), m),
              2 * 1 + s * (hit / 12 + (1 - hit) / (20.0 / 5)) / 1e3, 1e-6 * s);
}

// The cache edge stays within the caches the machine has, however the times pull it.
TEST(CostModelFit, TheCacheEdgeStaysWithinTheMachinesCaches) {
  CostModel truth = otherMachine();
  truth.cacheMiB = 64;
  truth.dramGBps = 8;
  CostModel start;
  start.dramGBps = truth.dramGBps;
  const chorus::Fit free = chorus::fitCostModel(synthetic(truth), start);
  EXPECT_GT(free.model.cacheMiB, 48);
  const chorus::Fit bounded = chorus::fitCostModel(synthetic(truth), start, 24);
  EXPECT_LE(bounded.model.cacheMiB, 24);
  start.cacheMiB = 20;
  EXPECT_LE(chorus::fitCostModel(synthetic(truth), start, 24).model.cacheMiB, 24);
}

TEST(CostModelFit, OutliersDoNotDragTheFit) {
  const CostModel truth = otherMachine();
  std::vector<chorus::Measurement> ms = synthetic(truth);
  ms[1].us *= 300;  // a scheduling hiccup
  ms[12].us *= 50;
  const chorus::Fit fit = chorus::fitCostModel(ms, CostModel());
  EXPECT_LT(fit.medianErrorAfter, 0.05);
  EXPECT_NEAR(fit.model.shmStepUs / truth.shmStepUs, 1.0, 0.15);
}

// The fitted model decides as the model it was fitted to, on shapes the measurements did not
// cover (4 and 16 ranks, 2 hosts), for every size.
TEST(CostModelFit, TheFittedModelDecidesAsTheTrueOne) {
  const CostModel truth = otherMachine();
  const chorus::Fit fit = chorus::fitCostModel(synthetic(truth), CostModel());
  int same = 0, total = 0;
  for (int nranks : {4, 16}) {
    for (int nodes : {1, 2}) {
      chorus::TuningInfo info;
      info.nranks = nranks;
      info.nnodes = nodes;
      info.localRanks = nranks / nodes;
      info.coresPerRank = 2;
      info.directPossible = nodes == 1;
      for (size_t bytes = 8; bytes <= (size_t(64) << 20); bytes *= 4) {
        const chorus::Decision want =
            chorus::selectAlgorithm(info, Collective::kAllReduce, bytes, truth);
        const chorus::Decision got =
            chorus::selectAlgorithm(info, Collective::kAllReduce, bytes, fit.model);
        ++total;
        if (want.algo == got.algo) {
          ++same;
        } else {
          // A different choice is only acceptable where both are within 5% under the truth.
          const double mine = chorus::predictUs(info, Collective::kAllReduce, got.algo,
                                                got.nchannels, bytes, truth);
          EXPECT_LT(mine / want.us, 1.05) << nranks << " ranks, " << nodes << " hosts, " << bytes;
        }
      }
    }
  }
  EXPECT_GE(same, total * 9 / 10);
}

}  // namespace
