#include "topo/discover.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include "chorus_config.h"
#include "common/log.h"
#include "common/param.h"
#include "topo/host_id.h"
#include "topo/topo_file.h"

#if CHORUS_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace chorus {

namespace {

// ---------------------------------------------------------------------------------------------
// Small readers for sysfs-style files. A missing file is normal (VMs, containers, old kernels).

bool readLine(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in || !std::getline(in, *out)) return false;
  while (!out->empty() && isspace(static_cast<unsigned char>(out->back()))) out->pop_back();
  return true;
}

std::string readLineOr(const std::string& path, const std::string& fallback) {
  std::string line;
  return readLine(path, &line) ? line : fallback;
}

// Decimal, or hex with 0x. Fails on missing files and on text the kernel uses for "no value".
bool readInt(const std::string& path, int64_t* out) {
  std::string line;
  if (!readLine(path, &line) || line.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = strtoll(line.c_str(), &end, 0);
  if (errno != 0 || end == line.c_str() || *end != '\0') return false;
  *out = v;
  return true;
}

int64_t readIntOr(const std::string& path, int64_t fallback) {
  int64_t v = 0;
  return readInt(path, &v) ? v : fallback;
}

std::vector<std::string> listDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* e = readdir(dir)) {
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// Entries "<prefix><number>" of a directory, by number.
std::vector<int> listNumbered(const std::string& path, const std::string& prefix) {
  std::vector<int> ids;
  for (const std::string& name : listDir(path)) {
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() == prefix.size()) continue;
    std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    ids.push_back(atoi(digits.c_str()));
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string realPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

std::vector<std::string> splitPath(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// The PCI function a sysfs device path belongs to: its last bus-id component.
std::string pciBusIdOfPath(const std::string& resolved) {
  std::string found;
  for (const std::string& part : splitPath(resolved))
    if (isPciBusId(part)) found = part;
  return found;
}

// "48K", "2048K", "30M" (cache sizes in sysfs).
uint64_t parseSize(const std::string& text) {
  char* end = nullptr;
  uint64_t v = strtoull(text.c_str(), &end, 10);
  if (*end == 'K') v <<= 10;
  if (*end == 'M') v <<= 20;
  if (*end == 'G') v <<= 30;
  return v;
}

std::string cpuModelFromProc() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, 10, "model name") != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return "";
}

// One cache instance before summarising.
struct CacheInstance {
  int level;
  std::string type;
  uint64_t size;
  int sharedBy;
};

void summariseCaches(const std::vector<CacheInstance>& instances, LocalTopology* t) {
  std::map<std::tuple<int, std::string, uint64_t, int>, int> counts;
  for (const CacheInstance& c : instances)
    ++counts[std::make_tuple(c.level, c.type, c.size, c.sharedBy)];
  for (const auto& entry : counts) {
    CacheSummary s;
    std::tie(s.level, s.type, s.sizeBytes, s.sharedByPus) = entry.first;
    s.count = entry.second;
    t->caches.push_back(s);
  }
}

// ---------------------------------------------------------------------------------------------
// CPUs, caches, NUMA and PCI from sysfs

void readCpusFromSys(const std::string& sys, LocalTopology* t) {
  std::string cpuDir = sys + "/devices/system/cpu";
  std::vector<int> cpus;
  if (!parseCpuList(readLineOr(cpuDir + "/online", ""), &cpus) || cpus.empty())
    cpus = listNumbered(cpuDir, "cpu");
  std::map<int, std::vector<int>> packages;
  std::set<std::tuple<int64_t, int64_t, int64_t>> cores;
  std::map<std::tuple<int, std::string, std::string>, CacheInstance> caches;
  for (int cpu : cpus) {
    std::string base = cpuDir + "/cpu" + std::to_string(cpu);
    int64_t pkg = std::max<int64_t>(0, readIntOr(base + "/topology/physical_package_id", 0));
    int64_t die = readIntOr(base + "/topology/die_id", 0);
    int64_t core = readIntOr(base + "/topology/core_id", cpu);
    packages[static_cast<int>(pkg)].push_back(cpu);
    cores.insert(std::make_tuple(pkg, die, core));
    for (int index : listNumbered(base + "/cache", "index")) {
      std::string dir = base + "/cache/index" + std::to_string(index);
      CacheInstance c;
      c.level = static_cast<int>(readIntOr(dir + "/level", 0));
      c.type = readLineOr(dir + "/type", "unified");
      for (char& ch : c.type) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
      c.size = parseSize(readLineOr(dir + "/size", "0"));
      std::string shared = readLineOr(dir + "/shared_cpu_list", std::to_string(cpu));
      std::vector<int> sharedCpus;
      c.sharedBy = parseCpuList(shared, &sharedCpus) ? static_cast<int>(sharedCpus.size()) : 1;
      if (c.level > 0) caches.emplace(std::make_tuple(c.level, c.type, shared), c);
    }
  }
  t->pus = static_cast<int>(cpus.size());
  t->cores = static_cast<int>(cores.size());
  for (auto& entry : packages) t->packages.push_back({entry.first, std::move(entry.second)});
  std::vector<CacheInstance> instances;
  for (const auto& entry : caches) instances.push_back(entry.second);
  summariseCaches(instances, t);

  std::string nodeDir = sys + "/devices/system/node";
  for (int node : listNumbered(nodeDir, "node")) {
    std::string base = nodeDir + "/node" + std::to_string(node);
    NumaNode n;
    n.osIndex = node;
    parseCpuList(readLineOr(base + "/cpulist", ""), &n.cpus);
    std::ifstream meminfo(base + "/meminfo");
    std::string line;
    while (std::getline(meminfo, line)) {
      size_t at = line.find("MemTotal:");
      if (at != std::string::npos)
        n.memoryBytes = strtoull(line.c_str() + at + 9, nullptr, 10) << 10;
    }
    t->numaNodes.push_back(std::move(n));
  }
  if (t->numaNodes.empty() && !cpus.empty()) {
    // Kernels without NUMA support have no node directory: the whole machine is node 0.
    NumaNode n;
    n.osIndex = 0;
    n.cpus = cpus;
    t->numaNodes.push_back(std::move(n));
  }
}

// Link width and speed of a PCI function from sysfs; unknown values stay as they are.
void readPciLink(const std::string& sys, PciDevice* d) {
  std::string base = sys + "/bus/pci/devices/" + d->busId;
  int64_t width = 0;
  if (readInt(base + "/current_link_width", &width) && width > 0)
    d->linkWidth = static_cast<int>(width);
  std::string speed;
  if (readLine(base + "/current_link_speed", &speed)) {
    double gts = strtod(speed.c_str(), nullptr);  // "16.0 GT/s PCIe"; "Unknown" reads as 0
    if (gts > 0) d->linkSpeedGts = gts;
  }
}

void readPciFromSys(const std::string& sys, LocalTopology* t) {
  std::string devDir = sys + "/bus/pci/devices";
  for (const std::string& name : listDir(devDir)) {
    std::string bus = normalizePciBusId(name);
    if (bus.empty()) continue;
    std::string base = devDir + "/" + name;
    int64_t cls = readIntOr(base + "/class", 0);
    if ((cls >> 8) == 0x0604) continue;  // PCI-to-PCI bridges show up in `upstream` only
    PciDevice d;
    d.busId = bus;
    d.vendorId = static_cast<uint16_t>(readIntOr(base + "/vendor", 0));
    d.deviceId = static_cast<uint16_t>(readIntOr(base + "/device", 0));
    d.classCode = static_cast<uint16_t>(cls >> 8);
    d.numaNode = static_cast<int>(readIntOr(base + "/numa_node", -1));
    readPciLink(sys, &d);
    // /sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0/...: the root bus, then each bridge.
    std::vector<std::string> chain;
    for (const std::string& part : splitPath(realPath(base))) {
      if (part.size() == 10 && part.compare(0, 3, "pci") == 0) {
        std::string root = normalizePciBusId(part.substr(3) + ":00.0");
        if (!root.empty()) d.hostBridge = root.substr(0, 7);
        chain.clear();
      } else if (isPciBusId(part)) {
        chain.push_back(part);
      }
    }
    if (!chain.empty() && chain.back() == bus) chain.pop_back();
    d.upstream.assign(chain.rbegin(), chain.rend());
    t->pciDevices.push_back(std::move(d));
  }
}

// ---------------------------------------------------------------------------------------------
// CPUs, caches, NUMA and PCI from hwloc

#if CHORUS_HAVE_HWLOC

class HwlocTopology {
 public:
  HwlocTopology() = default;
  ~HwlocTopology() {
    if (topo_ != nullptr) hwloc_topology_destroy(topo_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;

  Status load() {
    if (hwloc_topology_init(&topo_) != 0) return errnoError(errno, "hwloc_topology_init");
    // hwloc keeps no PCI or OS devices unless asked to; bridges are needed for PCI distances.
    hwloc_topology_set_io_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
    hwloc_topology_set_icache_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (hwloc_topology_load(topo_) != 0) return errnoError(errno, "hwloc_topology_load");
    return Status::ok();
  }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

std::vector<int> bitmapToList(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

int osIndexOf(hwloc_obj_t obj) {
  return obj->os_index != HWLOC_UNKNOWN_INDEX ? static_cast<int>(obj->os_index)
                                              : static_cast<int>(obj->logical_index);
}

std::string busIdOf(const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci) {
  return formatString("%04x:%02x:%02x.%x", pci.domain, pci.bus, pci.dev, pci.func);
}

void readCpusFromHwloc(hwloc_topology_t topo, LocalTopology* t) {
  t->cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t->pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  hwloc_obj_t obj = nullptr;
  while ((obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, obj)) != nullptr) {
    t->packages.push_back({osIndexOf(obj), bitmapToList(obj->cpuset)});
    const char* model = hwloc_obj_get_info_by_name(obj, "CPUModel");
    if (model != nullptr && t->cpuModel.empty()) t->cpuModel = model;
  }
  while ((obj = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, obj)) != nullptr) {
    NumaNode n;
    n.osIndex = osIndexOf(obj);
    n.cpus = bitmapToList(obj->cpuset);
    n.memoryBytes = obj->attr != nullptr ? obj->attr->numanode.local_memory : 0;
    t->numaNodes.push_back(std::move(n));
  }
  std::vector<CacheInstance> caches;
  for (hwloc_obj_type_t type :
       {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L4CACHE,
        HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L1ICACHE, HWLOC_OBJ_L2ICACHE, HWLOC_OBJ_L3ICACHE}) {
    while ((obj = hwloc_get_next_obj_by_type(topo, type, obj)) != nullptr) {
      const hwloc_obj_attr_u::hwloc_cache_attr_s& a = obj->attr->cache;
      const char* kind = a.type == HWLOC_OBJ_CACHE_DATA          ? "data"
                         : a.type == HWLOC_OBJ_CACHE_INSTRUCTION ? "instruction"
                                                                 : "unified";
      caches.push_back({static_cast<int>(a.depth), kind, a.size,
                        obj->cpuset != nullptr ? hwloc_bitmap_weight(obj->cpuset) : 0});
    }
  }
  summariseCaches(caches, t);
}

void readPciFromHwloc(hwloc_topology_t topo, const std::string& sys, bool thisSystem,
                      LocalTopology* t) {
  hwloc_obj_t obj = nullptr;
  while ((obj = hwloc_get_next_pcidev(topo, obj)) != nullptr) {
    const hwloc_obj_attr_u::hwloc_pcidev_attr_s& pci = obj->attr->pcidev;
    PciDevice d;
    d.busId = busIdOf(pci);
    d.vendorId = pci.vendor_id;
    d.deviceId = pci.device_id;
    d.classCode = pci.class_id;
    for (hwloc_obj_t up = obj->parent; up != nullptr && up->type == HWLOC_OBJ_BRIDGE;
         up = up->parent) {
      const hwloc_obj_attr_u::hwloc_bridge_attr_s& b = up->attr->bridge;
      if (b.upstream_type == HWLOC_OBJ_BRIDGE_PCI) {
        d.upstream.push_back(busIdOf(b.upstream.pci));
      } else {
        d.hostBridge =
            formatString("%04x:%02x", b.downstream.pci.domain, b.downstream.pci.secondary_bus);
        break;
      }
    }
    hwloc_obj_t local = hwloc_get_non_io_ancestor_obj(topo, obj);
    if (local != nullptr && local->nodeset != nullptr && hwloc_bitmap_weight(local->nodeset) == 1)
      d.numaNode = hwloc_bitmap_first(local->nodeset);
    // Link width is not in hwloc; sysfs has both, but only for the machine hwloc describes.
    if (thisSystem) readPciLink(sys, &d);
    t->pciDevices.push_back(std::move(d));
  }
}

// True when it filled the CPU and PCI parts; false (with a warning) to fall back to sysfs.
Result<bool> readWithHwloc(const std::string& sys, LocalTopology* t) {
  HwlocTopology hw;
  Status s = hw.load();
  if (!s.isOk()) {
    for (const char* var : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC"})
      if (getenv(var) != nullptr) return s.withContext(std::string("with ") + var + " set");
    LOG_WARN(kSubsysGraph, "topology: %s; reading %s instead", s.message().c_str(), sys.c_str());
    return false;
  }
  bool thisSystem = hwloc_topology_is_thissystem(hw.get()) != 0;
  readCpusFromHwloc(hw.get(), t);
  readPciFromHwloc(hw.get(), sys, thisSystem, t);
  const char* backend = hwloc_obj_get_info_by_name(hwloc_get_root_obj(hw.get()), "Backend");
  std::string backendName = backend != nullptr ? backend : "";
  // hwloc quietly describes the real machine when its override cannot be used; say so.
  const char* xml = getenv("HWLOC_XMLFILE");
  const char* synthetic = getenv("HWLOC_SYNTHETIC");
  if (synthetic != nullptr && backendName != "Synthetic")
    LOG_WARN(kSubsysGraph, "topology: HWLOC_SYNTHETIC=\"%s\" was not used by hwloc", synthetic);
  else if (xml != nullptr && synthetic == nullptr && thisSystem &&
           getenv("HWLOC_THISSYSTEM") == nullptr)
    LOG_WARN(kSubsysGraph, "topology: HWLOC_XMLFILE=%s was not used by hwloc", xml);
  if (xml != nullptr && synthetic == nullptr && !thisSystem)
    backendName = std::string("XML:") + xml;
  t->source = "hwloc" + (backendName.empty() ? "" : "/" + backendName);
  if (t->cpuModel.empty() && thisSystem) t->cpuModel = cpuModelFromProc();
  return true;
}

#endif  // CHORUS_HAVE_HWLOC

// ---------------------------------------------------------------------------------------------
// Network interfaces and InfiniBand HCAs (always sysfs)

std::map<std::string, std::vector<NetAddress>> interfaceAddresses() {
  std::map<std::string, std::vector<NetAddress>> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[INET6_ADDRSTRLEN] = {};
    const unsigned char* mask = nullptr;
    size_t maskBytes = 0;
    NetAddress a;
    if (family == AF_INET) {
      a.family = AddressFamily::kIpv4;
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, text,
                sizeof(text));
      if (ifa->ifa_netmask != nullptr)
        mask = reinterpret_cast<const unsigned char*>(
            &reinterpret_cast<sockaddr_in*>(ifa->ifa_netmask)->sin_addr);
      maskBytes = 4;
    } else {
      a.family = AddressFamily::kIpv6;
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr, text,
                sizeof(text));
      if (ifa->ifa_netmask != nullptr)
        mask = reinterpret_cast<const unsigned char*>(
            &reinterpret_cast<sockaddr_in6*>(ifa->ifa_netmask)->sin6_addr);
      maskBytes = 16;
    }
    a.address = text;
    for (size_t i = 0; mask != nullptr && i < maskBytes; ++i)
      a.prefixLength += __builtin_popcount(mask[i]);
    out[ifa->ifa_name].push_back(std::move(a));
  }
  freeifaddrs(list);
  return out;
}

void readNetInterfaces(const DiscoverOptions& options, LocalTopology* t) {
  std::string netDir = options.sysRoot + "/class/net";
  std::map<std::string, std::vector<NetAddress>> addresses;
  if (options.readAddresses) addresses = interfaceAddresses();
  for (const std::string& name : listDir(netDir)) {
    std::string base = netDir + "/" + name;
    NetInterface n;
    n.name = name;
    int64_t flags = readIntOr(base + "/flags", 0);
    std::string state = readLineOr(base + "/operstate", "unknown");
    n.up = (flags & IFF_UP) != 0 && (state == "up" || state == "unknown");
    n.loopback = (flags & IFF_LOOPBACK) != 0 || readIntOr(base + "/type", 0) == 772;
    int64_t speed = -1;
    if (readInt(base + "/speed", &speed) && speed > 0) n.speedMbps = speed;
    n.mtu = static_cast<int>(readIntOr(base + "/mtu", 0));
    std::string resolved = realPath(base);
    n.isVirtual = resolved.empty() ? access((base + "/device").c_str(), F_OK) != 0
                                   : resolved.find("/devices/virtual/") != std::string::npos;
    if (!n.isVirtual) n.pciBusId = pciBusIdOfPath(realPath(base + "/device"));
    if (n.pciBusId.empty() && !n.isVirtual) n.pciBusId = pciBusIdOfPath(resolved);
    n.numaNode = static_cast<int>(readIntOr(base + "/device/numa_node", -1));
    auto it = addresses.find(name);
    if (it != addresses.end()) n.addresses = it->second;
    t->netInterfaces.push_back(std::move(n));
  }
}

bool isZeroGid(const std::string& gid) {
  return gid.find_first_not_of("0:") == std::string::npos;
}

void readIbDevices(const std::string& sys, LocalTopology* t) {
  std::string ibDir = sys + "/class/infiniband";
  for (const std::string& name : listDir(ibDir)) {
    std::string base = ibDir + "/" + name;
    IbDevice d;
    d.name = name;
    d.nodeGuid = readLineOr(base + "/node_guid", "");
    d.pciBusId = pciBusIdOfPath(realPath(base + "/device"));
    d.numaNode = static_cast<int>(readIntOr(base + "/device/numa_node", -1));
    for (const std::string& portName : listDir(base + "/ports")) {
      if (portName.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string portDir = base + "/ports/" + portName;
      IbPort p;
      p.port = atoi(portName.c_str());
      std::string state = readLineOr(portDir + "/state", "");  // "4: ACTIVE"
      size_t colon = state.find(": ");
      p.state = colon == std::string::npos ? state : state.substr(colon + 2);
      p.rateGbps = strtod(readLineOr(portDir + "/rate", "0").c_str(), nullptr);  // "200 Gb/sec"
      p.linkLayer = readLineOr(portDir + "/link_layer", "InfiniBand");
      for (int index : listNumbered(portDir + "/gids", "")) {
        std::string gid = readLineOr(portDir + "/gids/" + std::to_string(index), "");
        if (!gid.empty() && !isZeroGid(gid))
          p.gids.push_back(
              {index, gid, readLineOr(portDir + "/gid_attrs/types/" + std::to_string(index), "")});
      }
      d.ports.push_back(std::move(p));
    }
    std::sort(d.ports.begin(), d.ports.end(),
              [](const IbPort& a, const IbPort& b) { return a.port < b.port; });
    t->ibDevices.push_back(std::move(d));
  }
}

// ---------------------------------------------------------------------------------------------
// GPUs through the CUDA driver and NVML, both loaded at run time

using CuInitFn = int (*)(unsigned int);
using CuDeviceGetCountFn = int (*)(int*);
using CuDeviceGetFn = int (*)(int*, int);
using CuDeviceGetNameFn = int (*)(char*, int, int);
using CuDeviceGetPciBusIdFn = int (*)(char*, int, int);
using CuDeviceCanAccessPeerFn = int (*)(int*, int, int);

// The PCI record NVML fills (nvmlPciInfo_t, version 2 layout).
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];
};
using NvmlDevice = void*;
using NvmlInitFn = int (*)();
using NvmlHandleByBusIdFn = int (*)(const char*, NvmlDevice*);
using NvmlNvLinkStateFn = int (*)(NvmlDevice, unsigned int, int*);
using NvmlNvLinkRemotePciFn = int (*)(NvmlDevice, unsigned int, NvmlPciInfo*);
using NvmlNvLinkRemoteTypeFn = int (*)(NvmlDevice, unsigned int, int*);
constexpr unsigned kNvmlMaxLinks = 18;
constexpr int kNvmlRemoteSwitch = 2;

template <class Fn>
Fn symbol(void* lib, const char* name) {
  return reinterpret_cast<Fn>(dlsym(lib, name));
}

void readNvLinks(LocalTopology* t) {
  // Like the CUDA driver, NVML stays loaded: unloading an initialised driver library is unsafe.
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return;
  auto init = symbol<NvmlInitFn>(lib, "nvmlInit_v2");
  auto byBusId = symbol<NvmlHandleByBusIdFn>(lib, "nvmlDeviceGetHandleByPciBusId_v2");
  auto linkState = symbol<NvmlNvLinkStateFn>(lib, "nvmlDeviceGetNvLinkState");
  auto remotePci = symbol<NvmlNvLinkRemotePciFn>(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto remoteType = symbol<NvmlNvLinkRemoteTypeFn>(lib, "nvmlDeviceGetNvLinkRemoteDeviceType");
  if (init == nullptr || byBusId == nullptr || linkState == nullptr || remotePci == nullptr ||
      init() != 0)
    return;
  for (Gpu& g : t->gpus) {
    NvmlDevice dev = nullptr;
    if (byBusId(g.pciBusId.c_str(), &dev) != 0) continue;
    for (unsigned link = 0; link < kNvmlMaxLinks; ++link) {
      int active = 0;
      NvmlPciInfo remote = {};
      if (linkState(dev, link, &active) != 0 || !active || remotePci(dev, link, &remote) != 0)
        continue;
      int type = -1;  // unknown when the driver cannot say
      if (remoteType != nullptr && (remoteType(dev, link, &type) != 0 || type == 255)) type = -1;
      if (type == kNvmlRemoteSwitch) {
        ++g.nvswitchLinks;
        continue;
      }
      std::string peerBus =
          formatString("%04x:%02x:%02x", remote.domain & 0xffff, remote.bus, remote.device);
      auto peer = std::find_if(t->gpus.begin(), t->gpus.end(), [&](const Gpu& other) {
        return other.pciBusId.compare(0, peerBus.size(), peerBus) == 0;
      });
      if (peer != t->gpus.end())
        ++g.nvlinks[static_cast<size_t>(peer->index)];
      else if (type == -1)
        ++g.nvswitchLinks;  // not a GPU we know: on NVSwitch systems that is the switch
    }
  }
}

void readCudaGpus(LocalTopology* t) {
  // Never linked: machines without a driver still run host communicators.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    LOG_INFO(kSubsysGraph, "topology: no CUDA driver (libcuda.so.1 not loadable), no GPUs");
    return;
  }
  auto cuInit = symbol<CuInitFn>(lib, "cuInit");
  auto getCount = symbol<CuDeviceGetCountFn>(lib, "cuDeviceGetCount");
  auto get = symbol<CuDeviceGetFn>(lib, "cuDeviceGet");
  auto getName = symbol<CuDeviceGetNameFn>(lib, "cuDeviceGetName");
  auto getBusId = symbol<CuDeviceGetPciBusIdFn>(lib, "cuDeviceGetPCIBusId");
  auto canAccess = symbol<CuDeviceCanAccessPeerFn>(lib, "cuDeviceCanAccessPeer");
  int count = 0;
  if (cuInit == nullptr || getCount == nullptr || get == nullptr || getName == nullptr ||
      getBusId == nullptr || canAccess == nullptr) {
    LOG_WARN(kSubsysGraph, "topology: libcuda.so.1 lacks a needed entry point, no GPUs listed");
    return;
  }
  int rc = cuInit(0);
  if (rc != 0 || getCount(&count) != 0) {
    LOG_INFO(kSubsysGraph, "topology: cuInit returned %d, no GPUs", rc);
    return;
  }
  std::vector<int> handles;
  for (int i = 0; i < count; ++i) {
    int dev = 0;
    char name[256] = {};
    char bus[64] = {};
    if (get(&dev, i) != 0 || getName(name, sizeof(name) - 1, dev) != 0 ||
        getBusId(bus, sizeof(bus) - 1, dev) != 0)
      break;  // ordinals must stay dense: stop at the first device that cannot be described
    Gpu g;
    g.index = i;
    g.name = name;
    g.pciBusId = normalizePciBusId(bus);
    t->gpus.push_back(std::move(g));
    handles.push_back(dev);
  }
  for (Gpu& g : t->gpus) {
    g.p2p.assign(t->gpus.size(), false);
    g.nvlinks.assign(t->gpus.size(), 0);
    for (const Gpu& peer : t->gpus) {
      int can = 0;
      if (peer.index != g.index && canAccess(&can, handles[static_cast<size_t>(g.index)],
                                             handles[static_cast<size_t>(peer.index)]) == 0)
        g.p2p[static_cast<size_t>(peer.index)] = can != 0;
    }
  }
  readNvLinks(t);
}

// ---------------------------------------------------------------------------------------------

// NUMA references everything can agree on: PCI-backed records take their function's node, a
// single-node machine places every PCI function on it, and dangling references become unknown.
void settleNumaNodes(const std::string& sys, LocalTopology* t) {
  auto valid = [&](int node) { return node >= 0 && findNumaNode(*t, node) != nullptr; };
  int only = t->numaNodes.size() == 1 ? t->numaNodes[0].osIndex : -1;
  for (PciDevice& d : t->pciDevices) {
    if (!valid(d.numaNode)) d.numaNode = only;
  }
  auto settle = [&](const std::string& bus, int* node) {
    if (valid(*node)) return;
    *node = -1;
    if (bus.empty()) return;
    const PciDevice* dev = findPciDevice(*t, bus);
    int fromSys = static_cast<int>(readIntOr(sys + "/bus/pci/devices/" + bus + "/numa_node", -1));
    *node = dev != nullptr ? dev->numaNode : valid(fromSys) ? fromSys : only;
  };
  for (NetInterface& n : t->netInterfaces) settle(n.pciBusId, &n.numaNode);
  for (IbDevice& d : t->ibDevices) settle(d.pciBusId, &d.numaNode);
  for (Gpu& g : t->gpus) settle(g.pciBusId, &g.numaNode);
}

}  // namespace

Result<LocalTopology> discoverLocalTopology(const DiscoverOptions& options) {
  LocalTopology t;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  t.hostname = host;
  t.hostId = localHostId();
  const std::string& sys = options.sysRoot;
  bool done = false;
#if CHORUS_HAVE_HWLOC
  if (options.useHwloc && sys == "/sys") {
    CHORUS_ASSIGN_OR_RETURN(done, readWithHwloc(sys, &t));
  }
#endif
  if (!done) {
    t.source = sys == "/sys" ? "sysfs" : "sysfs:" + sys;
    readCpusFromSys(sys, &t);
    readPciFromSys(sys, &t);
    if (sys == "/sys") t.cpuModel = cpuModelFromProc();
  }
  if (t.pus <= 0)
    return systemError("topology: no processing units found (hwloc and %s/devices/system/cpu)",
                       sys.c_str());
  readNetInterfaces(options, &t);
  readIbDevices(sys, &t);
  if (options.probeGpus) readCudaGpus(&t);
  settleNumaNodes(sys, &t);
  LOG_INFO(kSubsysGraph,
           "topology (%s): %zu package(s), %d core(s), %d PU(s), %zu NUMA node(s), %zu PCI "
           "function(s), %zu interface(s), %zu HCA(s), %zu GPU(s)",
           t.source.c_str(), t.packages.size(), t.cores, t.pus, t.numaNodes.size(),
           t.pciDevices.size(), t.netInterfaces.size(), t.ibDevices.size(), t.gpus.size());
  return t;
}

Result<LocalTopology> localTopologyFromEnvironment() {
  LocalTopology topo;
  ParamValue file = paramRaw("TOPO_FILE");
  if (file.isSet && !file.value.empty()) {
    Result<LocalTopology> loaded = loadTopologyFile(file.value);
    if (!loaded.isOk()) return loaded.status().withContext(file.source);
    topo = loaded.take();
    LOG_INFO(kSubsysGraph, "topology read from %s (%s)", file.value.c_str(), file.source.c_str());
  } else {
    CHORUS_ASSIGN_OR_RETURN(topo, discoverLocalTopology());
  }
  ParamValue dump = paramRaw("TOPO_DUMP_FILE");
  if (dump.isSet && !dump.value.empty()) {
    Status s = dumpTopologyFile(topo, dump.value);
    if (!s.isOk()) return s.withContext(dump.source);
    LOG_INFO(kSubsysGraph, "topology written to %s (%s)", dump.value.c_str(), dump.source.c_str());
  }
  return topo;
}

}  // namespace chorus
