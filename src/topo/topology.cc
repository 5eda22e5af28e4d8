#include "topo/topology.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>

namespace chorus {

bool operator==(const CpuPackage& a, const CpuPackage& b) {
  return a.osIndex == b.osIndex && a.cpus == b.cpus;
}

bool operator==(const NumaNode& a, const NumaNode& b) {
  return a.osIndex == b.osIndex && a.cpus == b.cpus && a.memoryBytes == b.memoryBytes;
}

bool operator==(const CacheSummary& a, const CacheSummary& b) {
  return a.level == b.level && a.type == b.type && a.sizeBytes == b.sizeBytes &&
         a.sharedByPus == b.sharedByPus && a.count == b.count;
}

bool operator==(const PciDevice& a, const PciDevice& b) {
  return a.busId == b.busId && a.vendorId == b.vendorId && a.deviceId == b.deviceId &&
         a.classCode == b.classCode && a.numaNode == b.numaNode && a.linkWidth == b.linkWidth &&
         a.linkSpeedGts == b.linkSpeedGts && a.upstream == b.upstream &&
         a.hostBridge == b.hostBridge;
}

bool operator==(const NetAddress& a, const NetAddress& b) {
  return a.family == b.family && a.address == b.address && a.prefixLength == b.prefixLength;
}

bool operator==(const NetInterface& a, const NetInterface& b) {
  return a.name == b.name && a.up == b.up && a.speedMbps == b.speedMbps && a.mtu == b.mtu &&
         a.addresses == b.addresses && a.pciBusId == b.pciBusId && a.numaNode == b.numaNode &&
         a.loopback == b.loopback && a.isVirtual == b.isVirtual;
}

bool operator==(const IbGid& a, const IbGid& b) {
  return a.index == b.index && a.gid == b.gid && a.type == b.type;
}

bool operator==(const IbPort& a, const IbPort& b) {
  return a.port == b.port && a.state == b.state && a.rateGbps == b.rateGbps &&
         a.linkLayer == b.linkLayer && a.gids == b.gids;
}

bool operator==(const IbDevice& a, const IbDevice& b) {
  return a.name == b.name && a.nodeGuid == b.nodeGuid && a.pciBusId == b.pciBusId &&
         a.numaNode == b.numaNode && a.ports == b.ports;
}

bool operator==(const Gpu& a, const Gpu& b) {
  return a.index == b.index && a.name == b.name && a.pciBusId == b.pciBusId &&
         a.numaNode == b.numaNode && a.p2p == b.p2p && a.nvlinks == b.nvlinks &&
         a.nvswitchLinks == b.nvswitchLinks;
}

bool operator==(const LocalTopology& a, const LocalTopology& b) {
  return a.hostname == b.hostname && a.hostId == b.hostId && a.source == b.source &&
         a.cpuModel == b.cpuModel && a.cores == b.cores && a.pus == b.pus &&
         a.packages == b.packages && a.numaNodes == b.numaNodes && a.caches == b.caches &&
         a.pciDevices == b.pciDevices && a.netInterfaces == b.netInterfaces &&
         a.ibDevices == b.ibDevices && a.gpus == b.gpus;
}

std::string formatCpuList(const std::vector<int>& cpus) {
  std::vector<int> sorted(cpus);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::string out;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] == sorted[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(sorted[i]);
    if (j > i) out += "-" + std::to_string(sorted[j]);
    i = j + 1;
  }
  return out;
}

namespace {

bool readCpuNumber(const std::string& text, size_t* pos, int* value) {
  size_t start = *pos;
  long v = 0;
  while (*pos < text.size() && isdigit(static_cast<unsigned char>(text[*pos]))) {
    v = v * 10 + (text[*pos] - '0');
    if (v > 1 << 20) return false;  // far beyond any kernel's CPU limit
    ++*pos;
  }
  *value = static_cast<int>(v);
  return *pos > start;
}

}  // namespace

bool parseCpuList(const std::string& text, std::vector<int>* cpus) {
  size_t begin = text.find_first_not_of(" \t\n");
  size_t end = text.find_last_not_of(" \t\n");
  cpus->clear();
  if (begin == std::string::npos) return true;
  std::string body = text.substr(begin, end - begin + 1);
  size_t pos = 0;
  for (;;) {
    int first = 0;
    if (!readCpuNumber(body, &pos, &first)) return false;
    int last = first;
    if (pos < body.size() && body[pos] == '-') {
      ++pos;
      if (!readCpuNumber(body, &pos, &last) || last < first) return false;
    }
    for (int c = first; c <= last; ++c) cpus->push_back(c);
    if (pos == body.size()) break;
    if (body[pos] != ',') return false;
    ++pos;
  }
  std::sort(cpus->begin(), cpus->end());
  cpus->erase(std::unique(cpus->begin(), cpus->end()), cpus->end());
  return true;
}

bool isPciBusId(const std::string& text) {
  if (text.size() != 12 || text[4] != ':' || text[7] != ':' || text[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!isxdigit(static_cast<unsigned char>(text[i]))) return false;
  int device = static_cast<int>(strtol(text.substr(8, 2).c_str(), nullptr, 16));
  int function = static_cast<int>(strtol(text.substr(11, 1).c_str(), nullptr, 16));
  return device < 0x20 && function < 8;
}

std::string normalizePciBusId(const std::string& text) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(tolower(static_cast<unsigned char>(c))));
  // CUDA writes "00000000:17:00.0" (a 32-bit domain); keep the low 16 bits like the kernel does.
  size_t firstColon = lower.find(':');
  if (firstColon != std::string::npos && lower.find(':', firstColon + 1) == std::string::npos)
    lower = "0000:" + lower;
  else if (firstColon != std::string::npos && firstColon > 4)
    lower = lower.substr(firstColon - 4);
  else if (firstColon != std::string::npos && firstColon < 4)
    lower = std::string(4 - firstColon, '0') + lower;
  return isPciBusId(lower) ? lower : std::string();
}

int numaNodeOfCpu(const LocalTopology& topo, int cpu) {
  for (const NumaNode& node : topo.numaNodes)
    if (std::binary_search(node.cpus.begin(), node.cpus.end(), cpu)) return node.osIndex;
  return -1;
}

const NumaNode* findNumaNode(const LocalTopology& topo, int osIndex) {
  for (const NumaNode& node : topo.numaNodes)
    if (node.osIndex == osIndex) return &node;
  return nullptr;
}

const PciDevice* findPciDevice(const LocalTopology& topo, const std::string& busId) {
  std::string id = normalizePciBusId(busId);
  if (id.empty()) return nullptr;
  for (const PciDevice& dev : topo.pciDevices)
    if (dev.busId == id) return &dev;
  return nullptr;
}

int numaNodeOfPci(const LocalTopology& topo, const std::string& busId) {
  std::string id = normalizePciBusId(busId);
  if (id.empty()) return -1;
  const PciDevice* dev = findPciDevice(topo, id);
  if (dev != nullptr && dev->numaNode >= 0) return dev->numaNode;
  for (const Gpu& g : topo.gpus)
    if (g.pciBusId == id && g.numaNode >= 0) return g.numaNode;
  for (const NetInterface& n : topo.netInterfaces)
    if (n.pciBusId == id && n.numaNode >= 0) return n.numaNode;
  for (const IbDevice& d : topo.ibDevices)
    if (d.pciBusId == id && d.numaNode >= 0) return d.numaNode;
  return -1;
}

const char* pciDistanceName(PciDistance d) {
  switch (d) {
    case PciDistance::kSelf:
      return "X";
    case PciDistance::kPix:
      return "PIX";
    case PciDistance::kPxb:
      return "PXB";
    case PciDistance::kPhb:
      return "PHB";
    case PciDistance::kNode:
      return "NODE";
    case PciDistance::kSys:
      return "SYS";
    case PciDistance::kUnknown:
      return "unknown";
  }
  return "?";
}

PciDistance pciDistance(const LocalTopology& topo, const std::string& busA,
                        const std::string& busB) {
  const PciDevice* a = findPciDevice(topo, busA);
  const PciDevice* b = findPciDevice(topo, busB);
  if (a == nullptr || b == nullptr) return PciDistance::kUnknown;
  if (a == b) return PciDistance::kSelf;
  // The lowest bridge both sit below: scanning a's chain nearest first finds it first.
  for (size_t i = 0; i < a->upstream.size(); ++i) {
    auto it = std::find(b->upstream.begin(), b->upstream.end(), a->upstream[i]);
    if (it == b->upstream.end()) continue;
    size_t j = static_cast<size_t>(it - b->upstream.begin());
    return i <= 1 && j <= 1 ? PciDistance::kPix : PciDistance::kPxb;
  }
  if (!a->hostBridge.empty() && a->hostBridge == b->hostBridge) return PciDistance::kPhb;
  int numaA = numaNodeOfPci(topo, a->busId);
  int numaB = numaNodeOfPci(topo, b->busId);
  if (numaA >= 0 && numaA == numaB) return PciDistance::kNode;
  if ((numaA < 0 || numaB < 0) && topo.numaNodes.size() <= 1) return PciDistance::kNode;
  return PciDistance::kSys;
}

namespace {

bool usable(const NetInterface& n) {
  return n.up && !n.loopback && !n.isVirtual;
}

int effectiveNuma(const LocalTopology& topo, const NetInterface& n) {
  if (n.numaNode >= 0) return n.numaNode;
  return n.pciBusId.empty() ? -1 : numaNodeOfPci(topo, n.pciBusId);
}

// Picks the candidate with the smallest (rank, -speed, name).
template <class T, class RankFn, class SpeedFn>
const T* pickBest(const std::vector<T>& all, RankFn rank, SpeedFn speed) {
  const T* best = nullptr;
  std::tuple<int, double, std::string> bestKey;
  for (const T& item : all) {
    int r = rank(item);
    if (r < 0) continue;
    auto key = std::make_tuple(r, -speed(item), item.name);
    if (best == nullptr || key < bestKey) {
      best = &item;
      bestKey = key;
    }
  }
  return best;
}

}  // namespace

const NetInterface* nearestNetInterface(const LocalTopology& topo, int numaNode) {
  return pickBest(
      topo.netInterfaces,
      [&](const NetInterface& n) {
        if (!usable(n)) return -1;
        if (numaNode < 0) return 0;
        int node = effectiveNuma(topo, n);
        return node == numaNode ? 0 : node < 0 ? 1 : 2;
      },
      [](const NetInterface& n) { return static_cast<double>(n.speedMbps); });
}

const NetInterface* nearestNetInterfaceToCpus(const LocalTopology& topo,
                                              const std::vector<int>& cpus) {
  std::map<int, int> perNode;
  for (int cpu : cpus) {
    int node = numaNodeOfCpu(topo, cpu);
    if (node >= 0) ++perNode[node];
  }
  int bestNode = -1;
  int bestCount = 0;
  for (const auto& entry : perNode) {
    if (entry.second > bestCount) {
      bestNode = entry.first;
      bestCount = entry.second;
    }
  }
  return nearestNetInterface(topo, bestNode);
}

const NetInterface* nearestNetInterfaceToPci(const LocalTopology& topo, const std::string& busId) {
  return pickBest(
      topo.netInterfaces,
      [&](const NetInterface& n) {
        if (!usable(n)) return -1;
        if (n.pciBusId.empty()) return static_cast<int>(PciDistance::kUnknown);
        return static_cast<int>(pciDistance(topo, n.pciBusId, busId));
      },
      [](const NetInterface& n) { return static_cast<double>(n.speedMbps); });
}

const IbDevice* nearestIbDeviceToPci(const LocalTopology& topo, const std::string& busId) {
  auto activeRate = [](const IbDevice& d) {
    double rate = -1;
    for (const IbPort& p : d.ports)
      if (p.state == "ACTIVE") rate = std::max(rate, p.rateGbps);
    return rate;
  };
  return pickBest(
      topo.ibDevices,
      [&](const IbDevice& d) {
        if (activeRate(d) < 0) return -1;
        if (d.pciBusId.empty()) return static_cast<int>(PciDistance::kUnknown);
        return static_cast<int>(pciDistance(topo, d.pciBusId, busId));
      },
      activeRate);
}

bool nvlinkConnected(const LocalTopology& topo, int a, int b) {
  if (a == b) return false;
  const Gpu* ga = nullptr;
  const Gpu* gb = nullptr;
  for (const Gpu& g : topo.gpus) {
    if (g.index == a) ga = &g;
    if (g.index == b) gb = &g;
  }
  if (ga == nullptr || gb == nullptr) return false;
  auto direct = [](const Gpu& from, int to) {
    return to >= 0 && static_cast<size_t>(to) < from.nvlinks.size() && from.nvlinks[to] > 0;
  };
  return direct(*ga, b) || direct(*gb, a) || (ga->nvswitchLinks > 0 && gb->nvswitchLinks > 0);
}

}  // namespace chorus
