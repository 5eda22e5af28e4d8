// The local host as one process sees it: CPUs, NUMA memory, the PCI tree, network interfaces,
// InfiniBand HCAs and GPUs. Plain data filled by discovery (discover.h) or read from a topology
// file (topo_file.h), plus the queries transports and the selector ask of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

struct CpuPackage {
  int osIndex = -1;
  std::vector<int> cpus;  // OS indices of its processing units, ascending
};

struct NumaNode {
  int osIndex = -1;
  std::vector<int> cpus;     // empty for memory-only nodes
  uint64_t memoryBytes = 0;  // local memory (0: unknown)
};

// One line per distinct kind of cache: e.g. 64 instances of a 48 KiB L1 data cache, each used by
// 2 processing units.
struct CacheSummary {
  int level = 0;
  std::string type;  // "data", "instruction" or "unified"
  uint64_t sizeBytes = 0;
  int sharedByPus = 0;
  int count = 0;
};

// A PCI function other than a PCI-to-PCI bridge. Bridges appear only by bus id in `upstream`.
struct PciDevice {
  std::string busId;  // "dddd:bb:dd.f", lower-case hex
  uint16_t vendorId = 0;
  uint16_t deviceId = 0;
  uint16_t classCode = 0;   // base class and subclass, e.g. 0x0302 (3D controller)
  int numaNode = -1;        // -1: unknown
  int linkWidth = -1;       // lanes of the current link (-1: unknown)
  double linkSpeedGts = 0;  // per-lane rate of the current link in GT/s (0: unknown)
  // Bus ids of the bridges above the device, nearest first: switch downstream port, switch
  // upstream port, ..., root port.
  std::vector<std::string> upstream;
  std::string hostBridge;  // root complex as "dddd:bb" (its root bus); empty when unknown
};

enum class AddressFamily { kIpv4, kIpv6 };

struct NetAddress {
  AddressFamily family = AddressFamily::kIpv4;
  std::string address;  // numeric form, e.g. "10.0.0.5" or "fe80::1"
  int prefixLength = 0;
};

struct NetInterface {
  std::string name;
  bool up = false;         // administratively up and operationally up (or state unknown)
  int64_t speedMbps = -1;  // -1: unknown
  int mtu = 0;
  std::vector<NetAddress> addresses;
  std::string pciBusId;  // empty unless backed by a PCI function
  int numaNode = -1;
  bool loopback = false;
  bool isVirtual = false;  // not backed by a device (bridges, veth, tunnels, ifb, ...)
};

struct IbGid {
  int index = 0;
  std::string gid;   // "fe80:0000:0000:0000:0e42:a1ff:fe5f:0a3c"
  std::string type;  // "IB/RoCE v1" or "RoCE v2" (gid_attrs/types); "" when unknown
};

struct IbPort {
  int port = 1;
  std::string state;        // "ACTIVE", "DOWN", "INIT", "ARMED", ...
  double rateGbps = 0;      // 0: unknown
  std::string linkLayer;    // "InfiniBand" or "Ethernet" (RoCE)
  std::vector<IbGid> gids;  // non-zero entries of the GID table
};

struct IbDevice {
  std::string name;  // "mlx5_0"
  std::string nodeGuid;
  std::string pciBusId;
  int numaNode = -1;
  std::vector<IbPort> ports;
};

struct Gpu {
  int index = 0;  // CUDA ordinal
  std::string name;
  std::string pciBusId;
  int numaNode = -1;
  std::vector<bool> p2p;     // p2p[j]: this GPU can access GPU j's memory directly
  std::vector<int> nvlinks;  // nvlinks[j]: NVLink links going straight to GPU j
  int nvswitchLinks = 0;     // links to NVSwitches (reaching every GPU on the same fabric)
};

struct LocalTopology {
  std::string hostname;
  uint64_t hostId = 0;  // topo/host_id.h localHostId()
  std::string source;   // how it was obtained: "hwloc", "sysfs" or what the file said
  std::string cpuModel;
  int cores = 0;
  int pus = 0;
  std::vector<CpuPackage> packages;
  std::vector<NumaNode> numaNodes;
  std::vector<CacheSummary> caches;
  std::vector<PciDevice> pciDevices;
  std::vector<NetInterface> netInterfaces;
  std::vector<IbDevice> ibDevices;
  std::vector<Gpu> gpus;
};

bool operator==(const CpuPackage& a, const CpuPackage& b);
bool operator==(const NumaNode& a, const NumaNode& b);
bool operator==(const CacheSummary& a, const CacheSummary& b);
bool operator==(const PciDevice& a, const PciDevice& b);
bool operator==(const NetAddress& a, const NetAddress& b);
bool operator==(const NetInterface& a, const NetInterface& b);
bool operator==(const IbGid& a, const IbGid& b);
bool operator==(const IbPort& a, const IbPort& b);
bool operator==(const IbDevice& a, const IbDevice& b);
bool operator==(const Gpu& a, const Gpu& b);
bool operator==(const LocalTopology& a, const LocalTopology& b);
inline bool operator!=(const LocalTopology& a, const LocalTopology& b) {
  return !(a == b);
}

// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. Parsing accepts Linux cpulist syntax (ranges, commas,
// surrounding whitespace) and returns false on anything else; the result is sorted and unique.
std::string formatCpuList(const std::vector<int>& cpus);
bool parseCpuList(const std::string& text, std::vector<int>* cpus);

// "dddd:bb:dd.f" with hex digits, device < 0x20, function < 8.
bool isPciBusId(const std::string& text);
// Lower-cases a bus id and widens a missing or short domain ("17:00.0" -> "0000:17:00.0");
// returns an empty string when the text is not a bus id.
std::string normalizePciBusId(const std::string& text);

// The NUMA node holding a CPU, or -1.
int numaNodeOfCpu(const LocalTopology& topo, int cpu);
const NumaNode* findNumaNode(const LocalTopology& topo, int osIndex);
const PciDevice* findPciDevice(const LocalTopology& topo, const std::string& busId);
// The NUMA node of a PCI function: its own record, else a GPU/NIC/HCA naming it; -1 if unknown.
int numaNodeOfPci(const LocalTopology& topo, const std::string& busId);

// How far apart two PCI functions are, ordered from nearest to farthest, as nvidia-smi topo -m
// names them.
enum class PciDistance {
  kSelf,     // X: the same function
  kPix,      // PIX: below one PCIe switch (at most one switch port above each)
  kPxb,      // PXB: several bridges apart, without crossing the host bridge
  kPhb,      // PHB: through the host bridge of one root complex
  kNode,     // NODE: between root complexes of one NUMA node
  kSys,      // SYS: across NUMA nodes (the SMP interconnect between sockets)
  kUnknown,  // either function is not in the topology
};
const char* pciDistanceName(PciDistance d);
PciDistance pciDistance(const LocalTopology& topo, const std::string& busA,
                        const std::string& busB);

// The network interface a process on `numaNode` should prefer: up, not loopback nor virtual; on
// that node first, then of unknown node, then elsewhere; faster first, then by name (numaNode -1:
// the fastest). nullptr when there is none.
const NetInterface* nearestNetInterface(const LocalTopology& topo, int numaNode);
// The same for the NUMA node holding most of `cpus`.
const NetInterface* nearestNetInterfaceToCpus(const LocalTopology& topo,
                                              const std::vector<int>& cpus);
// The usable interface with the smallest pciDistance to a device (e.g. a GPU), then faster first.
const NetInterface* nearestNetInterfaceToPci(const LocalTopology& topo, const std::string& busId);
// The HCA with an ACTIVE port nearest (pciDistance) to a device, then faster first.
const IbDevice* nearestIbDeviceToPci(const LocalTopology& topo, const std::string& busId);

// Whether GPU ordinals a and b reach each other over NVLink, directly or through NVSwitches.
bool nvlinkConnected(const LocalTopology& topo, int a, int b);

}  // namespace chorus
