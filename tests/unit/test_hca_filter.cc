// NCCL_IB_HCA filters over the HCA ports of a fixture host (two HCAs of one port each).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "topo/hca_filter.h"
#include "topo/topo_file.h"

namespace chorus {
namespace {

std::vector<std::string> ports(const LocalTopology& t, const std::string& spec) {
  Result<std::vector<HcaPort>> r = selectHcaPorts(t, spec, "NCCL_IB_HCA");
  EXPECT_TRUE(r.isOk()) << spec << ": " << r.status().message();
  std::vector<std::string> out;
  if (r.isOk())
    for (const HcaPort& p : r.value()) out.push_back(p.device + ":" + std::to_string(p.port));
  return out;
}

TEST(HcaFilter, PrefixesPortsExactNamesAndExclusion) {
  Result<LocalTopology> t =
      loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/dual_socket_4gpu_2nic.json");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const LocalTopology& topo = t.value();
  EXPECT_EQ(ports(topo, ""), (std::vector<std::string>{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(ports(topo, "mlx5"), (std::vector<std::string>{"mlx5_0:1", "mlx5_1:1"}));
  EXPECT_EQ(ports(topo, "mlx5_1"), (std::vector<std::string>{"mlx5_1:1"}));
  EXPECT_EQ(ports(topo, "mlx5_0:1"), (std::vector<std::string>{"mlx5_0:1"}));
  EXPECT_EQ(ports(topo, "^mlx5_0"), (std::vector<std::string>{"mlx5_1:1"}));
  EXPECT_EQ(ports(topo, "=mlx5_1"), (std::vector<std::string>{"mlx5_1:1"}));
  EXPECT_EQ(ports(topo, "=mlx5_1, mlx5_0"), (std::vector<std::string>{"mlx5_0:1", "mlx5_1:1"}));
  for (const char* none : {"=mlx5", "mlx5_0:2", "^mlx5", "bnxt_re"}) {
    Result<std::vector<HcaPort>> r = selectHcaPorts(topo, none, "NCCL_IB_HCA");
    ASSERT_FALSE(r.isOk()) << none;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(std::string("NCCL_IB_HCA=\"") + none + "\""),
              std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("available: mlx5_0:1, mlx5_1:1"), std::string::npos);
  }
}

TEST(HcaFilter, NoHcaIsNoError) {
  Result<LocalTopology> t = loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/cpu_2numa.json");
  ASSERT_TRUE(t.isOk());
  Result<std::vector<HcaPort>> r = selectHcaPorts(t.value(), "mlx5", "NCCL_IB_HCA");
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r.value().empty());
}

}  // namespace
}  // namespace chorus
