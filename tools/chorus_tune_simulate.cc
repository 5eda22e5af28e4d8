// chorus-tune --simulate: the selector's decisions for clusters far larger than can be run here,
// made by the same code (selectAlgorithm over the cost model) a communicator of each shape runs.
#include "tools/chorus_tune_simulate.h"

#include <cstdio>
#include <string>

#include "algorithms/cost_model.h"
#include "algorithms/selector.h"
#include "common/param.h"

namespace {

using chorus::Collective;

// nccl-tests' bus bandwidth factor: what each rank's links carry relative to the size.
double busFactor(Collective c, int n) {
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return 1.0 * (n - 1) / n;
    default:
      return 1.0;
  }
}

std::string timeText(double us) {
  char buf[32];
  if (us >= 1e6)
    snprintf(buf, sizeof buf, "%.3g s", us / 1e6);
  else if (us >= 1e3)
    snprintf(buf, sizeof buf, "%.3g ms", us / 1e3);
  else
    snprintf(buf, sizeof buf, "%.3g us", us);
  return buf;
}

std::string sizeText(size_t b) {
  char buf[32];
  if (b >= (size_t(1) << 30) && b % (size_t(1) << 30) == 0)
    snprintf(buf, sizeof buf, "%zu GiB", b >> 30);
  else if (b >= (size_t(1) << 20) && b % (size_t(1) << 20) == 0)
    snprintf(buf, sizeof buf, "%zu MiB", b >> 20);
  else if (b >= 1024 && b % 1024 == 0)
    snprintf(buf, sizeof buf, "%zu KiB", b >> 10);
  else
    snprintf(buf, sizeof buf, "%zu B", b);
  return buf;
}

}  // namespace

int runSimulation(const SimulateOptions& o) {
  chorus::Result<chorus::AlgorithmMask> mask = chorus::algorithmOverride();
  chorus::TuningInfo base;
  chorus::Status bounds = chorus::channelBounds(&base.minChannels, &base.maxChannels);
  if (!mask.isOk() || !bounds.isOk()) {
    fprintf(stderr, "chorus-tune: %s\n", (!mask.isOk() ? mask.status() : bounds).message().c_str());
    return 2;
  }
  base.allowed = mask.value();
  base.localRanks = o.ranksPerHost;
  const double cores = o.coresPerHost > 0 ? o.coresPerHost : o.ranksPerHost;
  base.coresPerRank = cores / o.ranksPerHost;
  base.shm = o.shm;
  base.netLinkGBps = o.netLinkGBps;
  base.netDevice = o.netDevice;
  base.directChunkBytes = static_cast<size_t>(chorus::paramInt("DIRECT_BUFFSIZE"));
  const chorus::ParamValue tuning = chorus::paramRaw("TUNING_FILE");
  const std::string model =
      tuning.isSet && !tuning.value.empty() ? tuning.value : std::string("built-in figures");
  if (o.csv) printf("collective,ranks,hosts,bytes,algorithm,channels,us,busbw_gbps\n");
  for (Collective coll : o.colls) {
    if (!o.csv) {
      char netText[32];
      snprintf(netText, sizeof netText, "%.3g GB/s", o.netLinkGBps);
      printf("# %s: %d ranks per host, %g cores per host, network link %s (%s), cost model: %s\n",
             chorus::collectiveName(coll), o.ranksPerHost, cores,
             o.netLinkGBps > 0 ? netText : "the model's", o.netDevice ? "net device" : "sockets",
             model.c_str());
      printf(
          "# cell: algorithm (ring/channels), predicted time, predicted bus bandwidth in GB/s\n");
      printf("%7s %6s", "ranks", "hosts");
      for (size_t b : o.sizes) printf(" | %-25s", sizeText(b).c_str());
      printf("\n");
    }
    for (int hosts = 1; static_cast<long>(hosts) * o.ranksPerHost <= o.maxRanks; hosts *= 2) {
      const int n = hosts * o.ranksPerHost;
      if (n < 2) continue;
      chorus::TuningInfo info = base;
      info.nranks = n;
      info.nnodes = hosts;
      info.directPossible = hosts == 1 && o.shm;
      info.hierRanksPerHost = hosts > 1 ? o.ranksPerHost : 0;
      if (!o.csv) printf("%7d %6d", n, hosts);
      for (size_t b : o.sizes) {
        const chorus::Decision d = chorus::selectAlgorithm(info, coll, b);
        const double busbw =
            d.us > 0 ? static_cast<double>(b) / (d.us * 1e3) * busFactor(coll, n) : 0;
        std::string algo = chorus::algorithmName(d.algo);
        if (d.algo == chorus::Algorithm::kRing) algo += "/" + std::to_string(d.nchannels);
        if (o.csv)
          printf("%s,%d,%d,%zu,%s,%d,%.6g,%.6g\n", chorus::collectiveName(coll), n, hosts, b,
                 chorus::algorithmName(d.algo), d.nchannels, d.us, busbw);
        else
          printf(" | %-7s %8s %8.3g", algo.c_str(), timeText(d.us).c_str(), busbw);
      }
      if (!o.csv) printf("\n");
    }
    if (!o.csv) printf("\n");
  }
  return 0;
}
