// Which interface a rank prefers: the ones on the NUMA node its CPUs belong to, then those of
// unknown node, then the rest, faster first; loopback, virtual and down interfaces never.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/topo_report.h"
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

}  // namespace
}  // namespace chorus
