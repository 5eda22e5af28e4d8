#include "algorithms/selector.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "algorithms/cost_model.h"
#include "algorithms/rd_allreduce.h"
#include "common/param.h"

namespace chorus {

namespace {

double transferUs(double bytes, double gbps) {
  return bytes / (gbps * 1e3);
}

int ceilLog2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

// What a hand-off costs beyond the link when ranks outnumber cores: the peer is often not
// running and must be woken and scheduled first (through the network, its proxy thread and
// socket too: net_wake_us), after the other ranks on its core, 1 / coresPerRank - 1 of them
// (a ring step at 8 B measured 1, 2 and 2.4 times the 2-a-core wait with 2, 3 and 4 ranks a
// core, over shared memory and TCP alike).
double oversubscribedUs(const TuningInfo& info, const CostModel& m, bool net = false) {
  if (info.coresPerRank >= 1.0) return 0.0;
  return (1.0 / info.coresPerRank - 1.0) * (net ? m.netWakeUs : m.wakeUs);
}

// The share of a core each rank turns into throughput when ranks outnumber cores: copies slow
// down alike, and switching between the ranks (their caches, their sockets) costs some more,
// oversub_share at two ranks a core (where the calibration measures it) and that fraction again
// with each halving of a rank's part (8 ranks on 2 cores measured 0.71-0.73 of the time
// predicted with the fraction once, over shared memory and across namespaces alike).
double cpuShare(const TuningInfo& info, const CostModel& m) {
  if (info.coresPerRank >= 1.0) return 1.0;
  return info.coresPerRank *
         std::pow(std::fmin(1.0, m.oversubShare), std::log2(1.0 / info.coresPerRank));
}

// Moving `bytes` at gbps, for a call of nccl-tests size s, where each byte moved is `traffic`
// bytes read or written: while the buffers of the host's ranks (an input and an output of about
// s each) fit in the caches, at gbps; the share that does not fit goes no faster than a core
// streams from memory.
double streamUs(const TuningInfo& info, double bytes, double gbps, double s, const CostModel& m,
                double traffic = 1.0) {
  const double buffers = 2.0 * std::max(1, info.localRanks) * s;
  const double cache = m.cacheMiB * 1024 * 1024;
  const double hit = buffers <= cache ? 1.0 : cache / buffers;
  const double beyond = std::fmin(gbps, m.dramGBps * cpuShare(info, m) / traffic);
  return hit * transferUs(bytes, gbps) + (1 - hit) * transferUs(bytes, beyond);
}

bool usesNetwork(const TuningInfo& info) {
  return info.nnodes > 1 || !info.shm;
}

double stepUs(const TuningInfo& info, const CostModel& m) {
  const bool net = usesNetwork(info);
  return (net ? m.netStepUs : m.shmStepUs) + oversubscribedUs(info, m, net);
}

// Whether hand-offs mix two kinds: several hosts, each with several ranks sharing memory. The
// ring and the tree follow the hosts (topo_graph.h), so only some of their hops cross the
// network.
bool mixedHops(const TuningInfo& info) {
  return info.shm && info.nnodes > 1 && info.nnodes < info.nranks;
}

// The mean cost of a ring hop: of every nranks hops of the host-shaped ring, one per host
// crosses the network and the rest are shared-memory hand-offs.
double ringHopUs(const TuningInfo& info, const CostModel& m) {
  if (!mixedHops(info)) return stepUs(info, m);
  const double net = static_cast<double>(info.nnodes) / info.nranks;
  return net * (m.netStepUs + oversubscribedUs(info, m, true)) +
         (1 - net) * (m.shmStepUs + oversubscribedUs(info, m));
}

// From the root to the deepest rank of a tree: over one host or one rank per host the double
// binary tree's depth; over hosts of several ranks, the binary tree over hosts (one network hop
// per level) with every host on the way passed through its chain of ranks.
double treeDepthUs(const TuningInfo& info, const CostModel& m) {
  if (!mixedHops(info)) return ceilLog2(info.nranks) * stepUs(info, m);
  const int levels = ceilLog2(info.nnodes);
  return levels * (m.netStepUs + oversubscribedUs(info, m, true)) +
         (levels + 1) * (info.localRanks - 1) * (m.shmStepUs + oversubscribedUs(info, m));
}

// Cores one ring channel keeps busy: its thread, and through sockets as much again for the
// kernel's TCP work (copies, checksums, acknowledgements) on both ends; a net device does that
// work itself.
double coresPerChannel(const TuningInfo& info) {
  return usesNetwork(info) && !info.netDevice ? 2.0 : 1.0;
}

// What the network between hosts carries for all of a rank's channels together.
double netLinkGBps(const TuningInfo& info, const CostModel& m) {
  return info.netLinkGBps > 0 ? info.netLinkGBps : m.netMaxGBps;
}

// Throughput of a ring over nchannels (or of the tree and recursive doubling, with one):
// channels run on their own threads, so they add up only while each has its cores; the network
// or memory caps the sum. pipeShare: what a pipeline through every rank keeps of the sockets'
// CPU work when ranks outnumber cores (net_ring_share for a ring of three ranks or more; 1 for
// the others).
double ringGBps(const TuningInfo& info, const CostModel& m, int nchannels, double pipeShare = 1.0) {
  double cores = std::floor(info.coresPerRank / coresPerChannel(info));
  double parallel = std::fmax(1.0, std::fmin(static_cast<double>(nchannels), cores));
  const double copies = std::fmin(parallel * m.shmGBps, m.shmMaxGBps) * cpuShare(info, m);
  if (!usesNetwork(info)) return copies;
  // Through a net device each channel's reduce-copy fills registered memory the device sends
  // from: the copies, capped by the devices' speed.
  if (info.netDevice) return std::fmin(copies, netLinkGBps(info, m));
  // Through sockets the streams and the rank's cap on them are CPU work (the kernel's TCP work
  // with it), slowed down alike when ranks share cores; the link caps the sum whatever the
  // cores do.
  double cpu = std::fmin(parallel * m.netGBps, m.netMaxGBps) * cpuShare(info, m);
  if (info.coresPerRank < 1.0) cpu *= pipeShare;
  return std::fmin(cpu, netLinkGBps(info, m));
}

// The most ring channels whose throughput still adds up (cores, or the network's or memory's
// cap).
int usefulChannels(const TuningInfo& info, const CostModel& m) {
  const double capped = !usesNetwork(info) ? m.shmMaxGBps / m.shmGBps
                        : info.netDevice ? std::fmin(netLinkGBps(info, m), m.shmMaxGBps) / m.shmGBps
                                         : m.netMaxGBps / m.netGBps;
  return std::max(
      1, std::min(static_cast<int>(std::ceil(capped)),
                  static_cast<int>(std::floor(info.coresPerRank / coresPerChannel(info)))));
}

double launchUs(const CostModel& m, int nchannels) {
  return (nchannels - 1) * m.channelLaunchUs;
}

// The hierarchical algorithm's phases, each priced by the selection its own communicator makes
// (hierLocalInfo / hierCrossInfo): within hosts, across hosts on 1/L of the bytes, within hosts
// again; all-gather and reduce-scatter also reorder the blocks once in memory.
double hierUs(const TuningInfo& info, Collective coll, double s, const CostModel& m) {
  const int local = info.hierRanksPerHost;
  if (local < 2 || info.nnodes < 2 || local * info.nnodes != info.nranks) return -1;
  const TuningInfo in = hierLocalInfo(info), across = hierCrossInfo(info, m);
  auto best = [&m](const TuningInfo& i, Collective c, double bytes) {
    return selectAlgorithm(i, c, static_cast<size_t>(bytes), m).us;
  };
  const double reorder = streamUs(info, 2 * s, m.memGBps * cpuShare(info, m), s, m);
  switch (coll) {
    case Collective::kAllReduce:
      return best(in, Collective::kReduceScatter, s) + best(across, coll, s / local) +
             best(in, Collective::kAllGather, s);
    case Collective::kAllGather:
      return best(across, coll, s / local) + best(in, coll, s) + reorder;
    case Collective::kReduceScatter:
      return reorder + best(in, coll, s) + best(across, coll, s / local);
    case Collective::kBroadcast:
      return best(across, coll, s) + best(in, coll, s);
    default:
      return -1;
  }
}

}  // namespace

TuningInfo hierLocalInfo(const TuningInfo& info) {
  TuningInfo local = info;
  local.nranks = info.hierRanksPerHost;
  local.nnodes = 1;
  local.localRanks = info.hierRanksPerHost;
  local.directPossible = info.shm && local.nranks > 1;
  local.hierRanksPerHost = 0;
  return local;
}

TuningInfo hierCrossInfo(const TuningInfo& info, const CostModel& m) {
  TuningInfo cross = info;
  cross.nranks = info.nnodes;
  cross.localRanks = 1;
  cross.directPossible = false;
  cross.hierRanksPerHost = 0;
  // Every rank of a host crosses at once: each gets its share of the host's link.
  const double host =
      info.netDevice && info.netHostGBps > 0 ? info.netHostGBps : netLinkGBps(info, m);
  cross.netLinkGBps = host / std::max(1, info.hierRanksPerHost);
  cross.netHostGBps = 0;
  return cross;
}

double predictUs(const TuningInfo& info, Collective coll, Algorithm algo, int nchannels,
                 size_t bytes, const CostModel& m) {
  const int n = info.nranks;
  const double s = static_cast<double>(bytes);
  if (n <= 1) return algo == Algorithm::kRing ? streamUs(info, 2 * s, m.memGBps, s, m) : -1;
  const bool channelled = algo == Algorithm::kRing;
  if (!channelled && nchannels != 1) return -1;
  const double step = stepUs(info, m);
  switch (algo) {
    case Algorithm::kRing: {
      const double hop = ringHopUs(info, m);
      // Two ranks' ring is an exchange: no byte passes a third rank on its way.
      double bw = ringGBps(info, m, nchannels, n > 2 ? std::fmin(1.0, m.netRingShare) : 1.0);
      double launch = launchUs(m, nchannels);
      switch (coll) {
        case Collective::kAllReduce:
          return 2 * (n - 1) * hop +
                 streamUs(info, 2.0 * (n - 1) / n * s, bw, s, m, m.ringTraffic) + launch;
        case Collective::kAllGather:
        case Collective::kReduceScatter:
          return (n - 1) * hop + streamUs(info, 1.0 * (n - 1) / n * s, bw, s, m, m.ringTraffic) +
                 launch;
        case Collective::kBroadcast:
        case Collective::kReduce:
          return (n - 1) * hop + streamUs(info, s, bw, s, m, m.ringTraffic) + launch;
        default:
          return -1;
      }
    }
    case Algorithm::kTree: {
      if (coll != Collective::kAllReduce) return -1;
      // Up and down both trees, whose steps interleave on one thread; the busiest rank moves
      // about twice the buffer.
      double bw = ringGBps(info, m, 1) / std::fmax(1.0, m.treeCost);
      return 4 * treeDepthUs(info, m) +
             streamUs(info, (n > 2 ? 2.0 : 1.0) * s, bw, s, m, m.ringTraffic);
    }
    case Algorithm::kRd: {
      // For paths through the network. Within a host the direct algorithms serve small calls,
      // and with more ranks than cores an exchange, which needs both partners running at once,
      // measured slower than one-shot (4 ranks on 2 cores: 14-18 against 10 us at 8 B).
      if (coll != Collective::kAllReduce || !usesNetwork(info)) return -1;
      // log2(p) exchanges of the whole buffer (two more when n is not a power of two p), each
      // rank reducing the whole buffer every time: fewer latencies than any other algorithm,
      // more bytes than the ring once n > 2.
      const int pw = rdPowerOfTwo(n);
      const int steps = ceilLog2(pw) + (n > pw ? 2 : 0);
      const double mem = m.memGBps * cpuShare(info, m);
      return steps * (step + streamUs(info, s, ringGBps(info, m, 1), s, m, m.ringTraffic) +
                      streamUs(info, s, mem, s, m));
    }
    case Algorithm::kOneShot:
    case Algorithm::kTwoShot: {
      if (coll != Collective::kAllReduce || !info.directPossible) return -1;
      double chunks = std::fmax(1.0, std::ceil(s / static_cast<double>(info.directChunkBytes)));
      // Every rank waits for all peers to publish: each sync needs every peer scheduled, the
      // (n - 1)(1 - cores per rank) not running woken once each (one-shot at 8 B measured 1,
      // 2.1 and 3.3 times the 4-rank wait on 4, 6 and 8 ranks of 2 cores; this says 1, 2.2, 3.5).
      const double asleep = info.coresPerRank < 1.0 ? (n - 1) * (1.0 - info.coresPerRank) : 0.0;
      double sync = m.directSyncUs + asleep * m.wakeUs;
      const double mem = m.memGBps * cpuShare(info, m);
      if (algo == Algorithm::kOneShot)  // stage (read + write), read n inputs, write the output
        return chunks * sync + streamUs(info, (3.0 + n) * s, mem, s, m);
      // Stage, reduce one share of every input, then gather every share.
      return chunks * 2 * sync + streamUs(info, (5.0 + 1.0 / n) * s, mem, s, m);
    }
    case Algorithm::kHier:
      return hierUs(info, coll, s, m);
    default:
      return -1;
  }
}

Decision selectAlgorithm(const TuningInfo& info, Collective coll, size_t bytes,
                         const CostModel& model) {
  Decision d;
  int lo = info.minChannels < 1 ? 1 : info.minChannels;
  int hi = info.maxChannels < lo ? lo : info.maxChannels;
  int bestAllowed = -1, bestAny = -1;
  for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a) {
    Algorithm algo = static_cast<Algorithm>(a);
    Prediction p;
    p.algo = algo;
    p.us = -1;
    int first = algo == Algorithm::kRing ? lo : 1;
    int last = algo == Algorithm::kRing ? hi : 1;
    // Channels past the point where throughput stops growing only add launch cost.
    if (last > first) last = std::max(first, std::min(last, usefulChannels(info, model)));
    for (int ch = first; ch <= last; ++ch) {
      double us = predictUs(info, coll, algo, ch, bytes, model);
      if (us >= 0 && (p.us < 0 || us < p.us)) {
        p.us = us;
        p.nchannels = ch;
      }
    }
    if (p.us < 0) continue;
    p.allowed = info.allowed.allows(algo);
    int i = d.nalternatives++;
    d.alternatives[i] = p;
    if (bestAny < 0 || p.us < d.alternatives[bestAny].us) bestAny = i;
    if (p.allowed && (bestAllowed < 0 || p.us < d.alternatives[bestAllowed].us)) bestAllowed = i;
  }
  int pick = bestAllowed >= 0 ? bestAllowed : bestAny;
  d.overrideIgnored = bestAllowed < 0;
  if (pick >= 0) {
    d.algo = d.alternatives[pick].algo;
    d.nchannels = d.alternatives[pick].nchannels;
    d.us = d.alternatives[pick].us;
  }
  return d;
}

namespace {

Status readChannelParam(const char* name, int fallback, int* out) {
  ParamValue v = paramRaw(name);
  if (!v.isSet || v.value.empty()) {
    *out = fallback;
    return Status::ok();
  }
  errno = 0;
  char* end = nullptr;
  long value = strtol(v.value.c_str(), &end, 10);
  if (errno != 0 || end == v.value.c_str() || *end != '\0' || value < 1 || value > kMaxChannels)
    return invalidArgument("%s=\"%s\" is not a channel count in [1, %d]", v.source.c_str(),
                           v.value.c_str(), kMaxChannels);
  *out = static_cast<int>(value);
  return Status::ok();
}

}  // namespace

Status channelBounds(int* minChannels, int* maxChannels) {
  CHORUS_TRY(readChannelParam("MIN_CHANNELS", 1, minChannels));
  CHORUS_TRY(readChannelParam("MAX_CHANNELS", kMaxChannels, maxChannels));
  if (*minChannels > *maxChannels)
    return invalidArgument("%s=%d exceeds %s=%d", paramRaw("MIN_CHANNELS").source.c_str(),
                           *minChannels, paramRaw("MAX_CHANNELS").source.c_str(), *maxChannels);
  return Status::ok();
}

std::string describeAlternatives(const Decision& d) {
  std::string out;
  for (int i = 0; i < d.nalternatives; ++i) {
    const Prediction& p = d.alternatives[i];
    char buf[96];
    if (p.algo == Algorithm::kRing)
      snprintf(buf, sizeof(buf), "%sring/%d %.1f us%s", out.empty() ? "" : ", ", p.nchannels, p.us,
               p.allowed ? "" : " (excluded)");
    else
      snprintf(buf, sizeof(buf), "%s%s %.1f us%s", out.empty() ? "" : ", ", algorithmName(p.algo),
               p.us, p.allowed ? "" : " (excluded)");
    out += buf;
  }
  return out;
}

}  // namespace chorus
