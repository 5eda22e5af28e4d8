// Network devices chosen by NUMA node: the example net plugin made three devices whose PCI
// directories (fakes under a temporary directory) put device 0 on another node than this
// machine's first CPUs and devices 1 and 2 on the same. Two rank processes with shared memory
// disabled run all-reduce on two ring channels through the plugin: the result is exact, each
// rank says which devices its channels take, and every link goes through the near ones, channel
// by channel in turn; with CHORUS_NET_NUMA_DEVICES=0, channel c through device c. Rails: the
// example plugin as a rail-only fabric (EXAMPLE_NET_RAILS), its two devices' rails in another
// order on each rank, as on hosts whose NICs enumerate differently: every link joins the same
// rail at both ends (a link across rails would fail to connect). Where the plugin takes grouped
// receives (the example's default), a slot's header and data are one; with EXAMPLE_NET_MAX_RECVS=1
// two, and the result is exact either way.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"

namespace {

std::string makeDevice(const std::string& root, const std::string& name, int node) {
  const std::string dir = root + "/" + name;
  EXPECT_EQ(mkdir(dir.c_str(), 0755), 0);
  std::ofstream(dir + "/numa_node") << node << "\n";
  return dir;
}

std::vector<std::string> readLogs(const std::string& dir) {
  std::vector<std::string> lines;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return lines;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name).rfind("log.", 0) != 0) continue;
    std::ifstream in(dir + "/" + e->d_name);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  closedir(d);
  return lines;
}

// What the ranks' logs say of one run: each rank's NUMA node and chosen devices, and every
// link through the plugin as (channel, device).
struct Seen {
  std::vector<std::string> listings;  // each rank's list of the plugin's devices
  std::set<int> nodes;
  std::set<std::string> chosen;
  std::set<std::pair<int, int>> links;
  // (channel, device, rail) of every link's sending and receiving end.
  std::set<std::tuple<int, int, int>> sends, receives;
  int groupedReceives = 0;  // receiving ends that post a slot as one grouped receive
};

// Two rank processes run an exact all-reduce on two ring channels through the example plugin
// with the devices in paths (and the settings in extra); logs go to a directory of their own.
Seen runThroughPlugin(const std::string& root, const std::string& paths,
                      const std::vector<std::string>& extra,
                      const std::function<std::vector<std::string>(int)>& rankEnv = nullptr) {
  static int runs = 0;
  const std::string logs = root + "/logs" + std::to_string(++runs);
  EXPECT_EQ(mkdir(logs.c_str(), 0755), 0);
  std::vector<std::string> env = {"CHORUS_SHM_DISABLE=1",
                                  std::string("NCCL_NET_PLUGIN=") + getenv("NET_EXAMPLE"),
                                  "EXAMPLE_NET_PCI_PATHS=" + paths,
                                  "CHORUS_ALGO=ring",
                                  "CHORUS_MIN_CHANNELS=2",
                                  "CHORUS_MAX_CHANNELS=2",
                                  "CHORUS_DEBUG=INFO",
                                  "CHORUS_DEBUG_SUBSYS=NET",
                                  "CHORUS_DEBUG_FILE=" + logs + "/log.%p"};
  env.insert(env.end(), extra.begin(), extra.end());
  const size_t count = 1 << 18;
  auto body = [&](int rank, int nranks, ncclComm_t& comm) {
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>((i % 1000) + rank);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr),
              ncclSuccess);
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[i], static_cast<float>(nranks * (i % 1000) + nranks * (nranks - 1) / 2)) << i;
  };
  if (rankEnv)
    chorus_test::runRankProcesses(2, env, rankEnv, body);
  else
    chorus_test::runRanks(2, chorus_test::RankMode::kProcesses, env, body);
  const std::regex choice(
      "(this rank is on NUMA node (-?[0-9]+)|placement by NUMA node is off): its channels use "
      "devices? ([0-9,]+)");
  const std::regex link(
      "(sending to|receiving from) rank [0-9]+ channel ([0-9]+) through net plugin "
      "ExampleSocket \\(device ([0-9]+)(, rail ([0-9]+) plane [0-9]+)?\\)");
  Seen seen;
  for (const std::string& line : readLogs(logs)) {
    std::smatch m;
    if (std::regex_search(line, m, choice)) {
      seen.listings.push_back(line.substr(line.find("devices ")));
      if (m[2].matched) seen.nodes.insert(std::stoi(m[2]));
      seen.chosen.insert(m[3]);
    }
    if (!std::regex_search(line, m, link)) continue;
    const int channel = std::stoi(m[2]), device = std::stoi(m[3]);
    const int rail = m[5].matched ? std::stoi(m[5]) : -1;
    seen.links.insert({channel, device});
    (m[1] == "sending to" ? seen.sends : seen.receives).insert({channel, device, rail});
    if (line.find("in one grouped receive") != std::string::npos) ++seen.groupedReceives;
  }
  return seen;
}

TEST(NetDevices, ChannelsTakeTheDevicesOnTheRanksNumaNode) {
  ASSERT_NE(getenv("NET_EXAMPLE"), nullptr);
  char dir[] = "/tmp/chorus-netdevs-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string root = dir;
  // Node 0 for the near devices and 1 for the far one; which is near is read back from the
  // ranks' logs (the node of their first CPU).
  const std::string paths = makeDevice(root, "far", 1) + "," + makeDevice(root, "near1", 0) + "," +
                            makeDevice(root, "near2", 0);
  const Seen byNuma = runThroughPlugin(root, paths, {});
  // Off: channel c takes device c on both ranks, whatever their node. The plugin takes one
  // buffer a receive here, so a slot's header and data are two receives.
  const Seen byIndex =
      runThroughPlugin(root, paths, {"CHORUS_NET_NUMA_DEVICES=0", "EXAMPLE_NET_MAX_RECVS=1"});
  EXPECT_EQ(byIndex.groupedReceives, 0);
  EXPECT_EQ(byNuma.groupedReceives, 4) << "2 ranks x 2 channels, each one grouped receive";
  std::filesystem::remove_all(root);
  EXPECT_EQ(byIndex.chosen, std::set<std::string>{"0,1,2"});
  EXPECT_TRUE(byIndex.nodes.empty()) << "with placement off no rank names its node as the reason";
  EXPECT_EQ(byIndex.links, (std::set<std::pair<int, int>>{{0, 0}, {1, 1}}));
  ASSERT_EQ(byNuma.nodes.size(), 1u) << "both ranks log their node once";
  const int node = *byNuma.nodes.begin();
  if (node != 0 && node != 1) GTEST_SKIP() << "this machine's first CPU is on NUMA node " << node;
  if (node == 0) {
    EXPECT_EQ(byNuma.chosen, std::set<std::string>{"1,2"});
    EXPECT_EQ(byNuma.links, (std::set<std::pair<int, int>>{{0, 1}, {1, 2}}));
  } else {
    EXPECT_EQ(byNuma.chosen, std::set<std::string>{"0"});
    EXPECT_EQ(byNuma.links, (std::set<std::pair<int, int>>{{0, 0}, {1, 0}}));
  }
}

// Rank 0's devices are on rails 0 and 1, rank 1's on rails 1 and 0, and each channel's
// receiver listens on its device c: its sender must take its device 1 - c, on the same rail.
TEST(NetDevices, BothEndsOfALinkTakeTheSameRail) {
  ASSERT_NE(getenv("NET_EXAMPLE"), nullptr);
  char dir[] = "/tmp/chorus-netrails-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string root = dir;
  const std::string paths = makeDevice(root, "nic0", 0) + "," + makeDevice(root, "nic1", 0);
  const Seen seen = runThroughPlugin(root, paths, {"CHORUS_NET_NUMA_DEVICES=0"}, [](int rank) {
    return std::vector<std::string>{rank == 0 ? "EXAMPLE_NET_RAILS=0,1" : "EXAMPLE_NET_RAILS=1,0"};
  });
  std::filesystem::remove_all(root);
  using Ends = std::set<std::tuple<int, int, int>>;
  // (channel, device, rail): rank 0 receives channel 0 on rail 0 and channel 1 on rail 1, rank 1
  // the other way round.
  EXPECT_EQ(seen.receives, (Ends{{0, 0, 0}, {0, 0, 1}, {1, 1, 1}, {1, 1, 0}}));
  EXPECT_EQ(seen.sends, (Ends{{0, 1, 1}, {0, 1, 0}, {1, 0, 0}, {1, 0, 1}}));
}

// Two ports of one NIC (one PCI directory) and another NIC: the ports are one virtual device
// (makeVDevice), Chorus's device 0, through which the links of both channels go.
TEST(NetDevices, PortsOfOneNicRunAsOneVirtualDevice) {
  ASSERT_NE(getenv("NET_EXAMPLE"), nullptr);
  char dir[] = "/tmp/chorus-netfuse-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string root = dir;
  const std::string nicA = makeDevice(root, "nicA", 0), nicB = makeDevice(root, "nicB", 1);
  const Seen seen =
      runThroughPlugin(root, nicA + "," + nicA + "," + nicB, {"CHORUS_NET_NUMA_DEVICES=0"});
  std::filesystem::remove_all(root);
  ASSERT_EQ(seen.listings.size(), 2u);
  for (const std::string& listing : seen.listings)
    EXPECT_EQ(listing.rfind("devices 0 example0+example1 (NUMA node 0, rail 0 plane 0), 1 "
                            "example2 (NUMA node 1, rail 0 plane 0);",
                            0),
              0u)
        << listing;
  EXPECT_EQ(seen.links, (std::set<std::pair<int, int>>{{0, 0}, {1, 1}}));
}

}  // namespace
