// Which interface a rank prefers: the ones on the NUMA node its CPUs belong to, then those of
// unknown node, then the rest, faster first; loopback, virtual and down interfaces never.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/peer_net.h"
#include "core/topo_report.h"
#include "transport/net_plugin/net_plugin.h"
#include "topo/topo_file.h"

namespace chorus {
namespace {

LocalTopology fixture(const char* name) {
  Result<LocalTopology> t = loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/" + name);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.isOk() ? t.take() : LocalTopology();
}

std::vector<int> cpusOfNode(const LocalTopology& t, int node) {
  const NumaNode* n = findNumaNode(t, node);
  return n ? n->cpus : std::vector<int>();
}

TEST(Placement, InterfacesOnTheLocalNumaNodeComeFirst) {
  LocalTopology cpu = fixture("cpu_2numa.json");
  EXPECT_EQ(interfacesByLocality(cpu, cpusOfNode(cpu, 0)),
            (std::vector<std::string>{"ens1f0", "ens5f0"}));
  EXPECT_EQ(interfacesByLocality(cpu, cpusOfNode(cpu, 1)),
            (std::vector<std::string>{"ens5f0", "ens1f0"}));
  // A process spread over both nodes goes with the node holding most of its CPUs.
  std::vector<int> mixed = cpusOfNode(cpu, 1);
  mixed.push_back(cpusOfNode(cpu, 0).front());
  EXPECT_EQ(interfacesByLocality(cpu, mixed).front(), "ens5f0");
}

TEST(Placement, LoopbackVirtualAndDownInterfacesAreLeftOut) {
  LocalTopology dgx = fixture("nvlink_8gpu.json");
  std::vector<std::string> order = interfacesByLocality(dgx, cpusOfNode(dgx, 1));
  ASSERT_EQ(order.size(), 4u);
  for (const std::string& name : order) {
    EXPECT_NE(name, "lo");
    EXPECT_NE(name, "docker0");
  }
  // Node 1's two HCAs first.
  EXPECT_TRUE((order[0] == "ibp161s0" && order[1] == "ibp193s0") ||
              (order[0] == "ibp193s0" && order[1] == "ibp161s0"));
}

TEST(Placement, UnknownCpusKeepTheFastestFirst) {
  LocalTopology dual = fixture("dual_socket_4gpu_2nic.json");
  // Both HCAs' interfaces run at 200 Gb/s: without a home node they keep their order.
  EXPECT_EQ(interfacesByLocality(dual, {}), (std::vector<std::string>{"ib0", "ib1"}));
}

// A plugin of devices with given speeds and no traffic: what the ranks publish about it.
class SpeedsOnly : public NetPlugin {
 public:
  explicit SpeedsOnly(std::vector<int> mbps) : mbps_(std::move(mbps)) {}
  const char* name() const override { return "SpeedsOnly"; }
  int version() const override { return 12; }
  const std::string& library() const override { return library_; }
  int devices() const override { return static_cast<int>(mbps_.size()); }
  Status properties(int dev, Properties* out) override {
    if (mbps_[static_cast<size_t>(dev)] < 0) return internalError("device %d is broken", dev);
    out->name = "dev" + std::to_string(dev);
    out->speedMbps = mbps_[static_cast<size_t>(dev)];
    return Status::ok();
  }
  Status listen(int, void*, void**) override { return unused(); }
  Status connect(int, void*, void**) override { return unused(); }
  Status accept(void*, void**) override { return unused(); }
  Status regMr(void*, void*, size_t, void**) override { return unused(); }
  Status deregMr(void*, void*) override { return unused(); }
  Status isend(void*, void*, size_t, int, void*, void**) override { return unused(); }
  Status irecv(void*, void*, size_t, int, void*, void**) override { return unused(); }
  Status test(void*, bool*, size_t*) override { return unused(); }
  Status closeSend(void*) override { return unused(); }
  Status closeRecv(void*) override { return unused(); }
  Status closeListen(void*) override { return unused(); }

 private:
  static Status unused() { return internalError("not for traffic"); }
  std::vector<int> mbps_;
  std::string library_ = "none";
};

PeerInfo peer(uint64_t host, const char* net, std::vector<int> mbps = {}) {
  PeerInfo p;
  std::memset(&p, 0, sizeof p);
  p.hostId = host;
  p.numaNode = -1;
  snprintf(p.netName, sizeof p.netName, "%s", net);
  for (size_t d = 0; d < mbps.size(); ++d) p.netDevMbps[d] = mbps[d];
  return p;
}

// Devices of unknown NUMA node are all a rank's; one whose properties fail counts no speed.
TEST(Placement, RanksPublishTheSpeedOfTheirNetDevices) {
  PeerInfo me = peer(1, "SpeedsOnly", {7, 7, 7});
  describeNetDevices(nullptr, nullptr, &me);
  for (int d = 0; d < kMaxNetDevices; ++d) EXPECT_EQ(me.netDevMbps[d], 0) << d;
  SpeedsOnly plugin({100000, -1, 25000});
  describeNetDevices(&plugin, nullptr, &me);
  EXPECT_EQ(me.netDevMbps[0], 100000);
  EXPECT_EQ(me.netDevMbps[1], 0);
  EXPECT_EQ(me.netDevMbps[2], 25000);
  EXPECT_EQ(me.netDevMbps[3], 0);
}

// A rank's link is its own devices added up, a host's each device its ranks use counted once;
// the slowest rank's and the slowest host's are the figures.
TEST(Placement, NetDeviceLinksOfTheSlowestRankAndHost) {
  // Host 1: two ranks on devices 0 and 1 (100 Gbit/s each, 200 together); host 2: two ranks
  // sharing device 0, which one of them reports faster (100 Gbit/s counted once, at the higher
  // figure).
  std::vector<PeerInfo> peers = {peer(1, "X", {100000}), peer(1, "X", {0, 100000}),
                                 peer(2, "X", {100000}), peer(2, "X", {90000})};
  EXPECT_TRUE(netPluginBetweenHosts(peers));
  NetDeviceLinks links = netDeviceLinks(peers);
  EXPECT_DOUBLE_EQ(links.rankGBps, 90000 / 8000.0);
  EXPECT_DOUBLE_EQ(links.hostGBps, 100000 / 8000.0);
  // Host 2's second rank also takes device 3: 290 Gbit/s on its own, host 2 300 together;
  // the slowest rank now has 100, the slowest host (1) 200.
  peers[3].netDevMbps[3] = 200000;
  links = netDeviceLinks(peers);
  EXPECT_DOUBLE_EQ(links.rankGBps, 100000 / 8000.0);
  EXPECT_DOUBLE_EQ(links.hostGBps, 200000 / 8000.0);
  // A rank whose devices report no speed: unknown.
  peers.push_back(peer(3, "X"));
  links = netDeviceLinks(peers);
  EXPECT_DOUBLE_EQ(links.rankGBps, 0);
  EXPECT_DOUBLE_EQ(links.hostGBps, 0);
}

// The plugin carries the network only when every rank loaded the same one and some ranks do
// not share memory.
TEST(Placement, NetPluginBetweenHostsNeedsEveryRankOnIt) {
  EXPECT_FALSE(netPluginBetweenHosts({peer(1, "X"), peer(1, "X")}));  // shared memory only
  EXPECT_TRUE(netPluginBetweenHosts({peer(1, "X"), peer(2, "X")}));
  EXPECT_FALSE(netPluginBetweenHosts({peer(1, "X"), peer(2, "Y")}));
  EXPECT_FALSE(netPluginBetweenHosts({peer(1, ""), peer(2, "")}));
  EXPECT_FALSE(netPluginBetweenHosts({peer(1, "X"), peer(2, "X"), peer(3, "")}));
  std::vector<PeerInfo> oneHost = {peer(1, "X"), peer(1, "X")};
  oneHost[1].shmDisabled = 1;
  EXPECT_TRUE(netPluginBetweenHosts(oneHost));
}

}  // namespace
}  // namespace chorus
