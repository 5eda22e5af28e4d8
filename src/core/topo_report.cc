#include "core/topo_report.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include <memory>
#include <mutex>

#include "common/socket.h"
#include "common/status.h"
#include "topo/discover.h"

namespace chorus {

namespace {

bool sameAddress(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET)
    return memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                  &reinterpret_cast<const sockaddr_in*>(&b)->sin_addr, sizeof(in_addr)) == 0;
  if (a->sa_family == AF_INET6)
    return memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                  &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

int readInt(const std::string& path, int fallback) {
  std::ifstream f(path);
  long v = 0;
  if (!(f >> v)) return fallback;
  return static_cast<int>(v);
}

// Mb/s of a link: the speed, or -1 when the link does not say (virtual links report -1 too).
int linkSpeed(const std::vector<PeerInfo>& peers, int a, int b) {
  int sa = peers[a].ifSpeedMbps, sb = peers[b].ifSpeedMbps;
  if (sa <= 0) return sb;
  if (sb <= 0) return sa;
  return sa < sb ? sa : sb;
}

const char* linkKind(const std::vector<PeerInfo>& peers, int a, int b) {
  if (a == b) return "X";
  return useShm(peers[a], peers[b]) ? "SHM" : "NET";
}

double linkGBps(const TopoReportInput& in, int a, int b) {
  const std::vector<PeerInfo>& peers = *in.peers;
  if (a == b) return 0;
  if (useShm(peers[a], peers[b])) return in.shmGBps;
  int mbps = linkSpeed(peers, a, b);
  return mbps > 0 ? mbps / 8000.0 : in.netGBps;
}

int hostOf(const TopoReportInput& in, int rank) {
  for (size_t h = 0; h < in.hosts->size(); ++h)
    for (int r : (*in.hosts)[h])
      if (r == rank) return static_cast<int>(h);
  return -1;
}

}  // namespace

Result<const LocalTopology*> processTopology() {
  static std::mutex mutex;
  static std::unique_ptr<LocalTopology> topo;
  static Status failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (!topo && failure.isOk()) {
    Result<LocalTopology> found = localTopologyFromEnvironment();
    if (found.isOk())
      topo.reset(new LocalTopology(found.take()));
    else
      failure = found.status();
  }
  if (!failure.isOk()) return failure;
  return static_cast<const LocalTopology*>(topo.get());
}

void describeExtraInterfaces(const std::vector<std::string>& preferred, PeerInfo* me) {
  me->extraAddrs = 0;
  if (SocketAddress(me->address).isLoopback()) return;
  Result<std::vector<InterfaceAddress>> selected = findInterfaces();
  if (!selected.isOk()) return;
  std::vector<InterfaceAddress> list = selected.take();
  auto rank = [&](const InterfaceAddress& n) {
    return std::find(preferred.begin(), preferred.end(), n.name) - preferred.begin();
  };
  std::stable_sort(
      list.begin(), list.end(),
      [&](const InterfaceAddress& a, const InterfaceAddress& b) { return rank(a) < rank(b); });
  for (const InterfaceAddress& n : list) {
    if (me->extraAddrs == kMaxExtraAddrs) break;
    if (n.loopback || n.family != me->address.ss_family || n.name == me->ifname) continue;
    me->extraAddr[me->extraAddrs] = n.addr;
    me->extraMask[me->extraAddrs] = n.netmask;
    ++me->extraAddrs;
  }
}

std::vector<int> processCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::vector<std::string> interfacesByLocality(const LocalTopology& topo,
                                              const std::vector<int>& cpus) {
  std::map<int, int> perNode;
  for (int cpu : cpus) {
    int node = numaNodeOfCpu(topo, cpu);
    if (node >= 0) ++perNode[node];
  }
  int home = -1, most = 0;
  for (const auto& e : perNode)
    if (e.second > most) {
      home = e.first;
      most = e.second;
    }
  std::vector<const NetInterface*> usable;
  for (const NetInterface& n : topo.netInterfaces)
    if (n.up && !n.loopback && !n.isVirtual) usable.push_back(&n);
  auto group = [&](const NetInterface* n) {
    int node = n->numaNode >= 0 ? n->numaNode : numaNodeOfPci(topo, n->pciBusId);
    return home < 0 || node == home ? 0 : node < 0 ? 1 : 2;
  };
  std::stable_sort(usable.begin(), usable.end(), [&](const NetInterface* a, const NetInterface* b) {
    if (group(a) != group(b)) return group(a) < group(b);
    return a->speedMbps > b->speedMbps;
  });
  std::vector<std::string> names;
  for (const NetInterface* n : usable) names.push_back(n->name);
  return names;
}

void describeLocalPlacement(const sockaddr_storage& address, const LocalTopology& topo,
                            PeerInfo* me) {
  memset(me->ifname, 0, sizeof(me->ifname));
  me->ifSpeedMbps = -1;
  me->numaNode = -1;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_name != nullptr && sameAddress(i->ifa_addr, address)) {
        snprintf(me->ifname, sizeof(me->ifname), "%s", i->ifa_name);
        break;
      }
    }
    freeifaddrs(list);
  }
  if (me->ifname[0] != '\0') {
    // The speed a virtual interface (veth, bridge, tunnel) reports is nominal, not a limit: a
    // veth pair says 10000 Mb/s and carries what the CPUs can push. Such a link stays unknown.
    bool isVirtual = false;
    for (const NetInterface& n : topo.netInterfaces) {
      if (n.name != me->ifname) continue;
      isVirtual = n.isVirtual;
      if (n.speedMbps > 0 && !isVirtual) me->ifSpeedMbps = static_cast<int>(n.speedMbps);
    }
    if (me->ifSpeedMbps < 0 && !isVirtual)
      me->ifSpeedMbps = readInt(std::string("/sys/class/net/") + me->ifname + "/speed", -1);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      me->numaNode = numaNodeOfCpu(topo, cpu);
      break;
    }
  }
}

std::string topologyText(const TopoReportInput& in) {
  const std::vector<PeerInfo>& peers = *in.peers;
  const int n = static_cast<int>(peers.size());
  std::string out = formatString("# %d rank%s on %zu host%s\n", n, n == 1 ? "" : "s",
                                 in.hosts->size(), in.hosts->size() == 1 ? "" : "s");
  for (size_t h = 0; h < in.hosts->size(); ++h) {
    out += formatString("host %zu (id %016llx):", h,
                        static_cast<unsigned long long>(peers[(*in.hosts)[h][0]].hostId));
    for (int r : (*in.hosts)[h]) {
      const PeerInfo& p = peers[r];
      out += formatString(" rank %d (pid %d, numa %d, %s %s%s)", r, p.pid, p.numaNode,
                          p.ifname[0] ? p.ifname : "?", addressToString(p.address).c_str(),
                          p.ifSpeedMbps > 0 ? formatString(" %d Mb/s", p.ifSpeedMbps).c_str() : "");
      out += ";";
    }
    out += "\n";
  }
  out += "\n# transport between ranks (X: self, SHM: shared memory, NET: TCP sockets)\n      ";
  for (int b = 0; b < n; ++b) out += formatString("%6s", formatString("r%d", b).c_str());
  out += "\n";
  for (int a = 0; a < n; ++a) {
    out += formatString("%-6s", formatString("r%d", a).c_str());
    for (int b = 0; b < n; ++b) out += formatString("%6s", linkKind(peers, a, b));
    out += "\n";
  }
  out += "\n# expected bandwidth between ranks, GB/s (NET: link speed when known)\n      ";
  for (int b = 0; b < n; ++b) out += formatString("%6s", formatString("r%d", b).c_str());
  out += "\n";
  for (int a = 0; a < n; ++a) {
    out += formatString("%-6s", formatString("r%d", a).c_str());
    for (int b = 0; b < n; ++b)
      out += a == b ? formatString("%6s", "-") : formatString("%6.1f", linkGBps(in, a, b));
    out += "\n";
  }
  out += "\n# expected latency of one hand-off between ranks, us\n      ";
  for (int b = 0; b < n; ++b) out += formatString("%6s", formatString("r%d", b).c_str());
  out += "\n";
  for (int a = 0; a < n; ++a) {
    out += formatString("%-6s", formatString("r%d", a).c_str());
    for (int b = 0; b < n; ++b)
      out += a == b ? formatString("%6s", "-")
                    : formatString("%6.1f",
                                   useShm(peers[a], peers[b]) ? in.shmLatencyUs : in.netLatencyUs);
    out += "\n";
  }
  const std::vector<int>& ring = *in.ring;
  int crossings = 0;
  out += "\n# ring (every channel):";
  for (size_t i = 0; i < ring.size(); ++i) {
    out += formatString(" %d", ring[i]);
    crossings += hostOf(in, ring[i]) != hostOf(in, ring[(i + 1) % ring.size()]);
  }
  out +=
      formatString("  (crosses between hosts %d time%s)\n", crossings, crossings == 1 ? "" : "s");
  for (size_t t = 0; t < in.treeParent.size(); ++t) {
    int cross = 0;
    out += formatString("# tree %zu (rank<-parent):", t);
    for (int r = 0; r < n; ++r) {
      int p = in.treeParent[t][r];
      out += p < 0 ? formatString(" %d<-root", r) : formatString(" %d<-%d", r, p);
      if (p >= 0) cross += hostOf(in, r) != hostOf(in, p);
    }
    out += formatString("  (%d edge%s between hosts)\n", cross, cross == 1 ? "" : "s");
  }
  return out;
}

std::string topologyDot(const TopoReportInput& in) {
  const std::vector<PeerInfo>& peers = *in.peers;
  std::string out = "digraph chorus {\n  node [shape=box];\n";
  for (size_t h = 0; h < in.hosts->size(); ++h) {
    out += formatString("  subgraph cluster_host%zu {\n    label=\"host %zu\";\n", h, h);
    for (int r : (*in.hosts)[h])
      out += formatString("    r%d [label=\"rank %d\\n%s\"];\n", r, r,
                          peers[r].ifname[0] ? peers[r].ifname : "");
    out += "  }\n";
  }
  const std::vector<int>& ring = *in.ring;
  for (size_t i = 0; ring.size() > 1 && i < ring.size(); ++i) {
    int a = ring[i], b = ring[(i + 1) % ring.size()];
    out += formatString("  r%d -> r%d [color=blue, label=\"ring %s\"];\n", a, b,
                        linkKind(peers, a, b));
  }
  static const char* colors[] = {"darkgreen", "red"};
  for (size_t t = 0; t < in.treeParent.size() && t < 2; ++t)
    for (size_t r = 0; r < in.treeParent[t].size(); ++r)
      if (in.treeParent[t][r] >= 0)
        out += formatString("  r%d -> r%zu [color=%s, style=dashed, label=\"tree %zu\"];\n",
                            in.treeParent[t][r], r, colors[t], t);
  out += "}\n";
  return out;
}

}  // namespace chorus
