// chorus-tune: the selector's decision table. For a communicator shape (ranks, hosts, cores) and
// a range of sizes it prints, per collective and size, the algorithm and channel count Chorus
// picks and the predicted time of every alternative, exactly as a communicator of that shape
// would decide (CHORUS_ALGO, CHORUS_MIN_CHANNELS, CHORUS_MAX_CHANNELS and CHORUS_TUNING_FILE
// apply). With --calibrate it measures this machine and writes a tuning file instead.
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/selector.h"
#include "common/param.h"
#include "tools/chorus_tune_calibrate.h"
#include "tools/chorus_tune_simulate.h"

namespace {

using chorus::Algorithm;
using chorus::Collective;

void usage(FILE* out) {
  fprintf(out,
          "usage: chorus-tune [options]\n"
          "  -n, --nranks N     ranks in the communicator (default 2)\n"
          "  -N, --nodes M      hosts they are spread over, evenly (default 1)\n"
          "  -C, --cores C      CPU cores per host, fractions allowed (default: this machine's;\n"
          "                     --simulate: one per rank)\n"
          "  -c, --coll NAME    allreduce, allgather, reducescatter, broadcast, reduce or all\n"
          "                     (default allreduce)\n"
          "  -b, --minbytes S   smallest size (default 8; K, M, G suffixes)\n"
          "  -e, --maxbytes S   largest size (default 128M)\n"
          "  -f, --stepfactor F multiply the size by F each row (default 2)\n"
          "      --no-shm       ranks on one host do not share memory (CHORUS_SHM_DISABLE=1)\n"
          "  -t, --tuning FILE  the cost model's figures from FILE (as CHORUS_TUNING_FILE)\n"
          "      --calibrate    measure this machine (seconds) and write its tuning file\n"
          "  -o, --output FILE  where --calibrate writes it (required with --calibrate)\n"
          "      --net-launch CMD  --calibrate starts the ranks (1 and up) of its TCP\n"
          "                     measurements through CMD, %%r the rank (e.g. 'ip netns exec\n"
          "                     host%%r'; this process is rank 0): TCP measured on the hosts'\n"
          "                     path instead of loopback (ranks of this machine)\n"
          "      --quick        fewer measurements (for tests)\n"
          "      --simulate     tables for clusters of 1, 2, 4, ... hosts up to --max-ranks:\n"
          "                     the choice and predicted bus bandwidth per size\n"
          "  -R, --ranks-per-host R  ranks on each simulated host (default 8)\n"
          "      --max-ranks N  largest simulated cluster (default 16384)\n"
          "      --net-gbps G   network link of each simulated host, GB/s (default: the model's)\n"
          "      --net-device   the hosts' network is a net plugin or InfiniBand device of\n"
          "                     --net-gbps, not TCP sockets\n"
          "      --csv          --simulate prints comma-separated values\n"
          "Sizes are the nccl-tests sizes: the buffer of all-reduce, broadcast and reduce, the\n"
          "gathered output of all-gather, the scattered input of reduce-scatter.\n");
}

bool parseSize(const char* text, size_t* out) {
  errno = 0;
  char* end = nullptr;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || v < 0) return false;
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024;
      ++end;
      break;
    case 'm':
    case 'M':
      v *= 1024 * 1024;
      ++end;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024 * 1024;
      ++end;
      break;
    default:
      break;
  }
  if (*end != '\0') return false;
  *out = static_cast<size_t>(v);
  return true;
}

bool parseInt(const char* text, int lo, int* out) {
  char* end = nullptr;
  long v = strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < lo || v > 1 << 20) return false;
  *out = static_cast<int>(v);
  return true;
}

// A positive number of cores, fractions allowed (hosts sharing a machine's cores).
bool parseCores(const char* text, double* out) {
  char* end = nullptr;
  const double v = strtod(text, &end);
  if (end == text || *end != '\0' || !(v > 0) || v > 1 << 20) return false;
  *out = v;
  return true;
}

int machineCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}

bool collectiveByName(const std::string& name, std::vector<Collective>* out) {
  static const char* names[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"};
  for (int c = 0; c < static_cast<int>(Collective::kCount); ++c) {
    if (name == "all" || name == names[c]) out->push_back(static_cast<Collective>(c));
  }
  return !out->empty();
}

std::string cell(const chorus::Decision& d, Algorithm a) {
  for (int i = 0; i < d.nalternatives; ++i) {
    const chorus::Prediction& p = d.alternatives[i];
    if (p.algo != a) continue;
    char buf[48];
    if (a == Algorithm::kRing)
      snprintf(buf, sizeof(buf), "%.1f/%d%s", p.us, p.nchannels, p.allowed ? "" : "x");
    else
      snprintf(buf, sizeof(buf), "%.1f%s", p.us, p.allowed ? "" : "x");
    return buf;
  }
  return "-";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--calibrate-rank")
    return runCalibrationRank(argc - 2, argv + 2);
  int nranks = 2, nodes = 1;
  double cores = machineCores();
  size_t minBytes = 8, maxBytes = 128u << 20;
  double factor = 2;
  bool shm = true, calibrate = false, quick = false, simulate = false, sizesGiven = false,
       coresGiven = false;
  SimulateOptions sim;
  std::string output, netLaunch;
  std::vector<Collective> colls;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        fprintf(stderr, "chorus-tune: %s needs a value\n", what);
        exit(2);
      }
      return argv[++i];
    };
    bool ok = true;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "-n" || a == "--nranks") {
      ok = parseInt(value("--nranks"), 1, &nranks);
    } else if (a == "-N" || a == "--nodes") {
      ok = parseInt(value("--nodes"), 1, &nodes);
    } else if (a == "-C" || a == "--cores") {
      ok = parseCores(value("--cores"), &cores);
      coresGiven = true;
    } else if (a == "-c" || a == "--coll") {
      ok = collectiveByName(value("--coll"), &colls);
    } else if (a == "-b" || a == "--minbytes") {
      ok = parseSize(value("--minbytes"), &minBytes);
      sizesGiven = true;
    } else if (a == "-e" || a == "--maxbytes") {
      ok = parseSize(value("--maxbytes"), &maxBytes);
      sizesGiven = true;
    } else if (a == "-f" || a == "--stepfactor") {
      char* end = nullptr;
      factor = strtod(value("--stepfactor"), &end);
      sizesGiven = true;
      ok = *end == '\0' && factor > 1;
    } else if (a == "--no-shm") {
      shm = false;
    } else if (a == "-t" || a == "--tuning") {
      setenv("CHORUS_TUNING_FILE", value("--tuning"), 1);
    } else if (a == "--calibrate") {
      calibrate = true;
    } else if (a == "--net-launch") {
      netLaunch = value("--net-launch");
      ok = netLaunch.find_first_not_of(" \t") != std::string::npos;
    } else if (a == "-o" || a == "--output") {
      output = value("--output");
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--simulate") {
      simulate = true;
    } else if (a == "-R" || a == "--ranks-per-host") {
      ok = parseInt(value("--ranks-per-host"), 1, &sim.ranksPerHost);
    } else if (a == "--max-ranks") {
      ok = parseInt(value("--max-ranks"), 2, &sim.maxRanks);
    } else if (a == "--net-gbps") {
      char* end = nullptr;
      sim.netLinkGBps = strtod(value("--net-gbps"), &end);
      ok = *end == '\0' && sim.netLinkGBps > 0;
    } else if (a == "--net-device") {
      sim.netDevice = true;
    } else if (a == "--csv") {
      sim.csv = true;
    } else {
      fprintf(stderr, "chorus-tune: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
    if (!ok) {
      fprintf(stderr, "chorus-tune: bad value for %s: %s\n", a.c_str(), argv[i]);
      return 2;
    }
  }
  if (calibrate) {
    if (output.empty()) {
      fprintf(stderr, "chorus-tune: --calibrate needs --output FILE\n");
      return 2;
    }
    return runCalibration(output, quick, netLaunch);
  }
  if (!chorus::costModelStatus().isOk()) {
    fprintf(stderr, "chorus-tune: %s\n", chorus::costModelStatus().message().c_str());
    return 2;
  }
  if (simulate) {
    if (!sizesGiven) {
      minBytes = 8;
      maxBytes = size_t(1) << 30;
      factor = 32;
    }
    for (double v = static_cast<double>(minBytes); v <= static_cast<double>(maxBytes);
         v = v * factor < v + 1 ? v + 1 : v * factor)
      sim.sizes.push_back(static_cast<size_t>(v));
    sim.colls = colls.empty() ? std::vector<Collective>{Collective::kAllReduce} : colls;
    sim.coresPerHost = coresGiven ? cores : 0;  // a core per simulated rank unless given
    sim.shm = shm;
    if (sim.maxRanks > 1 << 20) sim.maxRanks = 1 << 20;
    return runSimulation(sim);
  }
  if (nodes > nranks) {
    fprintf(stderr, "chorus-tune: --nodes %d exceeds --nranks %d\n", nodes, nranks);
    return 2;
  }
  if (minBytes > maxBytes) {
    fprintf(stderr, "chorus-tune: --minbytes exceeds --maxbytes\n");
    return 2;
  }
  if (colls.empty()) colls.push_back(Collective::kAllReduce);

  chorus::TuningInfo info;
  chorus::Result<chorus::AlgorithmMask> mask = chorus::algorithmOverride();
  chorus::Status bounds = chorus::channelBounds(&info.minChannels, &info.maxChannels);
  if (!mask.isOk() || !bounds.isOk()) {
    fprintf(stderr, "chorus-tune: %s\n", (!mask.isOk() ? mask.status() : bounds).message().c_str());
    return 2;
  }
  info.allowed = mask.value();
  info.nranks = nranks;
  info.nnodes = nodes;
  info.localRanks = (nranks + nodes - 1) / nodes;
  info.coresPerRank = cores / info.localRanks;
  info.shm = shm;
  info.directPossible = nodes == 1 && shm && nranks > 1;
  if (nodes > 1 && nranks % nodes == 0) info.hierRanksPerHost = nranks / nodes;
  info.directChunkBytes = static_cast<size_t>(chorus::paramInt("DIRECT_BUFFSIZE"));

  for (Collective coll : colls) {
    printf(
        "# %s: %d ranks on %d host(s), %d per host, %.2f cores per rank, %s; channels %d..%d; "
        "algorithms %s\n",
        chorus::collectiveName(coll), nranks, nodes, info.localRanks, info.coresPerRank,
        shm ? "shared memory within a host" : "no shared memory", info.minChannels,
        info.maxChannels, info.allowed.isSet ? info.allowed.text.c_str() : "all");
    const chorus::ParamValue tuning = chorus::paramRaw("TUNING_FILE");
    printf("# cost model: %s\n",
           tuning.isSet && !tuning.value.empty() ? tuning.value.c_str() : "built-in figures");
    printf(
        "# predicted us per algorithm (ring: us/channels; x: excluded by CHORUS_ALGO; -: does "
        "not apply)\n");
    printf("%14s  %-10s %4s %10s", "size(B)", "choice", "chan", "pred(us)");
    for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a)
      printf(" %12s", chorus::algorithmName(static_cast<Algorithm>(a)));
    printf("\n");
    for (double s = static_cast<double>(minBytes); s <= static_cast<double>(maxBytes);
         s = s * factor < s + 1 ? s + 1 : s * factor) {
      size_t bytes = static_cast<size_t>(s);
      chorus::Decision d = chorus::selectAlgorithm(info, coll, bytes);
      printf("%14zu  %-10s %4d %10.1f", bytes, chorus::algorithmName(d.algo), d.nchannels, d.us);
      for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a)
        printf(" %12s", cell(d, static_cast<Algorithm>(a)).c_str());
      printf("%s\n", d.overrideIgnored ? "  (override does not apply)" : "");
    }
    printf("\n");
  }
  return 0;
}
