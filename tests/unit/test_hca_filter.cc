// NCCL_IB_HCA filters over the HCA ports of a fixture host (two HCAs of one port each).
#include <gtest/gtest.h>

#include <cstdlib>
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

// A RoCE port's GID table as mlx5 shows it: each address once per RoCE version.
IbPort rocePort() {
  IbPort p;
  p.port = 1;
  p.linkLayer = "Ethernet";
  p.gids = {{0, "fe80:0000:0000:0000:0e42:a1ff:fe5f:0a3c", "IB/RoCE v1"},
            {1, "fe80:0000:0000:0000:0e42:a1ff:fe5f:0a3c", "RoCE v2"},
            {2, "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1"},
            {3, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2"},
            {4, "fd00:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1"},
            {5, "fd00:0000:0000:0000:0000:0000:0000:0001", "RoCE v2"}};
  return p;
}

int gid(const IbPort& p, int index, int version, int family) {
  GidPolicy policy;
  policy.index = index;
  policy.roceVersion = version;
  policy.family = family;
  policy.source = "NCCL_IB_GID_INDEX";
  Result<int> r = selectGidIndex("mlx5_0", p, policy);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.value() : -100;
}

TEST(GidSelection, RoceTakesTheVersionAndFamilyAsked) {
  const IbPort p = rocePort();
  EXPECT_EQ(gid(p, -1, 2, 2), 3);   // RoCE v2, IPv4 (the default)
  EXPECT_EQ(gid(p, -1, 1, 2), 2);   // RoCE v1, IPv4
  EXPECT_EQ(gid(p, -1, 2, 10), 5);  // RoCE v2, IPv6 (not link-local)
  EXPECT_EQ(gid(p, 4, 2, 2), 4);    // an index asked for wins
  // Only link-local addresses: the version asked for.
  IbPort local = p;
  local.gids.resize(2);
  EXPECT_EQ(gid(local, -1, 2, 2), 1);
  // Types unknown (older kernels): the lowest that is not link-local.
  IbPort untyped = p;
  for (IbGid& g : untyped.gids) g.type.clear();
  EXPECT_EQ(gid(untyped, -1, 2, 2), 2);
  // InfiniBand addresses by LID: GID 0.
  IbPort ib;
  ib.linkLayer = "InfiniBand";
  ib.gids = {{0, "fe80:0000:0000:0000:b8ce:f603:00a1:2b3c", ""}};
  EXPECT_EQ(gid(ib, -1, 2, 2), 0);
}

TEST(GidSelection, MissingGidsAndBadSettingsAreNamed) {
  GidPolicy policy;
  policy.index = 9;
  policy.source = "NCCL_IB_GID_INDEX";
  Result<int> r = selectGidIndex("mlx5_0", rocePort(), policy);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("NCCL_IB_GID_INDEX=9: mlx5_0 port 1 has no GID at that "
                                      "index (GIDs: 0 fe80:"),
            std::string::npos)
      << r.status().message();
  IbPort empty;
  empty.linkLayer = "Ethernet";
  r = selectGidIndex("mlx5_2", empty, GidPolicy{});
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("mlx5_2 port 1 (RoCE) has no GID"), std::string::npos);

  setenv("NCCL_IB_ROCE_VERSION_NUM", "3", 1);
  Result<GidPolicy> bad = gidPolicyFromEnvironment();
  unsetenv("NCCL_IB_ROCE_VERSION_NUM");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("NCCL_IB_ROCE_VERSION_NUM=3: expected 1 or 2"),
            std::string::npos)
      << bad.status().message();
  setenv("CHORUS_IB_ADDR_FAMILY", "AF_UNIX", 1);
  bad = gidPolicyFromEnvironment();
  unsetenv("CHORUS_IB_ADDR_FAMILY");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("CHORUS_IB_ADDR_FAMILY=AF_UNIX"), std::string::npos);
  setenv("NCCL_IB_GID_INDEX", "3", 1);
  Result<GidPolicy> good = gidPolicyFromEnvironment();
  unsetenv("NCCL_IB_GID_INDEX");
  ASSERT_TRUE(good.isOk()) << good.status().message();
  EXPECT_EQ(good.value().index, 3);
  EXPECT_EQ(good.value().source, "NCCL_IB_GID_INDEX");
}

}  // namespace
}  // namespace chorus
