#include "transport/device_path.h"

#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "common/param.h"

namespace chorus {

const char* devicePathName(DevicePathKind kind) {
  switch (kind) {
    case DevicePathKind::kP2pSameGpu:
      return "P2P/same-GPU";
    case DevicePathKind::kP2pNvlink:
      return "P2P/NVLink";
    case DevicePathKind::kP2pPcie:
      return "P2P/PCIe";
    case DevicePathKind::kP2pStaged:
      return "P2P/staged";
    case DevicePathKind::kShm:
      return "SHM";
    case DevicePathKind::kSocket:
      return "NET/socket";
  }
  return "?";
}

namespace {

constexpr const char* kLevelNames[] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS"};
// NCCL_P2P_LEVEL's numbers from before it took names (NCCL's levelsOldToNew).
constexpr P2pLevel kLegacyLevels[] = {P2pLevel::kLoc, P2pLevel::kPix, P2pLevel::kPxb,
                                      P2pLevel::kPhb, P2pLevel::kSys, P2pLevel::kSys};

}  // namespace

PciDistance farthestPcieDistance(P2pLevel level) {
  switch (level) {
    case P2pLevel::kLoc:
    case P2pLevel::kNvl:
      return PciDistance::kSelf;
    case P2pLevel::kPix:
      return PciDistance::kPix;
    case P2pLevel::kPxb:
      return PciDistance::kPxb;
    case P2pLevel::kPhb:
      return PciDistance::kNode;
    case P2pLevel::kSys:
      return PciDistance::kSys;
  }
  return PciDistance::kSelf;
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// The bus id as sent: the buffer need not end in a NUL.
std::string busIdOf(const DeviceEndpoint& e) {
  return normalizePciBusId(std::string(e.busId, strnlen(e.busId, sizeof(e.busId))));
}

bool endpointLess(const DeviceEndpoint& a, const DeviceEndpoint& b) {
  return std::make_tuple(a.hostId, busIdOf(a), a.pid, a.cudaDev) <
         std::make_tuple(b.hostId, busIdOf(b), b.pid, b.cudaDev);
}

bool sameGpu(const DeviceEndpoint& a, const DeviceEndpoint& b) {
  std::string busA = busIdOf(a), busB = busIdOf(b);
  if (!busA.empty() && !busB.empty()) return busA == busB;
  return a.pid == b.pid && a.cudaDev == b.cudaDev;
}

const Gpu* findGpu(const LocalTopology& topo, const DeviceEndpoint& e) {
  std::string bus = busIdOf(e);
  for (const Gpu& g : topo.gpus)
    if (bus.empty() ? g.index == e.cudaDev : normalizePciBusId(g.pciBusId) == bus) return &g;
  return nullptr;
}

std::string gpuLabel(const Gpu* g, const DeviceEndpoint& e) {
  if (g != nullptr) return formatString("GPU%d", g->index);
  std::string bus = busIdOf(e);
  if (!bus.empty()) return "GPU " + bus;
  return formatString("CUDA device %d of process %d", e.cudaDev, e.pid);
}

bool peerAccess(const Gpu& from, const Gpu& to) {
  return to.index >= 0 && static_cast<size_t>(to.index) < from.p2p.size() && from.p2p[to.index];
}

int directNvlinks(const Gpu& from, const Gpu& to) {
  return to.index >= 0 && static_cast<size_t>(to.index) < from.nvlinks.size()
             ? from.nvlinks[to.index]
             : 0;
}

DevicePath make(DevicePathKind kind, std::string reason) {
  DevicePath p;
  p.kind = kind;
  p.reason = std::move(reason);
  return p;
}

// Between two different GPUs of one host. Where P2P is not used, `why` says why in front of the
// fallback's reason.
DevicePath chooseBetweenGpus(const LocalTopology& topo, const DeviceEndpoint& a,
                             const DeviceEndpoint& b, const DevicePathOptions& o) {
  const Gpu* ga = findGpu(topo, a);
  const Gpu* gb = findGpu(topo, b);
  std::string na = gpuLabel(ga, a), nb = gpuLabel(gb, b);
  const char* level = p2pLevelName(o.p2pLevel);
  std::string why;
  if (o.p2pDisabled) {
    why = "P2P disabled (P2P_DISABLE)";
  } else if (o.p2pLevel == P2pLevel::kLoc) {
    why = "P2P level LOC allows no peer-to-peer between GPUs";
  } else if (ga != nullptr && gb != nullptr && nvlinkConnected(topo, ga->index, gb->index)) {
    int links = std::max(directNvlinks(*ga, *gb), directNvlinks(*gb, *ga));
    return make(DevicePathKind::kP2pNvlink,
                links > 0 ? formatString("%s and %s share %d NVLink%s", na.c_str(), nb.c_str(),
                                         links, links == 1 ? "" : "s")
                          : formatString("%s and %s reach each other through NVSwitches",
                                         na.c_str(), nb.c_str()));
  } else if (o.p2pLevel == P2pLevel::kNvl) {
    why = formatString("%s and %s have no NVLink and P2P level NVL allows no other", na.c_str(),
                       nb.c_str());
  } else if (ga == nullptr || gb == nullptr) {
    return make(DevicePathKind::kP2pStaged,
                formatString("%s is not in the topology, so peer access is unknown: staged "
                             "through a CUDA IPC buffer",
                             ga == nullptr ? na.c_str() : nb.c_str()));
  } else {
    PciDistance d = pciDistance(topo, ga->pciBusId, gb->pciBusId);
    if (d == PciDistance::kUnknown)
      return make(DevicePathKind::kP2pStaged,
                  formatString("%s and %s are at an unknown PCI distance: staged through a CUDA "
                               "IPC buffer",
                               na.c_str(), nb.c_str()));
    if (d > farthestPcieDistance(o.p2pLevel)) {
      why = formatString("%s and %s are %s apart, beyond P2P level %s", na.c_str(), nb.c_str(),
                         pciDistanceName(d), level);
    } else if (peerAccess(*ga, *gb) && peerAccess(*gb, *ga)) {
      return make(DevicePathKind::kP2pPcie,
                  formatString("%s and %s are %s apart with peer access (P2P level %s)", na.c_str(),
                               nb.c_str(), pciDistanceName(d), level));
    } else {
      return make(DevicePathKind::kP2pStaged,
                  formatString("%s and %s are %s apart without peer access both ways: staged "
                               "through a CUDA IPC buffer",
                               na.c_str(), nb.c_str(), pciDistanceName(d)));
    }
  }
  if (!o.shmDisabled) return make(DevicePathKind::kShm, why + ": host shared memory");
  return make(DevicePathKind::kSocket, why + ", and shared memory is disabled (SHM_DISABLE)");
}

}  // namespace

const char* p2pLevelName(P2pLevel level) {
  int i = static_cast<int>(level);
  return i >= 0 && i < 6 ? kLevelNames[i] : "?";
}

DeviceEndpoint makeDeviceEndpoint(uint64_t hostId, int32_t pid, int32_t cudaDev,
                                  const std::string& busId) {
  DeviceEndpoint e;
  memset(&e, 0, sizeof(e));
  e.hostId = hostId;
  e.pid = pid;
  e.cudaDev = cudaDev;
  std::string bus = normalizePciBusId(busId);
  memcpy(e.busId, bus.data(), std::min(bus.size(), sizeof(e.busId) - 1));
  return e;
}

DevicePath chooseDevicePath(const LocalTopology& topo, const DeviceEndpoint& first,
                            const DeviceEndpoint& second, const DevicePathOptions& options) {
  // One order for both ranks of the pair, so that they compute the same reason too.
  bool swap = endpointLess(second, first);
  const DeviceEndpoint& a = swap ? second : first;
  const DeviceEndpoint& b = swap ? first : second;
  if (a.hostId != b.hostId)
    return make(DevicePathKind::kSocket, formatString("on different hosts (%016llx and %016llx)",
                                                      static_cast<unsigned long long>(a.hostId),
                                                      static_cast<unsigned long long>(b.hostId)));
  if (options.hostLinks)
    return options.shmDisabled
               ? make(DevicePathKind::kSocket, "CHORUS_DEVICE_HOST_LINKS=1 and no shared memory")
               : make(DevicePathKind::kShm, "CHORUS_DEVICE_HOST_LINKS=1: host shared memory");
  if (!sameGpu(a, b)) return chooseBetweenGpus(topo, a, b, options);
  std::string gpu = gpuLabel(findGpu(topo, a), a);
  if (a.pid == b.pid)
    return make(DevicePathKind::kP2pSameGpu, "both on " + gpu + " in one process");
  DevicePath p = make(DevicePathKind::kP2pSameGpu,
                      formatString("both on %s in processes %d and %d: CUDA IPC, separate CUDA "
                                   "contexts (spinning kernels need MPS)",
                                   gpu.c_str(), a.pid, b.pid));
  p.crossContext = true;
  return p;
}

Result<P2pLevel> parseP2pLevel(const std::string& text, const std::string& source) {
  std::string value = trim(text);
  for (int i = 0; i < 6; ++i)
    if (strcasecmp(value.c_str(), kLevelNames[i]) == 0) return static_cast<P2pLevel>(i);
  if (!value.empty() && value.size() <= 2 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int n = atoi(value.c_str());
    if (n <= 5) return kLegacyLevels[n];
  }
  return invalidArgument(
      "%s=%s: \"%s\" is not a P2P level (accepted: LOC, NVL, PIX, PXB, PHB, SYS in any case, "
      "or NCCL's numbers 0-5 for LOC, PIX, PXB, PHB, SYS, SYS)",
      source.c_str(), text.c_str(), value.c_str());
}

Result<DevicePathOptions> devicePathOptionsFromEnv() {
  DevicePathOptions o;
  o.p2pDisabled = paramInt("P2P_DISABLE") != 0;
  o.shmDisabled = paramInt("SHM_DISABLE") != 0;
  o.hostLinks = paramInt("DEVICE_HOST_LINKS") != 0;
  ParamValue level = paramRaw("P2P_LEVEL");
  if (level.isSet && !trim(level.value).empty()) {
    CHORUS_ASSIGN_OR_RETURN(o.p2pLevel, parseP2pLevel(level.value, level.source));
  }
  return o;
}

}  // namespace chorus
