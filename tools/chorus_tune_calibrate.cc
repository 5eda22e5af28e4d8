// chorus-tune --calibrate: measures all-reduce on this machine with each algorithm forced (two
// ranks as threads of this process, each bound to half of its CPUs as chorusrun binds ranks:
// shared memory, then TCP over loopback; three rounds, the median kept), fits the cost model's
// figures to the times (algorithms/calibrate.h) and writes them as a tuning file for
// CHORUS_TUNING_FILE.
#include "tools/chorus_tune_calibrate.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/calibrate.h"
#include "chorus.h"
#include "common/param.h"

namespace {

using chorus::Algorithm;
using Clock = std::chrono::steady_clock;

struct Config {
  const char* algo;  // CHORUS_ALGO
  int channels;
  bool net;  // shared memory disabled: TCP between the two ranks
};

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  utsname u;
  return uname(&u) == 0 ? u.machine : "unknown CPU";
}

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

// Binds the calling thread to block `rank` of `nranks` equal blocks of this process's CPUs, as
// chorusrun binds its ranks (threads the rank starts inherit it).
void bindToBlock(int rank, int nranks) {
  cpu_set_t all;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof all, &all) != 0) return;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  const int n = static_cast<int>(cpus.size());
  int begin = rank * n / nranks, end = (rank + 1) * n / nranks;
  if (end <= begin) end = begin + 1;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = begin; i < end && i < n; ++i) CPU_SET(cpus[i], &mine);
  pthread_setaffinity_np(pthread_self(), sizeof mine, &mine);
}

// Calls of bytes per timed batch: enough that a batch takes a few milliseconds.
int itersFor(size_t bytes, bool quick) {
  const int n = bytes <= 65536 ? 200 : bytes <= (1u << 20) ? 40 : 8;
  return quick ? std::max(4, n / 4) : n;
}

// Runs config on two threads; fills us[i] with the median time per call of sizes[i], measured
// on rank 0. False (with the reason printed) when a call failed.
bool measure(const Config& c, const std::vector<size_t>& sizes, bool quick,
             std::vector<double>* us) {
  setenv("CHORUS_ALGO", c.algo, 1);
  const std::string ch = std::to_string(c.channels);
  setenv("CHORUS_MIN_CHANNELS", ch.c_str(), 1);
  setenv("CHORUS_MAX_CHANNELS", ch.c_str(), 1);
  setenv("CHORUS_SHM_DISABLE", c.net ? "1" : "0", 1);
  if (c.net) setenv("CHORUS_NET", "Socket", 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return false;
  us->assign(sizes.size(), 0);
  bool ok[2] = {true, true};
  auto rank = [&](int r) {
    bindToBlock(r, 2);
    ncclComm_t comm = nullptr;
    if (chorusCommInitRankHost(&comm, 2, id, r, nullptr) != ncclSuccess) {
      fprintf(stderr, "chorus-tune: init: %s\n", ncclGetLastError(nullptr));
      ok[r] = false;
      return;
    }
    std::vector<float> in(sizes.back() / sizeof(float) + 1, 1.0f), out(in.size());
    for (size_t i = 0; i < sizes.size() && ok[r]; ++i) {
      const size_t count = std::max<size_t>(1, sizes[i] / sizeof(float));
      const int iters = itersFor(sizes[i], quick);
      std::vector<double> batches;
      for (int b = -1; b < 3 && ok[r]; ++b) {  // batch -1 warms up
        const Clock::time_point t0 = Clock::now();
        for (int k = 0; k < iters; ++k) {
          if (ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr) !=
              ncclSuccess) {
            fprintf(stderr, "chorus-tune: %s: %s\n", c.algo, ncclGetLastError(comm));
            ok[r] = false;
            break;
          }
        }
        const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
        if (b >= 0) batches.push_back(elapsed / iters);
      }
      if (r == 0 && ok[r]) {
        std::sort(batches.begin(), batches.end());
        (*us)[i] = batches[batches.size() / 2];
      }
    }
    ncclCommDestroy(comm);
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  unsetenv("CHORUS_ALGO");
  unsetenv("CHORUS_MIN_CHANNELS");
  unsetenv("CHORUS_MAX_CHANNELS");
  unsetenv("CHORUS_SHM_DISABLE");
  unsetenv("CHORUS_NET");
  return ok[0] && ok[1];
}

chorus::TuningInfo shapeOf(const Config& c) {
  chorus::TuningInfo info;
  info.nranks = 2;
  info.nnodes = 1;
  info.localRanks = 2;
  info.coresPerRank = cores() / 2.0;
  info.shm = !c.net;
  info.directPossible = !c.net;
  info.directChunkBytes = static_cast<size_t>(chorus::paramInt("DIRECT_BUFFSIZE"));
  return info;
}

Algorithm algorithmOf(const char* name) {
  for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a)
    if (std::string(chorus::algorithmName(static_cast<Algorithm>(a))) == name)
      return static_cast<Algorithm>(a);
  return Algorithm::kRing;
}

}  // namespace

int runCalibration(const std::string& output, bool quick) {
  const Clock::time_point start = Clock::now();
  const std::vector<Config> configs = {
      {"ring", 1, false},    {"ring", 2, false}, {"tree", 1, false}, {"oneshot", 1, false},
      {"twoshot", 1, false}, {"ring", 1, true},  {"tree", 1, true},  {"rd", 1, true},
  };
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{8, 65536, 1u << 20}
                                          : std::vector<size_t>{8, 4096, 65536, 1u << 20, 8u << 20};
  // Rounds over every configuration, the median per size taken: the machine's speed drifts
  // over seconds (other tenants, clock changes) and each configuration sees the same drift.
  const int rounds = quick ? 1 : 3;
  std::vector<std::vector<std::vector<double>>> runs(configs.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < configs.size(); ++k) {
      std::vector<double> us;
      if (!measure(configs[k], sizes, quick, &us)) return 1;
      runs[k].push_back(us);
    }
  }
  std::vector<chorus::Measurement> ms;
  for (size_t k = 0; k < configs.size(); ++k) {
    const Config& c = configs[k];
    std::vector<double> us(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<double> v;
      for (const std::vector<double>& run : runs[k]) v.push_back(run[i]);
      std::sort(v.begin(), v.end());
      us[i] = v[v.size() / 2];
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      chorus::Measurement m;
      m.info = shapeOf(c);
      m.algo = algorithmOf(c.algo);
      m.nchannels = c.channels;
      m.bytes = sizes[i];
      m.us = us[i];
      ms.push_back(m);
    }
  }
  const chorus::CostModel builtIn;
  const chorus::Fit fit = chorus::fitCostModel(ms, builtIn);
  printf("# all-reduce, 2 ranks (threads), measured on %s (%d cores)\n", cpuModel().c_str(),
         cores());
  printf("%-8s %4s %-6s %10s %12s %12s %12s\n", "algo", "chan", "path", "size(B)", "measured",
         "built-in", "fitted");
  for (const chorus::Measurement& m : ms) {
    const double b = chorus::predictUs(m.info, m.coll, m.algo, m.nchannels, m.bytes, builtIn);
    const double a = chorus::predictUs(m.info, m.coll, m.algo, m.nchannels, m.bytes, fit.model);
    printf("%-8s %4d %-6s %10zu %12.1f %12.1f %12.1f\n", chorus::algorithmName(m.algo), m.nchannels,
           m.info.shm ? "shm" : "tcp", m.bytes, m.us, b, a);
  }
  printf(
      "# median |predicted/measured - 1|: built-in %.0f%%, fitted %.0f%% (largest %.0f%%), "
      "%d measurements\n",
      100 * fit.medianErrorBefore, 100 * fit.medianErrorAfter, 100 * fit.maxErrorAfter, fit.used);
  for (const chorus::CostField& f : chorus::costFields())
    printf("# %-18s %10.4g (built-in %.4g)\n", f.name, fit.model.*(f.member), builtIn.*(f.member));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  char date[32];
  const time_t now = time(nullptr);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  const chorus::Status s = chorus::writeTuningFile(
      output, fit.model,
      {"Chorus tuning file: chorus-tune --calibrate, " + std::string(date) + ", " +
           std::to_string(seconds).substr(0, 4) + " s",
       "machine: " + cpuModel() + ", " + std::to_string(cores()) + " cores",
       "fit: median error " + std::to_string(static_cast<int>(100 * fit.medianErrorAfter)) +
           "% (built-in figures " + std::to_string(static_cast<int>(100 * fit.medianErrorBefore)) +
           "%) over " + std::to_string(fit.used) + " measurements (2 ranks; TCP over loopback)",
       "use: CHORUS_TUNING_FILE=<this file>"});
  if (!s.isOk()) {
    fprintf(stderr, "chorus-tune: %s\n", s.message().c_str());
    return 1;
  }
  printf("# wrote %s in %.1f s\n", output.c_str(), seconds);
  return 0;
}
