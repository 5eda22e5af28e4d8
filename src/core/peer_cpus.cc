#include "core/peer_cpus.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace chorus {

namespace {

// Cores per rank on one machine (the ranks sharing a kernel, whichever host each is to the
// transports): the fewest any of its ranks may run on, and no more than its share of all the
// CPUs they may run on together (ranks bound to CPUs of their own, as a launcher binds them,
// each have one core; four ranks on two cores half of one, however they are bound). Without
// complete masks, the fewest CPUs any rank may use, shared by all.
double machineCoresPerRank(const std::vector<PeerInfo>& peers, uint64_t machineId) {
  int local = 0, fewest = 1 << 30;
  bool complete = true;
  uint64_t all[kCpuMaskBits / 64] = {};
  for (const PeerInfo& p : peers) {
    if (p.machineId != machineId) continue;
    ++local;
    fewest = std::min(fewest, std::max(1, static_cast<int>(p.cpus)));
    complete = complete && p.cpuMaskComplete != 0;
    for (int w = 0; w < kCpuMaskBits / 64; ++w) all[w] |= p.cpuMask[w];
  }
  if (local == 0) return 1e9;
  if (!complete) return static_cast<double>(fewest) / local;
  int together = 0;
  for (uint64_t w : all) together += __builtin_popcountll(w);
  return std::min(static_cast<double>(fewest), static_cast<double>(std::max(1, together)) / local);
}

}  // namespace

void describeCpus(PeerInfo* me) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::memset(me->cpuMask, 0, sizeof(me->cpuMask));
  me->cpuMaskComplete = 0;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    me->cpus = n > 0 ? static_cast<int>(n) : 1;
    return;
  }
  me->cpus = CPU_COUNT(&set);
  int inMask = 0;
  for (int cpu = 0; cpu < kCpuMaskBits && cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    me->cpuMask[cpu / 64] |= uint64_t{1} << (cpu % 64);
    ++inMask;
  }
  me->cpuMaskComplete = inMask == me->cpus ? 1 : 0;
}

double fewestCoresPerRank(const std::vector<PeerInfo>& peers) {
  std::vector<uint64_t> machines;
  double fewest = 1e9;
  for (const PeerInfo& p : peers)
    if (std::find(machines.begin(), machines.end(), p.machineId) == machines.end()) {
      machines.push_back(p.machineId);
      fewest = std::min(fewest, machineCoresPerRank(peers, p.machineId));
    }
  return fewest;
}

}  // namespace chorus
