// Local topology: discovery on this machine (hwloc and the /sys reader), a fake sysfs tree, the
// JSON topology files (round trips and every kind of error) and the queries over the fixtures.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chorus_config.h"
#if CHORUS_HAVE_HWLOC
#include <hwloc.h>
#endif
#include "topo/discover.h"
#include "topo/host_id.h"
#include "topo/json.h"
#include "topo/topo_file.h"
#include "topo/topology.h"

namespace chorus {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) {
  return std::string(CHORUS_TOPO_FIXTURES) + "/" + name;
}

LocalTopology loadFixture(const std::string& name) {
  Result<LocalTopology> r = loadTopologyFile(fixture(name));
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.take() : LocalTopology();
}

const NetInterface* findNet(const LocalTopology& t, const std::string& name) {
  for (const NetInterface& n : t.netInterfaces)
    if (n.name == name) return &n;
  return nullptr;
}

std::string nameOf(const NetInterface* n) {
  return n != nullptr ? n->name : "<none>";
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = getenv(name);
    if (old != nullptr) old_ = old, hadOld_ = true;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (hadOld_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool hadOld_ = false;
};

// A directory removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/chorus-topo-XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

  void write(const std::string& rel, const std::string& text) const {
    fs::path p = fs::path(path_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  // A relative symlink, as sysfs has them.
  void link(const std::string& rel, const std::string& targetRel) const {
    fs::path p = fs::path(path_) / rel;
    fs::create_directories(p.parent_path());
    fs::create_directory_symlink(fs::relative(fs::path(path_) / targetRel, p.parent_path()), p);
  }

 private:
  std::string path_;
};

void expectRoundTrip(const LocalTopology& t) {
  std::string text = dumpTopology(t);
  Result<LocalTopology> back = parseTopology(text, "dump");
  ASSERT_TRUE(back.isOk()) << back.status().message() << "\n" << text;
  EXPECT_TRUE(back.value() == t) << describeTopologyDifference(t, back.value());
  EXPECT_EQ(dumpTopology(back.value()), text);
}

// ---------------------------------------------------------------------------------------------
// Discovery on this machine

TEST(Discover, ThisMachineIsSane) {
  Result<LocalTopology> r = discoverLocalTopology();
  ASSERT_TRUE(r.isOk()) << r.status().message();
  const LocalTopology& t = r.value();
  EXPECT_FALSE(t.hostname.empty());
  EXPECT_EQ(t.hostId, localHostId());
  EXPECT_GE(t.pus, 1);
  EXPECT_GE(t.cores, 1);
  EXPECT_LE(t.cores, t.pus);
  ASSERT_GE(t.numaNodes.size(), 1u);
  ASSERT_GE(t.packages.size(), 1u);
  size_t numaCpus = 0;
  for (const NumaNode& n : t.numaNodes) numaCpus += n.cpus.size();
  EXPECT_EQ(numaCpus, static_cast<size_t>(t.pus));
  EXPECT_EQ(numaNodeOfCpu(t, t.numaNodes[0].cpus.at(0)), t.numaNodes[0].osIndex);
  const NetInterface* lo = findNet(t, "lo");
  ASSERT_NE(lo, nullptr);
  EXPECT_TRUE(lo->loopback);
  EXPECT_TRUE(lo->isVirtual);
  EXPECT_TRUE(lo->pciBusId.empty());
  if (lo->up) {
    bool has127 = false;
    for (const NetAddress& a : lo->addresses) has127 = has127 || a.address == "127.0.0.1";
    EXPECT_TRUE(has127);
  }
  for (const PciDevice& d : t.pciDevices) EXPECT_TRUE(isPciBusId(d.busId)) << d.busId;
  // No driver and no RDMA stack here: both lists are empty rather than errors.
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    EXPECT_TRUE(t.gpus.empty());
  } else {
    dlclose(cuda);
  }
  if (!fs::exists("/sys/class/infiniband")) {
    EXPECT_TRUE(t.ibDevices.empty());
  }
  expectRoundTrip(t);
}

// A network namespace of this machine is another host to the transports, and the same machine
// (the same CPUs) to the cost model; CHORUS_HOSTID names a host whole, machine included.
TEST(HostId, NetworkNamespacesOfOneMachineShareItsCpus) {
  const char* given = getenv("CHORUS_HOSTID");
  const std::string saved = given != nullptr ? given : "";
  unsetenv("CHORUS_HOSTID");
  struct Restore {
    const std::string& value;
    ~Restore() {
      if (!value.empty()) setenv("CHORUS_HOSTID", value.c_str(), 1);
    }
  } restore{saved};
  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipeFds[0]);
    if (unshare(CLONE_NEWNET) != 0) _exit(77);
    const uint64_t ids[2] = {localHostId(), localMachineId()};
    _exit(write(pipeFds[1], ids, sizeof(ids)) == static_cast<ssize_t>(sizeof(ids)) ? 0 : 1);
  }
  close(pipeFds[1]);
  uint64_t ids[2] = {};
  const ssize_t got = read(pipeFds[0], ids, sizeof(ids));
  close(pipeFds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "cannot make a network namespace here";
  ASSERT_EQ(WEXITSTATUS(status), 0);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof(ids)));
  EXPECT_NE(ids[0], localHostId());
  EXPECT_EQ(ids[1], localMachineId());
  EXPECT_NE(localMachineId(), localHostId());
  ScopedEnv named("CHORUS_HOSTID", "rack1-node7");
  EXPECT_EQ(localMachineId(), localHostId());
}

TEST(Discover, SysfsReaderAgreesWithDefault) {
  DiscoverOptions sysOnly;
  sysOnly.useHwloc = false;
  Result<LocalTopology> a = discoverLocalTopology();
  Result<LocalTopology> b = discoverLocalTopology(sysOnly);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  ASSERT_TRUE(b.isOk()) << b.status().message();
  EXPECT_EQ(b.value().source, "sysfs");
  EXPECT_EQ(a.value().pus, b.value().pus);
  EXPECT_EQ(a.value().cores, b.value().cores);
  EXPECT_EQ(a.value().packages, b.value().packages);
  ASSERT_EQ(a.value().numaNodes.size(), b.value().numaNodes.size());
  for (size_t i = 0; i < a.value().numaNodes.size(); ++i)
    EXPECT_EQ(a.value().numaNodes[i].cpus, b.value().numaNodes[i].cpus);
  std::vector<std::string> busA, busB;
  for (const PciDevice& d : a.value().pciDevices) busA.push_back(d.busId);
  for (const PciDevice& d : b.value().pciDevices) busB.push_back(d.busId);
  std::sort(busA.begin(), busA.end());
  EXPECT_EQ(busA, busB);
  for (const PciDevice& d : a.value().pciDevices) {
    const PciDevice* other = findPciDevice(b.value(), d.busId);
    ASSERT_NE(other, nullptr) << d.busId;
    EXPECT_EQ(d.upstream, other->upstream) << d.busId;
    EXPECT_EQ(d.hostBridge, other->hostBridge) << d.busId;
    EXPECT_EQ(d.classCode, other->classCode) << d.busId;
    EXPECT_EQ(d.numaNode, other->numaNode) << d.busId;
  }
  EXPECT_EQ(a.value().netInterfaces, b.value().netInterfaces);
}

TEST(Discover, HonoursHwlocSynthetic) {
#if CHORUS_HAVE_HWLOC
  ScopedEnv synthetic("HWLOC_SYNTHETIC", "pack:2 numa:1 core:4 pu:1");
  Result<LocalTopology> r = discoverLocalTopology();
  ASSERT_TRUE(r.isOk()) << r.status().message();
  const LocalTopology& t = r.value();
  EXPECT_EQ(t.source, "hwloc/Synthetic");
  EXPECT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.cores, 8);
  EXPECT_EQ(t.pus, 8);
  ASSERT_EQ(t.numaNodes.size(), 2u);
  EXPECT_EQ(t.numaNodes[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.numaNodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(numaNodeOfCpu(t, 6), 1);
  EXPECT_TRUE(t.pciDevices.empty());
  ASSERT_NE(findNet(t, "lo"), nullptr);  // interfaces still come from the real /sys
  expectRoundTrip(t);
#else
  GTEST_SKIP() << "built without hwloc";
#endif
}

TEST(Discover, HonoursHwlocXmlFile) {
#if CHORUS_HAVE_HWLOC
  // An XML description of another machine (written by hwloc itself from a synthetic one).
  TempDir dir;
  std::string xml = dir.path() + "/machine.xml";
  hwloc_topology_t other = nullptr;
  ASSERT_EQ(hwloc_topology_init(&other), 0);
  ASSERT_EQ(hwloc_topology_set_synthetic(other, "pack:3 numa:1 core:2 pu:2"), 0);
  ASSERT_EQ(hwloc_topology_load(other), 0);
  ASSERT_EQ(hwloc_topology_export_xml(other, xml.c_str(), 0), 0);
  hwloc_topology_destroy(other);
  ScopedEnv file("HWLOC_XMLFILE", xml);
  Result<LocalTopology> r = discoverLocalTopology();
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().source, "hwloc/XML:" + xml);
  EXPECT_EQ(r.value().packages.size(), 3u);
  EXPECT_EQ(r.value().cores, 6);
  EXPECT_EQ(r.value().pus, 12);
  EXPECT_EQ(r.value().numaNodes.size(), 3u);
  expectRoundTrip(r.value());
#else
  GTEST_SKIP() << "built without hwloc";
#endif
}

TEST(Discover, FakeSysfsTree) {
  TempDir root;
  const std::string cpu = "devices/system/cpu/";
  root.write(cpu + "online", "0-3");
  for (int c = 0; c < 4; ++c) {
    std::string base = cpu + "cpu" + std::to_string(c) + "/";
    root.write(base + "topology/physical_package_id", std::to_string(c / 2));
    root.write(base + "topology/core_id", std::to_string(c % 2));
    root.write(base + "cache/index0/level", "1");
    root.write(base + "cache/index0/type", "Data");
    root.write(base + "cache/index0/size", "32K");
    root.write(base + "cache/index0/shared_cpu_list", std::to_string(c));
    root.write(base + "cache/index3/level", "3");
    root.write(base + "cache/index3/type", "Unified");
    root.write(base + "cache/index3/size", "16384K");
    root.write(base + "cache/index3/shared_cpu_list", c < 2 ? "0-1" : "2-3");
  }
  root.write("devices/system/node/node0/cpulist", "0-1");
  root.write("devices/system/node/node0/meminfo", "Node 0 MemTotal:       16384 kB");
  root.write("devices/system/node/node1/cpulist", "2-3");
  root.write("devices/system/node/node1/meminfo", "Node 1 MemTotal:       32768 kB");
  // A root port and a 25G RoCE NIC below it, on NUMA node 1.
  const std::string port = "devices/pci0000:17/0000:17:01.0/";
  const std::string nic = port + "0000:18:00.0/";
  root.write(port + "class", "0x060400");
  root.write(port + "vendor", "0x8086");
  root.write(port + "device", "0x347a");
  root.write(nic + "class", "0x020000");
  root.write(nic + "vendor", "0x15b3");
  root.write(nic + "device", "0x1017");
  root.write(nic + "numa_node", "1");
  root.write(nic + "current_link_width", "8");
  root.write(nic + "current_link_speed", "8.0 GT/s PCIe");
  root.link("bus/pci/devices/0000:17:01.0", port);
  root.link("bus/pci/devices/0000:18:00.0", nic);
  root.write(nic + "net/fake25g0/flags", "0x1003");
  root.write(nic + "net/fake25g0/operstate", "up");
  root.write(nic + "net/fake25g0/speed", "25000");
  root.write(nic + "net/fake25g0/mtu", "9000");
  root.write(nic + "net/fake25g0/type", "1");
  root.link(nic + "net/fake25g0/device", nic);
  root.link("class/net/fake25g0", nic + "net/fake25g0");
  root.write("devices/virtual/net/fakelo/flags", "0x9");
  root.write("devices/virtual/net/fakelo/operstate", "unknown");
  root.write("devices/virtual/net/fakelo/mtu", "65536");
  root.write("devices/virtual/net/fakelo/type", "772");
  root.link("class/net/fakelo", "devices/virtual/net/fakelo");
  root.write("devices/virtual/net/fakebr0/flags", "0x1002");
  root.write("devices/virtual/net/fakebr0/operstate", "down");
  root.write("devices/virtual/net/fakebr0/mtu", "1500");
  root.link("class/net/fakebr0", "devices/virtual/net/fakebr0");
  const std::string hca = nic + "infiniband/mlx5_7/";
  root.write(hca + "node_guid", "0c42:a103:0065:7a3e");
  root.link(hca + "device", nic);
  root.write(hca + "ports/1/state", "4: ACTIVE");
  root.write(hca + "ports/1/rate", "25 Gb/sec (1X EDR)");
  root.write(hca + "ports/1/link_layer", "Ethernet");
  root.write(hca + "ports/1/gids/0", "fe80:0000:0000:0000:0e42:a1ff:fe65:7a3e");
  root.write(hca + "ports/1/gids/1", "0000:0000:0000:0000:0000:ffff:0a00:0005");
  root.write(hca + "ports/1/gids/2", "0000:0000:0000:0000:0000:0000:0000:0000");
  root.link("class/infiniband/mlx5_7", hca);

  DiscoverOptions options;
  options.sysRoot = root.path();
  options.probeGpus = false;
  Result<LocalTopology> r = discoverLocalTopology(options);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  const LocalTopology& t = r.value();
  EXPECT_EQ(t.source, "sysfs:" + root.path());
  EXPECT_EQ(t.pus, 4);
  EXPECT_EQ(t.cores, 4);
  ASSERT_EQ(t.packages.size(), 2u);
  EXPECT_EQ(t.packages[1].cpus, (std::vector<int>{2, 3}));
  ASSERT_EQ(t.numaNodes.size(), 2u);
  EXPECT_EQ(t.numaNodes[1].memoryBytes, 32768u << 10);
  ASSERT_EQ(t.caches.size(), 2u);
  EXPECT_EQ(t.caches[0], (CacheSummary{1, "data", 32768, 1, 4}));
  EXPECT_EQ(t.caches[1], (CacheSummary{3, "unified", 16u << 20, 2, 2}));

  ASSERT_EQ(t.pciDevices.size(), 1u);  // the root port is a bridge: only named upstream
  const PciDevice& dev = t.pciDevices[0];
  EXPECT_EQ(dev.busId, "0000:18:00.0");
  EXPECT_EQ(dev.vendorId, 0x15b3);
  EXPECT_EQ(dev.classCode, 0x0200);
  EXPECT_EQ(dev.numaNode, 1);
  EXPECT_EQ(dev.linkWidth, 8);
  EXPECT_EQ(dev.linkSpeedGts, 8.0);
  EXPECT_EQ(dev.upstream, (std::vector<std::string>{"0000:17:01.0"}));
  EXPECT_EQ(dev.hostBridge, "0000:17");

  ASSERT_EQ(t.netInterfaces.size(), 3u);
  const NetInterface* eth = findNet(t, "fake25g0");
  ASSERT_NE(eth, nullptr);
  EXPECT_TRUE(eth->up);
  EXPECT_EQ(eth->speedMbps, 25000);
  EXPECT_EQ(eth->mtu, 9000);
  EXPECT_TRUE(eth->addresses.empty());  // no such interface in this namespace
  EXPECT_EQ(eth->pciBusId, "0000:18:00.0");
  EXPECT_EQ(eth->numaNode, 1);
  EXPECT_FALSE(eth->loopback);
  EXPECT_FALSE(eth->isVirtual);
  const NetInterface* lo = findNet(t, "fakelo");
  ASSERT_NE(lo, nullptr);
  EXPECT_TRUE(lo->up);
  EXPECT_TRUE(lo->loopback);
  EXPECT_TRUE(lo->isVirtual);
  EXPECT_EQ(lo->speedMbps, -1);
  EXPECT_EQ(lo->numaNode, -1);
  const NetInterface* br = findNet(t, "fakebr0");
  ASSERT_NE(br, nullptr);
  EXPECT_FALSE(br->up);
  EXPECT_TRUE(br->isVirtual);
  EXPECT_EQ(nameOf(nearestNetInterface(t, 0)), "fake25g0");

  ASSERT_EQ(t.ibDevices.size(), 1u);
  const IbDevice& ib = t.ibDevices[0];
  EXPECT_EQ(ib.name, "mlx5_7");
  EXPECT_EQ(ib.nodeGuid, "0c42:a103:0065:7a3e");
  EXPECT_EQ(ib.pciBusId, "0000:18:00.0");
  EXPECT_EQ(ib.numaNode, 1);
  ASSERT_EQ(ib.ports.size(), 1u);
  EXPECT_EQ(ib.ports[0].state, "ACTIVE");
  EXPECT_EQ(ib.ports[0].rateGbps, 25.0);
  EXPECT_EQ(ib.ports[0].linkLayer, "Ethernet");
  ASSERT_EQ(ib.ports[0].gids.size(), 2u);  // the all-zero entry is skipped
  EXPECT_EQ(ib.ports[0].gids[1].index, 1);
  EXPECT_EQ(ib.ports[0].gids[1].gid, "0000:0000:0000:0000:0000:ffff:0a00:0005");
  EXPECT_TRUE(t.gpus.empty());
  expectRoundTrip(t);
}

TEST(Discover, EmptySysRootStillFindsNoCpusAsAnError) {
  TempDir root;
  DiscoverOptions options;
  options.sysRoot = root.path();
  options.probeGpus = false;
  Result<LocalTopology> r = discoverLocalTopology(options);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find(root.path() + "/devices/system/cpu"), std::string::npos)
      << r.status().message();
}

// ---------------------------------------------------------------------------------------------
// Fixtures and queries

TEST(Fixtures, AllLoadAndRoundTrip) {
  for (const char* name : {"dual_socket_4gpu_2nic.json", "nvlink_8gpu.json", "cpu_2numa.json"}) {
    SCOPED_TRACE(name);
    LocalTopology t = loadFixture(name);
    EXPECT_FALSE(t.hostname.empty());
    expectRoundTrip(t);
  }
}

TEST(Fixtures, DualSocketFourGpus) {
  LocalTopology t = loadFixture("dual_socket_4gpu_2nic.json");
  ASSERT_EQ(t.gpus.size(), 4u);
  ASSERT_EQ(t.packages.size(), 2u);
  ASSERT_EQ(t.numaNodes.size(), 2u);
  EXPECT_EQ(t.pus, 128);
  EXPECT_EQ(numaNodeOfCpu(t, 70), 0);
  EXPECT_EQ(numaNodeOfCpu(t, 100), 1);
  EXPECT_EQ(numaNodeOfCpu(t, 128), -1);
  const std::string g0 = t.gpus[0].pciBusId, g1 = t.gpus[1].pciBusId, g2 = t.gpus[2].pciBusId;
  EXPECT_EQ(pciDistance(t, g0, g0), PciDistance::kSelf);
  EXPECT_EQ(pciDistance(t, g0, g1), PciDistance::kPix);               // one PCIe switch
  EXPECT_EQ(pciDistance(t, g0, "0000:1a:00.0"), PciDistance::kPix);   // the HCA on that switch
  EXPECT_EQ(pciDistance(t, g0, "0000:31:00.0"), PciDistance::kNode);  // NVMe, other root complex
  EXPECT_EQ(pciDistance(t, g0, g2), PciDistance::kSys);
  EXPECT_EQ(pciDistance(t, g0, "0000:99:00.0"), PciDistance::kUnknown);
  EXPECT_STREQ(pciDistanceName(pciDistance(t, g0, g1)), "PIX");
  EXPECT_STREQ(pciDistanceName(pciDistance(t, g0, g2)), "SYS");
  EXPECT_EQ(pciDistance(t, "0000:18:00.0", "18:00.0"), PciDistance::kSelf);  // short form
  const char* nearest[] = {"ib0", "ib0", "ib1", "ib1"};
  for (const Gpu& g : t.gpus) {
    EXPECT_EQ(nameOf(nearestNetInterfaceToPci(t, g.pciBusId)), nearest[g.index]) << g.index;
    const IbDevice* hca = nearestIbDeviceToPci(t, g.pciBusId);
    ASSERT_NE(hca, nullptr);
    EXPECT_EQ(hca->name, g.index < 2 ? "mlx5_0" : "mlx5_1");
    EXPECT_EQ(numaNodeOfPci(t, g.pciBusId), g.index < 2 ? 0 : 1);
  }
  EXPECT_EQ(nameOf(nearestNetInterface(t, 0)), "ib0");
  EXPECT_EQ(nameOf(nearestNetInterface(t, 1)), "ib1");
  EXPECT_EQ(nameOf(nearestNetInterfaceToCpus(t, {40, 41, 100})), "ib1");
  EXPECT_TRUE(nvlinkConnected(t, 0, 1));
  EXPECT_TRUE(nvlinkConnected(t, 3, 2));
  EXPECT_FALSE(nvlinkConnected(t, 1, 2));
  EXPECT_EQ(t.gpus[0].nvlinks[1], 12);
  EXPECT_TRUE(t.gpus[2].p2p[3]);
  EXPECT_FALSE(t.gpus[0].p2p[2]);
  ASSERT_EQ(t.ibDevices[0].ports.size(), 1u);
  EXPECT_EQ(t.ibDevices[0].ports[0].rateGbps, 200.0);
}

TEST(Fixtures, EightGpusOnNvSwitch) {
  LocalTopology t = loadFixture("nvlink_8gpu.json");
  ASSERT_EQ(t.gpus.size(), 8u);
  EXPECT_EQ(t.packages.size(), 2u);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) EXPECT_EQ(nvlinkConnected(t, a, b), a != b) << a << "," << b;
  auto bus = [&](int i) { return t.gpus[static_cast<size_t>(i)].pciBusId; };
  EXPECT_EQ(pciDistance(t, bus(0), bus(1)), PciDistance::kPix);
  EXPECT_EQ(pciDistance(t, bus(0), bus(2)), PciDistance::kNode);
  EXPECT_EQ(pciDistance(t, bus(0), bus(4)), PciDistance::kSys);
  EXPECT_EQ(pciDistance(t, bus(0), "0000:1c:00.0"), PciDistance::kPxb);  // two switch levels
  const char* nearest[] = {"ibp28s0",  "ibp28s0",  "ibp65s0",  "ibp65s0",
                           "ibp161s0", "ibp161s0", "ibp193s0", "ibp193s0"};
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(nameOf(nearestNetInterfaceToPci(t, bus(i))), nearest[i]) << i;
  // Several NICs per node: equal speed, so the name decides; docker0 (virtual, down) never.
  EXPECT_EQ(nameOf(nearestNetInterface(t, 0)), "ibp28s0");
  EXPECT_EQ(nameOf(nearestNetInterface(t, 1)), "ibp161s0");
  EXPECT_EQ(nearestIbDeviceToPci(t, bus(7))->name, "mlx5_3");
}

TEST(Fixtures, CpuOnlyTwoNuma) {
  LocalTopology t = loadFixture("cpu_2numa.json");
  EXPECT_TRUE(t.gpus.empty());
  EXPECT_TRUE(t.ibDevices.empty());
  EXPECT_EQ(numaNodeOfCpu(t, 40), 0);
  EXPECT_EQ(numaNodeOfCpu(t, 20), 1);
  EXPECT_EQ(nameOf(nearestNetInterface(t, 0)), "ens1f0");
  EXPECT_EQ(nameOf(nearestNetInterface(t, 1)), "ens5f0");
  EXPECT_EQ(nameOf(nearestNetInterfaceToCpus(t, {16, 17, 48})), "ens5f0");
  EXPECT_EQ(nameOf(nearestNetInterface(t, -1)), "ens1f0");  // unknown node: the fastest
  EXPECT_EQ(pciDistance(t, "0000:4b:00.0", "0000:99:00.0"), PciDistance::kSys);
  const NetInterface* ens1f0 = findNet(t, "ens1f0");
  ASSERT_NE(ens1f0, nullptr);
  ASSERT_EQ(ens1f0->addresses.size(), 2u);
  EXPECT_EQ(ens1f0->addresses[1].family, AddressFamily::kIpv6);
  EXPECT_EQ(ens1f0->addresses[1].prefixLength, 64);
}

TEST(Topology, CpuListsAndBusIds) {
  std::vector<int> cpus;
  EXPECT_TRUE(parseCpuList("0-3,8,10-11\n", &cpus));
  EXPECT_EQ(cpus, (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(formatCpuList(cpus), "0-3,8,10-11");
  EXPECT_TRUE(parseCpuList("", &cpus));
  EXPECT_TRUE(cpus.empty());
  EXPECT_FALSE(parseCpuList("3-1", &cpus));
  EXPECT_FALSE(parseCpuList("1,,2", &cpus));
  EXPECT_FALSE(parseCpuList("a", &cpus));
  EXPECT_TRUE(isPciBusId("0000:c1:1f.7"));
  EXPECT_FALSE(isPciBusId("0000:c1:20.0"));
  EXPECT_FALSE(isPciBusId("0000:c1:00.8"));
  EXPECT_FALSE(isPciBusId("c1:00.0"));
  EXPECT_EQ(normalizePciBusId("00000000:C1:00.0"), "0000:c1:00.0");  // CUDA's spelling
  EXPECT_EQ(normalizePciBusId("c1:00.0"), "0000:c1:00.0");
  EXPECT_EQ(normalizePciBusId("xyz"), "");
}

// ---------------------------------------------------------------------------------------------
// Errors

const char* kMinimal = R"({
  "chorus_topology": 1,
  "hostname": "h",
  "cores": 2,
  "pus": 2,
  "packages": [{"os_index": 0, "cpus": "0-1"}],
  "numa_nodes": [{"os_index": 0, "cpus": "0-1", "memory_bytes": 1024}]%s
})";

Status parseWith(const std::string& extra) {
  char text[4096];
  snprintf(text, sizeof(text), kMinimal, extra.c_str());
  Result<LocalTopology> r = parseTopology(text, "t.json");
  return r.status();
}

TEST(TopoFileErrors, MinimalDocumentLoads) {
  Status s = parseWith("");
  EXPECT_TRUE(s.isOk()) << s.message();
}

TEST(TopoFileErrors, MalformedJsonHasLineAndColumn) {
  Status s = parseTopology("{\n  \"hostname\": \"h\"\n  \"pus\": 1\n}\n", "bad.json").status();
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_EQ(s.message(),
            "bad.json:3:3: malformed JSON: expected ',' or '}' after a member but found '\"'");
  s = parseTopology("{\"a\": [1, 2,]}", "x.json").status();
  EXPECT_EQ(s.message(),
            "x.json:1:13: malformed JSON: expected a value (object, array, string, number, "
            "true, false or null) but found ']'");
  s = parseTopology("{\"a\": 01}", "x.json").status();
  EXPECT_EQ(s.message(), "x.json:1:8: malformed JSON: leading zeros are not allowed in numbers");
  s = parseTopology("{\"a\": \"x", "x.json").status();
  EXPECT_EQ(s.message(), "x.json:1:9: malformed JSON: unterminated string");
  s = parseTopology("{\"a\": 1, \"a\": 2}", "x.json").status();
  EXPECT_EQ(s.message(), "x.json:1:10: malformed JSON: duplicate member \"a\"");
  s = parseTopology("<system version=\"1\">", "nccl.xml").status();
  EXPECT_EQ(s.message(),
            "nccl.xml:1:1: malformed JSON: expected a JSON value but found '<' (an "
            "XML file? Chorus reads JSON)");
  s = parseTopology("", "empty.json").status();
  EXPECT_NE(s.message().find("empty.json:1:1: malformed JSON: expected a value"),
            std::string::npos);
}

TEST(TopoFileErrors, StructureErrorsNameTheKeyPath) {
  EXPECT_EQ(parseTopology("[]", "t.json").status().message(),
            "t.json:1:1: expected an object at the top level but found an array");
  EXPECT_EQ(parseTopology("{\"hostname\": \"h\"}", "t.json").status().message(),
            "t.json: not a Chorus topology file (the key \"chorus_topology\" is missing)");
  EXPECT_EQ(parseTopology("{\"chorus_topology\": 2}", "t.json").status().message(),
            "t.json:1:21: chorus_topology: version 2 is not supported (this build reads 1)");
  EXPECT_EQ(parseWith(",\n  \"gpu\": []").message(),
            "t.json:8:10: gpu: unknown key (expected one of: chorus_topology, hostname, host_id, "
            "source, cpu_model, cores, pus, packages, numa_nodes, caches, pci_devices, "
            "net_interfaces, ib_devices, gpus)");
  EXPECT_EQ(parseWith(",\n  \"gpus\": [{\"index\": 0, \"name\": \"g\"}]").message(),
            "t.json:8:12: gpus[0].pci_bus_id: required key is missing");
  EXPECT_EQ(parseWith(",\n  \"caches\": [{\"level\": \"1\"}]").message(),
            "t.json:8:24: caches[0].level: expected a number but found the string \"1\"");
  EXPECT_EQ(parseWith(",\n  \"net_interfaces\": [{\"name\": \"e\", \"up\": true, \"mtu\": 1.5}]")
                .message(),
            "t.json:8:55: net_interfaces[0].mtu: expected an integer but found a non-integer "
            "number");
  EXPECT_EQ(parseWith(",\n  \"pci_devices\": [{\"bus_id\": \"17:00.0\"}]").message(),
            "t.json:8:30: pci_devices[0].bus_id: \"17:00.0\" is not a PCI bus id (expected "
            "dddd:bb:dd.f in hex)");
  EXPECT_EQ(
      parseWith(",\n  \"net_interfaces\": [{\"name\": \"e\", \"up\": true, \"numa_node\": 3}]")
          .message(),
      "t.json:8:61: net_interfaces[0].numa_node: NUMA node 3 does not exist (numa_nodes has 0)");
  EXPECT_EQ(parseWith(",\n  \"net_interfaces\": [{\"name\": \"e\", \"up\": true, \"addresses\": "
                      "[{\"family\": \"ipv4\", \"address\": \"10.0.0.300\", \"prefix\": 8}]}]")
                .message(),
            "t.json:8:92: net_interfaces[0].addresses[0].address: \"10.0.0.300\" is not a "
            "numeric ipv4 address");
  EXPECT_EQ(parseWith(",\n  \"gpus\": [{\"index\": 0, \"name\": \"g\", \"pci_bus_id\": "
                      "\"0000:17:00.0\", \"p2p\": [false, true]}]")
                .message(),
            "t.json:8:75: gpus[0].p2p: has 2 entries but there are 1 GPUs");
}

TEST(TopoFileErrors, HexFields) {
  EXPECT_EQ(
      parseWith(",\n  \"host_id\": \"0x-5\"").message(),
      "t.json:8:14: host_id: \"0x-5\" is not a 64-bit hex number (expected \"0x\" and 1 to 16 "
      "hex digits)");
  EXPECT_EQ(parseWith(",\n  \"pci_devices\": [{\"bus_id\": \"0000:17:00.0\", \"vendor_id\": "
                      "\"10de\", \"device_id\": \"0x20b5\", \"class\": \"0x0302\"}]")
                .message(),
            "t.json:8:59: pci_devices[0].vendor_id: \"10de\" is not a 16-bit hex number (expected "
            "e.g. \"0x10de\")");
  Result<LocalTopology> r = parseTopology(
      std::string(R"({"chorus_topology": 1, "hostname": "h", "host_id": "0xFFFFFFFFFFFFFFFF",
      "cores": 0, "pus": 0, "packages": [], "numa_nodes": []})"),
      "t.json");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r.value().hostId, ~uint64_t(0));
}

TEST(Json, StringsNumbersAndWriting) {
  json::Value v;
  json::ParseError error;
  ASSERT_TRUE(json::parse(R"({"s": "a\"b\\c\u00e9\ud83d\ude00\n", "i": 9007199254740993,
                               "d": 0.1, "e": -2.5e3, "n": null, "l": [true, {}]})",
                          &v, &error))
      << error.message;
  EXPECT_EQ(v.find("s")->text, "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_TRUE(v.find("i")->isInteger);
  EXPECT_EQ(v.find("i")->integer, 9007199254740993);  // beyond a double's exact range
  EXPECT_EQ(v.find("d")->number, 0.1);
  EXPECT_EQ(v.find("e")->number, -2500.0);
  EXPECT_EQ(v.find("n")->kind, json::Kind::kNull);
  EXPECT_EQ(
      json::write(v),
      "{\n  \"s\": \"a\\\"b\\\\c\xc3\xa9\xf0\x9f\x98\x80\\n\",\n  \"i\": 9007199254740993,\n"
      "  \"d\": 0.1,\n  \"e\": -2500,\n  \"n\": null,\n  \"l\": [\n    true,\n    {}\n  ]\n}\n");
  EXPECT_FALSE(json::parse("[\"\\ud800\"]", &v, &error));
  EXPECT_EQ(error.message, "expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
  EXPECT_FALSE(json::parse(std::string(200, '['), &v, &error));
  EXPECT_EQ(error.message, "nesting deeper than 100 levels");
  EXPECT_FALSE(json::parse("1e999", &v, &error));
  EXPECT_EQ(error.message, "number 1e999 is out of range");
}

TEST(TopoFileErrors, GpuNumaReferenceInAFixture) {
  // Take a real fixture and point its last GPU at a NUMA node that does not exist.
  std::ifstream in(fixture("dual_socket_4gpu_2nic.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  json::Value doc;
  json::ParseError error;
  ASSERT_TRUE(json::parse(text, &doc, &error)) << error.message;
  for (auto& m : doc.members)
    if (m.first == "gpus")
      for (auto& g : m.second.items[3].members)
        if (g.first == "numa_node") g.second = json::Value::makeInt(5);
  Status s = parseTopology(json::write(doc), "edited.json").status();
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  const std::string& msg = s.message();
  EXPECT_EQ(msg.compare(0, 12, "edited.json:"), 0) << msg;
  EXPECT_NE(msg.find(": gpus[3].numa_node: NUMA node 5 does not exist (numa_nodes has 0, 1)"),
            std::string::npos)
      << msg;
}

TEST(TopoFileErrors, FilesAndEnvironment) {
  TempDir dir;
  std::string missing = dir.path() + "/none.json";
  Status s = loadTopologyFile(missing).status();
  EXPECT_EQ(s.code(), Code::kSystemError);
  EXPECT_EQ(s.message().find("cannot read topology file " + missing + ": No such file"), 0u)
      << s.message();

  for (const char* var :
       {"CHORUS_TOPO_FILE", "NCCL_TOPO_FILE", "CHORUS_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE"})
    unsetenv(var);
  {
    ScopedEnv file("CHORUS_TOPO_FILE", missing);
    s = localTopologyFromEnvironment().status();
    EXPECT_EQ(s.message().find("CHORUS_TOPO_FILE: cannot read topology file " + missing), 0u)
        << s.message();
  }
  std::string bad = dir.path() + "/bad.json";
  dir.write("bad.json", "{\"chorus_topology\": 1,\n \"hostname\": 7}");
  {
    ScopedEnv file("NCCL_TOPO_FILE", bad);
    s = localTopologyFromEnvironment().status();
    EXPECT_EQ(s.message(),
              "NCCL_TOPO_FILE: " + bad + ":2:14: hostname: expected a string but found a number");
  }
  // Load a fixture and dump it elsewhere: the written file reads back equal.
  std::string out = dir.path() + "/out.json";
  {
    ScopedEnv file("CHORUS_TOPO_FILE", fixture("nvlink_8gpu.json"));
    ScopedEnv dump("CHORUS_TOPO_DUMP_FILE", out);
    Result<LocalTopology> r = localTopologyFromEnvironment();
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r.value().gpus.size(), 8u);
    Result<LocalTopology> back = loadTopologyFile(out);
    ASSERT_TRUE(back.isOk()) << back.status().message();
    EXPECT_TRUE(back.value() == r.value());
  }
  // Discovery followed by a dump to a directory that does not exist.
  {
    std::string nowhere = dir.path() + "/no/such/dir/topo.json";
    ScopedEnv dump("CHORUS_TOPO_DUMP_FILE", nowhere);
    s = localTopologyFromEnvironment().status();
    EXPECT_EQ(s.code(), Code::kSystemError);
    EXPECT_EQ(s.message().find("CHORUS_TOPO_DUMP_FILE: cannot write topology file " + nowhere), 0u)
        << s.message();
  }
  // Dumping the discovered topology works and loads back equal.
  {
    ScopedEnv dump("CHORUS_TOPO_DUMP_FILE", out);
    Result<LocalTopology> r = localTopologyFromEnvironment();
    ASSERT_TRUE(r.isOk()) << r.status().message();
    Result<LocalTopology> back = loadTopologyFile(out);
    ASSERT_TRUE(back.isOk()) << back.status().message();
    EXPECT_TRUE(back.value() == r.value()) << describeTopologyDifference(r.value(), back.value());
  }
}

}  // namespace
}  // namespace chorus
