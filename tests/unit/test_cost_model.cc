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
    m.*(f.member) *= scale;
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

// Measurements of a 2-rank all-reduce as chorus-tune --calibrate takes them, their times
// predicted by truth and distorted by a deterministic +-4% pattern.
std::vector<chorus::Measurement> synthetic(const CostModel& truth) {
  std::vector<chorus::Measurement> out;
  struct Config {
    Algorithm algo;
    int channels;
    bool net;
  };
  const Config configs[] = {{Algorithm::kRing, 1, false},    {Algorithm::kRing, 2, false},
                            {Algorithm::kTree, 1, false},    {Algorithm::kOneShot, 1, false},
                            {Algorithm::kTwoShot, 1, false}, {Algorithm::kRing, 1, true},
                            {Algorithm::kTree, 1, true},     {Algorithm::kRd, 1, true}};
  int k = 0;
  for (const Config& c : configs) {
    for (size_t bytes :
         {size_t(8), size_t(4096), size_t(65536), size_t(1) << 20, size_t(8) << 20}) {
      chorus::Measurement m;
      m.info.nranks = 2;
      m.info.localRanks = 2;
      m.info.coresPerRank = 2;
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
