// NCCL's net plugin ABI in Chorus: the declarations' layout against the documented one (LP64),
// how NCCL_NET_PLUGIN's value names libraries, and loading and using the example plugin of
// each version (v12, v11, v10, v9, v8) through Chorus's wrapper: a connection over loopback that
// moves messages of several sizes, compared byte for byte, a grouped receive whose messages come
// out of order, and a message of the wrong tag refused.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "topo/topo_file.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"
#include "tests/unit/net_plugin_testing.h"

namespace {

using chorus::NetPlugin;

// Sizes and offsets of the documented layout.
static_assert(sizeof(ncclNetProperties_v8_t) == 64, "v8 properties");
static_assert(offsetof(ncclNetProperties_v8_t, ptrSupport) == 24, "");
static_assert(offsetof(ncclNetProperties_v8_t, speed) == 32, "");
static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "");
static_assert(offsetof(ncclNetProperties_v8_t, maxRecvs) == 48, "");
static_assert(offsetof(ncclNetProperties_v8_t, netDeviceVersion) == 56, "");
static_assert(sizeof(ncclNetProperties_v9_t) == 104, "v9 properties");
static_assert(offsetof(ncclNetProperties_v9_t, forceFlush) == 32, "");
static_assert(offsetof(ncclNetProperties_v9_t, speed) == 36, "");
static_assert(offsetof(ncclNetProperties_v9_t, maxRecvs) == 52, "");
static_assert(offsetof(ncclNetProperties_v9_t, vProps) == 64, "");
static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "");
static_assert(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96, "");
static_assert(sizeof(ncclNetVDeviceProps_v9_t) == 20, "");
static_assert(sizeof(ncclNetDeviceHandle_v8_t) == 32, "");
static_assert(offsetof(ncclNetDeviceHandle_v8_t, size) == 16, "");
static_assert(sizeof(ncclNet_v8_t) == 19 * sizeof(void*), "v8: 19 members");
static_assert(sizeof(ncclNet_v9_t) == 20 * sizeof(void*), "v9: 20 members");
static_assert(sizeof(ncclNet_v10_t) == 20 * sizeof(void*), "v10: 20 members");
static_assert(offsetof(ncclNet_v8_t, isend) == 10 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v8_t, test) == 13 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v8_t, irecvConsumed) == 18 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v9_t, makeVDevice) == 19 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v10_t, connect) == 5 * sizeof(void*), "");
static_assert(sizeof(ncclNetProperties_v11_t) == 112, "v11 properties");
static_assert(offsetof(ncclNetProperties_v11_t, vProps) == 64, "");
static_assert(offsetof(ncclNetProperties_v11_t, maxCollBytes) == 96, "");
static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "");
static_assert(sizeof(ncclNetAttr_v11_t) == 44, "");
static_assert(offsetof(ncclNetAttr_v11_t, recvCommAttr) == 16, "");
static_assert(offsetof(ncclNetAttr_v11_t, proto) == 40, "");
static_assert(sizeof(ncclNet_v11_t) == 22 * sizeof(void*), "v11: 22 members");
static_assert(offsetof(ncclNet_v11_t, listen) == 4 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v11_t, isend) == 10 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v11_t, makeVDevice) == 19 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v11_t, finalize) == 20 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v11_t, setNetAttr) == 21 * sizeof(void*), "");
// v12: eight devices per virtual NIC, a rail and a plane at the end of the properties.
static_assert(sizeof(ncclNetVDeviceProps_v12_t) == 36, "");
static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v12 properties");
static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "");
static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "");
static_assert(offsetof(ncclNetProperties_v12_t, maxCollBytes) == 112, "");
static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "");
static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "");
static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "");
static_assert(sizeof(ncclNet_v12_t) == 22 * sizeof(void*), "v12: 22 members");
static_assert(offsetof(ncclNet_v12_t, regMrDmaBuf) == 8 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v12_t, irecv) == 11 * sizeof(void*), "");
static_assert(offsetof(ncclNet_v12_t, setNetAttr) == 21 * sizeof(void*), "");

TEST(NetPluginCandidates, FollowNcclNetPlugin) {
  using V = std::vector<std::string>;
  EXPECT_EQ(chorus::netPluginCandidates(nullptr), V{"libnccl-net.so"});
  EXPECT_EQ(chorus::netPluginCandidates("aws-ofi"), (V{"aws-ofi", "libnccl-net-aws-ofi.so"}));
  EXPECT_EQ(chorus::netPluginCandidates("/opt/x/libnccl-net-x.so"), V{"/opt/x/libnccl-net-x.so"});
  EXPECT_EQ(chorus::netPluginCandidates("libfoo.so"), V{"libfoo.so"});
  EXPECT_EQ(chorus::netPluginCandidates("none"), V{});
  EXPECT_EQ(chorus::netPluginCandidates("NONE"), V{});
  EXPECT_EQ(chorus::netPluginCandidates(""), V{});
  EXPECT_EQ(chorus::netPluginCandidates("a, none,libb.so"),
            (V{"a", "libnccl-net-a.so", "libb.so"}));
}

TEST(NetPluginLoad, ErrorsSayWhy) {
  auto missing = chorus::loadNetPlugin("libnccl-net-no-such-plugin.so");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("cannot load libnccl-net-no-such-plugin.so"),
            std::string::npos)
      << missing.status().message();
  auto notPlugin = chorus::loadNetPlugin("libm.so.6");
  ASSERT_FALSE(notPlugin.isOk());
  EXPECT_NE(
      notPlugin.status().message().find("exports no ncclNetPlugin_v12, _v11, _v10, _v9 or _v8"),
      std::string::npos)
      << notPlugin.status().message();
}

void expectMessagesArrive(const char* env, int version) {
  const char* path = getenv(env);
  ASSERT_NE(path, nullptr) << env << " names the example plugin built for v" << version;
  auto loaded = chorus::loadNetPlugin(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  NetPlugin& p = *loaded.value();
  EXPECT_EQ(p.version(), version);
  EXPECT_STREQ(p.name(), "ExampleSocket");
  EXPECT_EQ(p.devices(), 1);
  NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(0, &props).isOk());
  EXPECT_EQ(props.name, "example0");
  EXPECT_EQ(props.maxRecvs, 8);
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.maxMessageBytes, size_t(1) << 30);
  EXPECT_EQ(props.pciPath, "");  // no EXAMPLE_NET_PCI_PATHS: a virtual device

  void* send = nullptr;
  void* recv = nullptr;
  connectPair(p, 0, &send, &recv);
  for (size_t bytes : {size_t(0), size_t(1), size_t(4096), size_t(3) << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> out(bytes), in(bytes + 64, 0xee);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 7 + bytes);
    void *smr = nullptr, *rmr = nullptr;
    ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
    ASSERT_TRUE(p.regMr(recv, in.data(), in.size(), &rmr).isOk());
    void *sreq = nullptr, *rreq = nullptr;
    ASSERT_TRUE(p.irecv(recv, in.data(), in.size(), 3, rmr, &rreq).isOk());
    ASSERT_TRUE(p.isend(send, out.data(), out.size(), 3, smr, &sreq).isOk());
    ASSERT_NE(rreq, nullptr);
    ASSERT_NE(sreq, nullptr);
    bool sdone = false, rdone = false;
    size_t sent = 0, got = 0;
    for (long i = 0; i < 10000000 && !(sdone && rdone); ++i) {
      if (!sdone) {
        ASSERT_TRUE(p.test(sreq, &sdone, &sent).isOk());
      }
      if (!rdone) {
        ASSERT_TRUE(p.test(rreq, &rdone, &got).isOk());
      }
    }
    ASSERT_TRUE(sdone && rdone);
    EXPECT_EQ(sent, bytes);
    EXPECT_EQ(got, bytes);
    if (bytes > 0) {
      EXPECT_EQ(memcmp(in.data(), out.data(), bytes), 0);
    }
    EXPECT_EQ(in[bytes], 0xee);  // nothing past the message
    EXPECT_TRUE(p.deregMr(send, smr).isOk());
    EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
  }
  const size_t grouped[3] = {100, 70000, 0};
  expectGroupedReceive(p, send, recv, grouped);
  // A message whose tag the receive does not have is refused, not delivered.
  std::vector<unsigned char> out(64, 9), in(64, 0);
  void *smr = nullptr, *rmr = nullptr;
  ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
  ASSERT_TRUE(p.regMr(recv, in.data(), in.size(), &rmr).isOk());
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_TRUE(p.irecv(recv, in.data(), in.size(), 3, rmr, &rreq).isOk());
  ASSERT_TRUE(p.isend(send, out.data(), out.size(), 4, smr, &sreq).isOk());
  bool sdone = false, rdone = false;
  chorus::Status refused = chorus::Status::ok();
  for (long i = 0; i < 10000000 && refused.isOk() && !rdone; ++i) {
    if (!sdone) {
      ASSERT_TRUE(p.test(sreq, &sdone, nullptr).isOk());
    }
    refused = p.test(rreq, &rdone, nullptr);
  }
  EXPECT_FALSE(refused.isOk());
  EXPECT_FALSE(rdone);
  EXPECT_EQ(in[0], 0);
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

TEST(NetPluginChoice, FollowsNcclNetPluginAndNcclNet) {
  const char* v12 = getenv("NET_EXAMPLE_V12");
  const char* v11 = getenv("NET_EXAMPLE_V11");
  const char* v10 = getenv("NET_EXAMPLE_V10");
  const char* v9 = getenv("NET_EXAMPLE_V9");
  ASSERT_NE(v12, nullptr);
  ASSERT_NE(v11, nullptr);
  ASSERT_NE(v10, nullptr);
  ASSERT_NE(v9, nullptr);
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v12}}), "ExampleSocket v12");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v11}}), "ExampleSocket v11");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v10}}), "ExampleSocket v10");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v9}}), "ExampleSocket v9");
  // Chorus's own name beats NCCL's; a list is tried in order; NCCL_NET matches the table's name.
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", "none"}, {"CHORUS_NET_PLUGIN", v9}}),
            "ExampleSocket v9");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", (std::string("no-such,") + v10).c_str()},
                           {"NCCL_NET", "examplesocket"}}),
            "ExampleSocket v10");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", "none"}}), "none");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v10}, {"NCCL_NET", "Socket"}}), "none");
  // Chorus's sockets behind the interface: when nothing else is loaded, or asked for by name.
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", "none"}, {"CHORUS_SOCKET_NET", "1"}}), "Socket v12");
  EXPECT_EQ(
      chooseInChild({{"NCCL_NET_PLUGIN", v10}, {"NCCL_NET", "Socket"}, {"CHORUS_SOCKET_NET", "1"}}),
      "Socket v12");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v10}, {"CHORUS_SOCKET_NET", "1"}}),
            "ExampleSocket v10");
  const std::string badSocketNet =
      chooseInChild({{"NCCL_NET_PLUGIN", "none"}, {"CHORUS_SOCKET_NET", "2"}});
  EXPECT_EQ(badSocketNet.rfind("error 4: CHORUS_SOCKET_NET=2 is not 0", 0), 0u) << badSocketNet;
  const std::string missing = chooseInChild({{"NCCL_NET_PLUGIN", "no-such"}});
  EXPECT_EQ(missing.rfind("error 5: NCCL_NET_PLUGIN=no-such: no usable net plugin: cannot load "
                          "no-such",
                          0),
            0u)
      << missing;
  EXPECT_NE(missing.find("cannot load libnccl-net-no-such.so"), std::string::npos) << missing;
  const std::string wrongNet = chooseInChild({{"NCCL_NET_PLUGIN", v10}, {"NCCL_NET", "IB"}});
  // IB is Chorus's own verbs network: with no usable HCA here, an error that says why.
  EXPECT_EQ(wrongNet.rfind("error 4: NCCL_NET=IB: the IB network cannot be used: ", 0), 0u)
      << wrongNet;
  const std::string unknown = chooseInChild({{"NCCL_NET_PLUGIN", v10}, {"NCCL_NET", "Foo"}});
  EXPECT_EQ(unknown.rfind("error 4: NCCL_NET=Foo: no such network", 0), 0u) << unknown;
}

// Which devices fuse into virtual NICs: by default those of one PCI path (the ports of a NIC),
// else the groups CHORUS_NET_MERGE names; a wrong value says what is wrong in it.
TEST(NetDevices, MergeGroups) {
  using G = std::vector<std::vector<int>>;
  const std::vector<std::string> paths = {"/nicA", "/nicA", "/nicB", "", "", "/nicA", "/nicB"};
  auto groups = [&](const char* value, int maxPerNic = 4) {
    auto g = chorus::netMergeGroups(value, paths, maxPerNic);
    EXPECT_TRUE(g.isOk()) << g.status().message();
    return g.isOk() ? g.value() : G{};
  };
  EXPECT_EQ(groups("auto"), (G{{0, 1, 5}, {2, 6}}));  // devices without a path stay apart
  EXPECT_EQ(groups(""), (G{{0, 1, 5}, {2, 6}}));
  EXPECT_EQ(groups("auto", 2), (G{{0, 1}, {2, 6}}));  // at most maxPerNic in one
  EXPECT_EQ(groups("none"), G{});
  EXPECT_EQ(groups("0"), G{});
  EXPECT_EQ(groups("3,4;0,2"), (G{{0, 2}, {3, 4}}));
  EXPECT_EQ(groups("6,0,1"), (G{{6, 0, 1}}));
  auto error = [&](const char* value) {
    auto g = chorus::netMergeGroups(value, paths, 4);
    EXPECT_FALSE(g.isOk()) << value;
    EXPECT_EQ(g.status().code(), chorus::Code::kInvalidArgument);
    return g.isOk() ? std::string() : g.status().message();
  };
  EXPECT_EQ(error("0,9"), "CHORUS_NET_MERGE=0,9: device 9 does not exist (the plugin has 7)");
  EXPECT_EQ(error("0,1;1,2"), "CHORUS_NET_MERGE=0,1;1,2: device 1 is in two groups");
  EXPECT_EQ(error("0,1,2,3,4"), "CHORUS_NET_MERGE=0,1,2,3,4: a group of 5 devices (2 to 4)");
  EXPECT_EQ(error("3"), "CHORUS_NET_MERGE=3: a group of 1 devices (2 to 4)");
  EXPECT_EQ(error("0,x"), "CHORUS_NET_MERGE=0,x: \"x\" is not a device index");
  EXPECT_EQ(error("0-1"), "CHORUS_NET_MERGE=0-1: \"-1\" is neither ',' nor ';'");
}

// Through the loader in fresh processes: the example's two ports of one PCI device become one
// virtual device in their first one's place (v9 and newer have makeVDevice), or stay two (v8, or
// CHORUS_NET_MERGE=none); a merge v8 cannot do is an error.
// The example reads its environment once per process, and this process (whose children the
// checks run in) may have loaded it already: they load copies it never loaded.
std::string freshCopy(const char* env, const std::string& dir) {
  const char* path = getenv(env);
  if (path == nullptr) return "";
  const std::string copy = dir + "/" + env + ".so";
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  return copy;
}

TEST(NetDevices, PortsOfOneNicFuseIntoAVirtualDevice) {
  char dir[] = "/tmp/chorus-netfuse-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string c12 = freshCopy("NET_EXAMPLE_V12", dir), c9 = freshCopy("NET_EXAMPLE_V9", dir),
                    c8 = freshCopy("NET_EXAMPLE_V8", dir);
  ASSERT_FALSE(c12.empty() || c9.empty() || c8.empty());
  const char *v12 = c12.c_str(), *v9 = c9.c_str(), *v8 = c8.c_str();
  const char* paths = "/sys/nicA,/sys/nicB,/sys/nicA";
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v12}, {"EXAMPLE_NET_PCI_PATHS", paths}}, true),
            "ExampleSocket v12: example0+example2, example1");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v9}, {"EXAMPLE_NET_PCI_PATHS", paths}}, true),
            "ExampleSocket v9: example0+example2, example1");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v8}, {"EXAMPLE_NET_PCI_PATHS", paths}}, true),
            "ExampleSocket v8: example0, example1, example2");
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v12},
                           {"EXAMPLE_NET_PCI_PATHS", paths},
                           {"CHORUS_NET_MERGE", "none"}},
                          true),
            "ExampleSocket v12: example0, example1, example2");
  EXPECT_EQ(
      chooseInChild(
          {{"NCCL_NET_PLUGIN", v12}, {"EXAMPLE_NET_PCI_PATHS", paths}, {"CHORUS_NET_MERGE", "1,2"}},
          true),
      "ExampleSocket v12: example0, example1+example2");
  // Devices of different rails are not one NIC: the plugin refuses; a guessed group stays
  // apart, a named one fails init saying why.
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", v12},
                           {"EXAMPLE_NET_PCI_PATHS", paths},
                           {"EXAMPLE_NET_RAILS", "0,0,1"}},
                          true),
            "ExampleSocket v12: example0, example1, example2");
  const std::string rails = chooseInChild({{"NCCL_NET_PLUGIN", v12},
                                           {"EXAMPLE_NET_PCI_PATHS", paths},
                                           {"EXAMPLE_NET_RAILS", "0,0,1"},
                                           {"CHORUS_NET_MERGE", "0,2"}});
  EXPECT_EQ(rails.rfind("error 5: NCCL_NET_PLUGIN=", 0), 0u) << rails;
  EXPECT_NE(rails.find("fusing devices 0 (example0) and 2 (example2): net plugin ExampleSocket: "
                       "makeVDevice failed (error 4)"),
            std::string::npos)
      << rails;
  const std::string noFuse = chooseInChild(
      {{"NCCL_NET_PLUGIN", v8}, {"EXAMPLE_NET_PCI_PATHS", paths}, {"CHORUS_NET_MERGE", "0,2"}});
  EXPECT_NE(noFuse.find("CHORUS_NET_MERGE=0,2: net plugin ExampleSocket (ncclNet v8) cannot fuse "
                        "devices (no makeVDevice)"),
            std::string::npos)
      << noFuse;
  std::filesystem::remove_all(dir);
}

// A GPU's rank takes the network devices below the PCIe switch its GPU is below (the fixture:
// GPUs 0000:18 and :19 share a switch with the HCA at 0000:1a, GPUs :cd and :ce one with :cf;
// the NVMe drive at :31 hangs off another root complex); none such: none, and the rank goes by
// NUMA node.
TEST(NetDevices, GpuRanksTakeTheDevicesBelowTheirSwitch) {
  chorus::Result<chorus::LocalTopology> t =
      chorus::loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/dual_socket_4gpu_2nic.json");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  using V = std::vector<int>;
  const std::vector<std::string> buses = {"0000:cf:00.0", "0000:1a:00.0", "", "0000:99:00.0"};
  chorus::PciDistance d = chorus::PciDistance::kSelf;
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:18:00.0", buses, &d), V{1});
  EXPECT_EQ(d, chorus::PciDistance::kPix);
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:ce:00.0", buses), V{0});
  // Two ports of one NIC: both.
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:19:00.0",
                                      {"0000:1a:00.0", "0000:cf:00.0", "0000:1a:00.0"}),
            (V{0, 2}));
  // The only device is on another root complex: none near.
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:18:00.0", {"0000:cf:00.0"}, &d), V{});
  EXPECT_EQ(d, chorus::PciDistance::kUnknown);
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:18:00.0", {"0000:31:00.0"}), V{});
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "", buses), V{});              // no GPU
  EXPECT_EQ(chorus::gpuNearNetDevices(t.value(), "0000:77:00.0", buses), V{});  // not in it
}

TEST(NetDevices, BusIdFromTheDevicesSysfsPath) {
  EXPECT_EQ(chorus::netDeviceBusId("/sys/devices/pci0000:17/0000:17:00.0/0000:1a:00.0"),
            "0000:1a:00.0");
  EXPECT_EQ(chorus::netDeviceBusId("/sys/devices/pci0000:17/0000:17:00.0/0000:1A:00.1/"),
            "0000:1a:00.1");
  EXPECT_EQ(chorus::netDeviceBusId(""), "");
  EXPECT_EQ(chorus::netDeviceBusId("/nonexistent/nic"), "");
  // A link named otherwise (as /sys/class/infiniband/mlx5_0/device is): the name it resolves to.
  char dir[] = "/tmp/chorus-netbus-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string target = std::string(dir) + "/0000:3b:00.0", link = std::string(dir) + "/nic";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_EQ(chorus::netDeviceBusId(link), "0000:3b:00.0");
  std::filesystem::remove_all(dir);
}

// A rank's channels take the network devices on its NUMA node, else all of them.
TEST(NetDevices, RanksTakeTheDevicesOnTheirNumaNode) {
  using chorus::nearNetDevices;
  EXPECT_EQ(nearNetDevices({1, 0}, 0), (std::vector<int>{1}));
  EXPECT_EQ(nearNetDevices({0, 1, 0, 1}, 1), (std::vector<int>{1, 3}));
  EXPECT_EQ(nearNetDevices({1, 1}, 0), (std::vector<int>{0, 1}));  // none near it
  EXPECT_EQ(nearNetDevices({-1, -1}, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(nearNetDevices({0, 1}, -1), (std::vector<int>{0, 1}));  // its node unknown
  EXPECT_TRUE(nearNetDevices({}, 0).empty());
}

TEST(NetDevices, NumaNodeFromTheDevicesSysfsDirectory) {
  char dir[] = "/tmp/chorus-netdev-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/numa_node";
  auto write = [&](const char* text) {
    FILE* f = fopen(file.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fputs(text, f);
    fclose(f);
  };
  EXPECT_EQ(chorus::netDeviceNumaNode(dir), -1);  // no numa_node file
  write("1\n");
  EXPECT_EQ(chorus::netDeviceNumaNode(dir), 1);
  write("-1\n");  // what a machine without NUMA nodes shows
  EXPECT_EQ(chorus::netDeviceNumaNode(dir), -1);
  write("x\n");
  EXPECT_EQ(chorus::netDeviceNumaNode(dir), -1);
  EXPECT_EQ(chorus::netDeviceNumaNode(""), -1);  // a virtual device
  unlink(file.c_str());
  rmdir(dir);
}

// dma-buf registration through the wrapper: host memory in a memfd stands for a GPU's dma-buf.
// The example (EXAMPLE_NET_DMABUF=1) maps the fd at the offset given and checks that it holds
// the registered bytes; a message then arrives in that memory, and a flush of host memory
// needs no request. The v8 build has no regMrDmaBuf.
TEST(NetPluginLoad, DmaBufRegistrationAndFlush) {
  char dir[] = "/tmp/chorus-netdmabuf-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string c12 = freshCopy("NET_EXAMPLE_V12", dir), c8 = freshCopy("NET_EXAMPLE_V8", dir);
  ASSERT_FALSE(c12.empty() || c8.empty());
  auto dmabuf = std::make_unique<ScopedEnv>("EXAMPLE_NET_DMABUF", "1");
  auto v12 = chorus::loadNetPlugin(c12);
  auto v8 = chorus::loadNetPlugin(c8);
  dmabuf.reset();
  ASSERT_TRUE(v12.isOk() && v8.isOk());
  NetPlugin& p = *v12.value();
  expectDmaBufSupport(p);

  const size_t at = static_cast<size_t>(sysconf(_SC_PAGESIZE)) + 100, bytes = 1000;
  DmaBufStandIn buf(2);
  ASSERT_NE(buf.mem, nullptr);
  unsigned char* mem = buf.mem;
  const int fd = buf.fd;
  void* send = nullptr;
  void* recv = nullptr;
  connectPair(p, 0, &send, &recv);
  void* mr = nullptr;
  chorus::Status wrong = p.regMrDmaBuf(recv, mem + at, bytes, NCCL_PTR_HOST, 100, fd, &mr);
  EXPECT_EQ(wrong.code(), chorus::Code::kInvalidArgument) << wrong.message();
  EXPECT_NE(wrong.message().find("regMrDmaBuf failed"), std::string::npos) << wrong.message();
  chorus::Status right = p.regMrDmaBuf(recv, mem + at, bytes, NCCL_PTR_HOST, at, fd, &mr);
  ASSERT_TRUE(right.isOk()) << right.message();

  std::vector<unsigned char> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(255 - i % 251);
  void* smr = nullptr;
  ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_TRUE(p.irecv(recv, mem + at, bytes, 1, mr, &rreq).isOk());
  ASSERT_TRUE(p.isend(send, out.data(), bytes, 1, smr, &sreq).isOk());
  bool sdone = false, rdone = false;
  for (long i = 0; i < 10000000 && !(sdone && rdone); ++i) {
    if (!sdone) {
      ASSERT_TRUE(p.test(sreq, &sdone, nullptr).isOk());
    }
    if (!rdone) {
      ASSERT_TRUE(p.test(rreq, &rdone, nullptr).isOk());
    }
  }
  ASSERT_TRUE(sdone && rdone);
  EXPECT_EQ(memcmp(mem + at, out.data(), bytes), 0);
  void* data = mem + at;
  void* freq = &freq;
  ASSERT_TRUE(p.iflush(recv, 1, &data, &bytes, &mr, &freq).isOk());
  EXPECT_EQ(freq, nullptr);  // host memory: nothing to flush
  EXPECT_TRUE(p.deregMr(recv, mr).isOk());
  EXPECT_TRUE(p.deregMr(send, smr).isOk());
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());

  NetPlugin& old = *v8.value();
  connectPair(old, 0, &send, &recv);
  chorus::Status none = old.regMrDmaBuf(recv, mem + at, bytes, NCCL_PTR_HOST, at, fd, &mr);
  EXPECT_EQ(none.code(), chorus::Code::kInvalidUsage);
  EXPECT_NE(none.message().find("(ncclNet v8) has no regMrDmaBuf"), std::string::npos)
      << none.message();
  EXPECT_TRUE(old.closeSend(send).isOk());
  EXPECT_TRUE(old.closeRecv(recv).isOk());
  std::filesystem::remove_all(dir);
}

TEST(NetPluginLoad, ExampleV12) {
  expectMessagesArrive("NET_EXAMPLE_V12", 12);
}
TEST(NetPluginLoad, ExampleV11FallsBackFromV12) {
  expectMessagesArrive("NET_EXAMPLE_V11", 11);
}
TEST(NetPluginLoad, ExampleV10FallsBackFromV11) {
  expectMessagesArrive("NET_EXAMPLE_V10", 10);
}
TEST(NetPluginLoad, ExampleV9FallsBackFromV10) {
  expectMessagesArrive("NET_EXAMPLE_V9", 9);
}
TEST(NetPluginLoad, ExampleV8FallsBackFromV9) {
  expectMessagesArrive("NET_EXAMPLE_V8", 8);
}

}  // namespace
