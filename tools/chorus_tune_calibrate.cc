// chorus-tune --calibrate: probes one core's memory throughput by working set (the cache edge
// and the memory's speed), measures all-reduce on this machine with each algorithm forced (two
// ranks as two processes, each bound to half of the CPUs as chorusrun binds ranks:
// shared memory, then TCP over loopback; then four, each bound to a quarter; three rounds, the
// median kept), fits the cost model's other figures to the times (algorithms/calibrate.h) and
// writes them as a tuning file for CHORUS_TUNING_FILE.
#include "tools/chorus_tune_calibrate.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/calibrate.h"
#include "exec/reduce.h"
#include "chorus.h"
#include "common/param.h"
#include "topo/discover.h"

namespace {

using chorus::Algorithm;
using Clock = std::chrono::steady_clock;

// The most ranks a measurement runs.
constexpr int kMostRanks = 4;

struct Config {
  const char* algo;  // CHORUS_ALGO
  int channels;
  bool net;            // shared memory disabled: TCP between the ranks
  bool big;            // also measured at 32 MiB, where the buffers of both ranks leave most caches
  int nranks = 2;      // kMostRanks: two ranks a core on two cores, what oversubscription costs
  size_t largest = 0;  // the sizes up to this only (0: all)
};

// The CPU's name and, where /proc/cpuinfo gives them, its family and model: virtual machines
// often report a bare vendor name ("AMD EPYC") for CPUs of different generations.
std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name, family, model;
  auto value = [&line] { return line.substr(line.find(':') + 2); };
  while (std::getline(in, line) && !line.empty()) {
    if (line.rfind("model name", 0) == 0)
      name = value();
    else if (line.rfind("cpu family", 0) == 0)
      family = value();
    else if (line.rfind("model", 0) == 0 && line.find(':') != std::string::npos &&
             line.find_first_not_of(" \t", 5) == line.find(':'))
      model = value();
  }
  if (name.empty()) {
    utsname u;
    name = uname(&u) == 0 ? u.machine : "unknown CPU";
  }
  if (!family.empty() && !model.empty()) name += " (family " + family + ", model " + model + ")";
  return name;
}

// The caches of this machine that hold data, every level and instance, in MiB (0: unknown):
// the most of its ranks' buffers the caches can hold.
double machineCacheMiB() {
  chorus::Result<chorus::LocalTopology> t = chorus::discoverLocalTopology();
  if (!t.isOk()) return 0;
  double bytes = 0;
  for (const chorus::CacheSummary& c : t.value().caches)
    if (c.type != "instruction") bytes += static_cast<double>(c.sizeBytes) * c.count;
  return bytes / (1 << 20);
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

// Page-aligned floats, as the perf tools allocate them (an ordinary vector's are 16 bytes past
// a cache line: the reduction kernel runs 20% slower so in L1, 7% at 256 KiB, see
// perf/micro/bench_reduce.cc). Null when out of memory.
using Floats = std::unique_ptr<float, decltype(&std::free)>;
Floats alignedFloats(size_t n, float value) {
  const size_t bytes = (n * sizeof(float) + 4095) / 4096 * 4096;
  Floats p(static_cast<float*>(std::aligned_alloc(4096, bytes)), &std::free);
  if (p) std::fill(p.get(), p.get() + bytes / sizeof(float), value);
  return p;
}

// The memory probe: one core (bound as rank 0 is) reducing two float arrays into a third with
// Chorus's own reduction kernel, for working sets (the three arrays) from 256 KiB to 512 MiB
// (64 MiB with --quick).
// Throughput counts bytes read plus written. The largest working sets give dram_gbps; the cache
// edge is where the throughput falls through 1.5 times that (the whole range when it never
// does: no cache edge within it).
struct MemoryProbe {
  std::vector<std::pair<size_t, double>> gbps;  // working set (bytes), GB/s
  double cacheMiB = 0;
  double dramGBps = 0;
};

MemoryProbe probeMemory(bool quick) {
  MemoryProbe probe;
  const size_t largest = (quick ? size_t{64} : size_t{512}) << 20;
  const Floats a = alignedFloats(largest / 12, 1.0f), b = alignedFloats(largest / 12, 2.0f),
               c = alignedFloats(largest / 12, 0.0f);
  if (!a || !b || !c) return probe;
  chorus::RedOp op;
  for (size_t ws = size_t{256} << 10; ws <= largest; ws *= 2) {
    chorus::ReduceCopyArgs args;
    args.local = a.get();
    args.peer = b.get();
    args.dst0 = c.get();
    args.count = ws / 12;
    args.type = chorus::DataType::kFloat32;
    args.op = &op;
    chorus::reduceCopy(args);  // touch and warm
    double best = 0;
    for (int batch = 0; batch < 3; ++batch) {
      int passes = 0;
      const Clock::time_point t0 = Clock::now();
      double elapsed = 0;
      do {
        chorus::reduceCopy(args);
        ++passes;
        elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
      } while (elapsed < 2e-3);
      best = std::max(best, 12.0 * args.count * passes / elapsed / 1e9);
    }
    probe.gbps.emplace_back(ws, best);
  }
  // The memory's speed: the median of the three largest working sets (one of them may catch a
  // neighbour's burst).
  std::vector<double> last;
  for (size_t i = probe.gbps.size() - 3; i < probe.gbps.size(); ++i)
    last.push_back(probe.gbps[i].second);
  std::sort(last.begin(), last.end());
  probe.dramGBps = last[1];
  // Where the throughput last falls through 1.5 times the memory's, interpolated between the
  // two working sets around it (log of the size, linear in the throughput): a threshold met
  // at a measured point would flip between neighbouring sizes from run to run.
  const double edge = 1.5 * probe.dramGBps;
  probe.cacheMiB = static_cast<double>(probe.gbps.back().first) / (1 << 20);
  for (size_t i = 0; i + 1 < probe.gbps.size(); ++i) {
    const auto [ws0, g0] = probe.gbps[i];
    const auto [ws1, g1] = probe.gbps[i + 1];
    if (g0 >= edge && g1 < edge) {
      const double t = (g0 - edge) / (g0 - g1);
      probe.cacheMiB = std::exp(std::log(static_cast<double>(ws0)) +
                                t * std::log(static_cast<double>(ws1) / ws0)) /
                       (1 << 20);
    }
  }
  return probe;
}

// Calls of bytes per timed batch: enough that a batch takes a few milliseconds.
int itersFor(size_t bytes, bool quick) {
  const int n = bytes <= 65536 ? 200 : bytes <= (1u << 20) ? 40 : 8;
  return quick ? std::max(4, n / 4) : n;
}

// One rank of a measurement: all-reduce of each size in batches (the first warms up); on rank
// 0 fills us[i] with the median time per call of sizes[i]. False (with the reason printed) when
// a call failed.
bool runRank(int r, int nranks, const ncclUniqueId& id, const std::vector<size_t>& sizes,
             bool quick, std::vector<double>* us) {
  bindToBlock(r, nranks);
  ncclComm_t comm = nullptr;
  if (chorusCommInitRankHost(&comm, nranks, id, r, nullptr) != ncclSuccess) {
    fprintf(stderr, "chorus-tune: rank %d: init: %s\n", r, ncclGetLastError(nullptr));
    return false;
  }
  bool ok = true;
  const Floats in = alignedFloats(sizes.back() / sizeof(float) + 1, 1.0f),
               out = alignedFloats(sizes.back() / sizeof(float) + 1, 0.0f);
  if (!in || !out) {
    fprintf(stderr, "chorus-tune: rank %d: cannot allocate %zu bytes\n", r, sizes.back());
    ncclCommDestroy(comm);
    return false;
  }
  for (size_t i = 0; i < sizes.size() && ok; ++i) {
    const size_t count = std::max<size_t>(1, sizes[i] / sizeof(float));
    const int iters = itersFor(sizes[i], quick);
    std::vector<double> batches;
    for (int b = -1; b < 3 && ok; ++b) {  // batch -1 warms up
      const Clock::time_point t0 = Clock::now();
      for (int k = 0; k < iters; ++k) {
        if (ncclAllReduce(in.get(), out.get(), count, ncclFloat, ncclSum, comm, nullptr) !=
            ncclSuccess) {
          fprintf(stderr, "chorus-tune: rank %d: %s: %s\n", r,
                  getenv("CHORUS_ALGO") ? getenv("CHORUS_ALGO") : "", ncclGetLastError(comm));
          ok = false;
          break;
        }
      }
      const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      if (b >= 0) batches.push_back(elapsed / iters);
    }
    if (us && ok) {
      std::sort(batches.begin(), batches.end());
      (*us)[i] = batches[batches.size() / 2];
    }
  }
  ncclCommDestroy(comm);
  return ok;
}

std::string toHex(const ncclUniqueId& id) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (char ch : id.internal) {
    const auto b = static_cast<unsigned char>(ch);
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

bool fromHex(const std::string& hex, ncclUniqueId* id) {
  if (hex.size() != 2 * sizeof id->internal) return false;
  for (size_t i = 0; i < sizeof id->internal; ++i) {
    unsigned v = 0;
    if (sscanf(hex.c_str() + 2 * i, "%2x", &v) != 1) return false;
    id->internal[i] = static_cast<char>(v);
  }
  return true;
}

// The command line of rank r of a measurement: launch's words (every "%r" in them replaced by
// r; none for measurements through shared memory or without --net-launch), then this program
// with `--calibrate-rank` and the measurement's arguments.
std::vector<std::string> rankCommand(const std::string& launch, int r,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> words;
  std::istringstream in(launch);
  for (std::string w; in >> w;) {
    for (size_t at = w.find("%r"); at != std::string::npos; at = w.find("%r", at + 1))
      w.replace(at, 2, std::to_string(r));
    words.push_back(w);
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  words.push_back(n > 0 ? std::string(self, static_cast<size_t>(n)) : "/proc/self/exe");
  words.insert(words.end(), args.begin(), args.end());
  return words;
}

// Starts words as a process (the first word looked up in PATH) with this environment and
// actions (null: none); -1 with *err set when it cannot.
pid_t spawnWords(const std::vector<std::string>& words, const posix_spawn_file_actions_t* actions,
                 int* err) {
  std::vector<char*> argv;
  for (const std::string& w : words) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(nullptr);
  pid_t child = -1;
  *err = posix_spawnp(&child, argv[0], actions, nullptr, argv.data(), environ);
  return *err == 0 ? child : -1;
}

// Runs config on its ranks as processes, as jobs run them (shared memory mapped into several
// address spaces): ranks 1 and up are this program again (`--calibrate-rank`, which inherits
// the configuration's environment), through netLaunch when the ranks talk through the network,
// rank 0 a thread of this one. Fills us[i] with rank 0's median time per call of sizes[i];
// false (with the reason printed) when a call failed.
bool measure(const Config& c, const std::vector<size_t>& sizes, bool quick,
             const std::string& netLaunch, std::vector<double>* us) {
  setenv("CHORUS_ALGO", c.algo, 1);
  const std::string ch = std::to_string(c.channels);
  setenv("CHORUS_MIN_CHANNELS", ch.c_str(), 1);
  setenv("CHORUS_MAX_CHANNELS", ch.c_str(), 1);
  setenv("CHORUS_SHM_DISABLE", c.net ? "1" : "0", 1);
  if (c.net) setenv("CHORUS_NET", "Socket", 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return false;
  us->assign(sizes.size(), 0);
  std::string list;
  for (size_t s : sizes) list += (list.empty() ? "" : ",") + std::to_string(s);
  const std::string hex = toHex(id), q = quick ? "1" : "0", n = std::to_string(c.nranks);
  std::vector<pid_t> children;
  bool ok = true;
  for (int r = 1; r < c.nranks && ok; ++r) {
    const std::vector<std::string> words = rankCommand(
        c.net ? netLaunch : "", r, {"--calibrate-rank", hex, q, list, std::to_string(r), n});
    int err = 0;
    const pid_t child = spawnWords(words, nullptr, &err);
    ok = child > 0;
    if (ok) children.push_back(child);
    if (!ok)
      fprintf(stderr, "chorus-tune: cannot start rank %d (%s): %s\n", r, words[0].c_str(),
              strerror(err));
  }
  if (ok) {
    // On a thread of its own: its binding must not stay on the thread that starts the next
    // measurement's ranks.
    std::thread rank0([&] { ok = runRank(0, c.nranks, id, sizes, quick, us); });
    rank0.join();
  }
  for (pid_t child : children) {
    if (!ok) kill(child, SIGKILL);  // rank 0 gave up: do not wait for peers left waiting
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      fprintf(stderr, "chorus-tune: a rank of %s on %d ranks failed\n", c.algo, c.nranks);
      ok = false;
    }
  }
  unsetenv("CHORUS_ALGO");
  unsetenv("CHORUS_MIN_CHANNELS");
  unsetenv("CHORUS_MAX_CHANNELS");
  unsetenv("CHORUS_SHM_DISABLE");
  unsetenv("CHORUS_NET");
  return ok;
}

// The shape the ranks of c see: one host, or through --net-launch a host each (of this
// machine still: they share its cores).
chorus::TuningInfo shapeOf(const Config& c, bool launched) {
  chorus::TuningInfo info;
  info.nranks = c.nranks;
  info.nnodes = launched ? c.nranks : 1;
  info.localRanks = launched ? 1 : c.nranks;
  info.coresPerRank = cores() / static_cast<double>(c.nranks);
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

int runCalibrationRank(int argc, char** argv) {
  ncclUniqueId id;
  std::vector<size_t> sizes;
  long rank = 0, nranks = 0;
  // A whole decimal number, or -1.
  auto number = [](const char* text) {
    char* end = nullptr;
    const long v = std::strtol(text, &end, 10);
    return end != text && *end == '\0' ? v : -1;
  };
  bool ok = argc == 5 && fromHex(argv[0], &id);
  if (ok) {
    rank = number(argv[3]);
    nranks = number(argv[4]);
    const std::string list = argv[2];
    for (size_t pos = 0; ok && pos < list.size();) {
      size_t comma = list.find(',', pos);
      if (comma == std::string::npos) comma = list.size();
      const long bytes = number(list.substr(pos, comma - pos).c_str());
      ok = bytes > 0;
      sizes.push_back(static_cast<size_t>(bytes));
      pos = comma + 1;
    }
  }
  if (!ok || sizes.empty() || rank < 1 || rank >= nranks || nranks > 64) {
    fprintf(stderr, "chorus-tune: --calibrate-rank is started by --calibrate only\n");
    return 2;
  }
  return runRank(static_cast<int>(rank), static_cast<int>(nranks), id, sizes,
                 std::string(argv[1]) == "1", nullptr)
             ? 0
             : 1;
}

// Whether every rank the network measurements start through netLaunch runs this program:
// `--help` through it must succeed (its output dropped). Prints why not.
bool launchWorks(const std::string& netLaunch) {
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  bool ok = true;
  for (int r = 1; r < kMostRanks && ok; ++r) {
    int err = 0, status = 0;
    const pid_t child = spawnWords(rankCommand(netLaunch, r, {"--help"}), &quiet, &err);
    if (child > 0)
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
    ok = err == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok)
      fprintf(stderr, "chorus-tune: --net-launch '%s' does not run rank %d's command (%s)\n",
              netLaunch.c_str(), r,
              err != 0            ? strerror(err)
              : WIFEXITED(status) ? ("exit status " + std::to_string(WEXITSTATUS(status))).c_str()
                                  : "killed by a signal");
  }
  posix_spawn_file_actions_destroy(&quiet);
  return ok;
}

int runCalibration(const std::string& output, bool quick, const std::string& netLaunch) {
  const Clock::time_point start = Clock::now();
  if (!netLaunch.empty() && !launchWorks(netLaunch)) return 2;
  const std::vector<Config> configs = {
      {"ring", 1, false, true},
      {"ring", 2, false, false},
      {"tree", 1, false, false},
      {"oneshot", 1, false, true},
      {"twoshot", 1, false, true},
      {"ring", 1, true, false},
      {"tree", 1, true, false},
      {"rd", 1, true, false},
      // Twice as many ranks as cores: hand-offs to a peer that is not running (wake_us,
      // net_wake_us), and what is left of the throughput (oversub_share).
      {"oneshot", 1, false, false, kMostRanks, 2u << 20},
      {"twoshot", 1, false, false, kMostRanks, 2u << 20},
      {"ring", 1, false, false, kMostRanks, 65536},
      {"ring", 1, true, false, kMostRanks},
      {"rd", 1, true, false, kMostRanks, 1u << 20},
  };
  const std::vector<size_t> common =
      quick ? std::vector<size_t>{8, 65536, 1u << 20}
            : std::vector<size_t>{8, 4096, 65536, 256u << 10, 1u << 20, 2u << 20, 8u << 20};
  auto sizesOf = [&](const Config& c) {
    std::vector<size_t> v;
    for (size_t s : common)
      if (c.largest == 0 || s <= c.largest) v.push_back(s);
    if (c.big && !quick) v.push_back(32u << 20);
    return v;
  };
  // The memory probe first, on one core: the memory's speed is kept as measured; the cache
  // edge it sees (one core's) is where the fit starts the edge the collectives see (several
  // cores' buffers, the 32 MiB calls).
  MemoryProbe probe;
  std::thread([&probe, quick] {
    bindToBlock(0, 2);
    probe = probeMemory(quick);
  }).join();
  if (probe.dramGBps <= 0) {
    fprintf(stderr, "chorus-tune: the memory probe could not allocate its arrays\n");
    return 1;
  }
  // Rounds over every configuration, the median per size taken: the machine's speed drifts
  // over seconds (other tenants, clock changes) and each configuration sees the same drift.
  const int rounds = quick ? 1 : 3;
  std::vector<std::vector<std::vector<double>>> runs(configs.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t k = 0; k < configs.size(); ++k) {
      std::vector<double> us;
      if (!measure(configs[k], sizesOf(configs[k]), quick, netLaunch, &us)) return 1;
      runs[k].push_back(us);
    }
  }
  std::vector<chorus::Measurement> ms;
  for (size_t k = 0; k < configs.size(); ++k) {
    const Config& c = configs[k];
    const std::vector<size_t> sizes = sizesOf(c);
    std::vector<double> us(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<double> v;
      for (const std::vector<double>& run : runs[k]) v.push_back(run[i]);
      std::sort(v.begin(), v.end());
      us[i] = v[v.size() / 2];
    }
    for (size_t i = 0; i < sizes.size(); ++i) {
      chorus::Measurement m;
      m.info = shapeOf(c, c.net && !netLaunch.empty());
      m.algo = algorithmOf(c.algo);
      m.nchannels = c.channels;
      m.bytes = sizes[i];
      m.us = us[i];
      ms.push_back(m);
    }
  }
  const chorus::CostModel builtIn;
  chorus::CostModel probed = builtIn;
  // The edge stays within the machine's caches: the times of a VM that changes speed between
  // runs can otherwise be fitted with an edge past them (one-shot then looks as fast as the ring
  // at sizes that leave the caches).
  const double cacheBound = machineCacheMiB();
  probed.cacheMiB = cacheBound > 0 ? std::min(probe.cacheMiB, cacheBound) : probe.cacheMiB;
  probed.dramGBps = probe.dramGBps;
  chorus::Fit fit = chorus::fitCostModel(ms, probed, cacheBound);
  fit.medianErrorBefore = chorus::medianPredictionError(ms, builtIn);  // not the probed start's
  printf("# memory probe, one core, reduce of two float arrays (GB/s read plus written):");
  for (const auto& [ws, gbps] : probe.gbps) printf(" %zuK %.0f", ws >> 10, gbps);
  printf("\n# cache_mib %.1f, dram_gbps %.1f; caches of this machine %.1f MiB (0: unknown)\n",
         probe.cacheMiB, probe.dramGBps, cacheBound);
  printf("# all-reduce, 2 and 4 ranks (processes), measured on %s (%d cores); TCP %s%s\n",
         cpuModel().c_str(), cores(), netLaunch.empty() ? "over loopback" : "through ",
         netLaunch.c_str());
  printf("%-8s %4s %5s %-6s %10s %12s %12s %12s\n", "algo", "chan", "ranks", "path", "size(B)",
         "measured", "built-in", "fitted");
  for (const chorus::Measurement& m : ms) {
    const double b = chorus::predictUs(m.info, m.coll, m.algo, m.nchannels, m.bytes, builtIn);
    const double a = chorus::predictUs(m.info, m.coll, m.algo, m.nchannels, m.bytes, fit.model);
    printf("%-8s %4d %5d %-6s %10zu %12.1f %12.1f %12.1f\n", chorus::algorithmName(m.algo),
           m.nchannels, m.info.nranks, m.info.shm ? "shm" : "tcp", m.bytes, m.us, b, a);
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
           "%) over " + std::to_string(fit.used) + " measurements (2 and 4 ranks; TCP " +
           (netLaunch.empty() ? std::string("over loopback")
                              : "through --net-launch " + netLaunch) +
           ")",
       "use: CHORUS_TUNING_FILE=<this file>"});
  if (!s.isOk()) {
    fprintf(stderr, "chorus-tune: %s\n", s.message().c_str());
    return 1;
  }
  printf("# wrote %s in %.1f s\n", output.c_str(), seconds);
  return 0;
}
