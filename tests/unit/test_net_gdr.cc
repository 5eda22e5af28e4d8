// GPUDirect RDMA through a network: the knobs, the verdict from a rank's network devices, and
// the proxy refusing GPU memory the network did not take (it copies host memory only).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda/dev_work.h"
#include "topo/topo_file.h"
#include "topo/topology.h"
#include "transport/connector.h"
#include "transport/device_proxy.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_gdr.h"
#include "transport/net_plugin/net_plugin.h"
#include "transport/transport.h"

namespace chorus {
namespace {

TEST(NetGdr, LevelsParseAsNcclsAndNvlIsRefused) {
  const std::vector<std::pair<const char*, P2pLevel>> good = {
      {"LOC", P2pLevel::kLoc}, {"pix", P2pLevel::kPix}, {" PXB ", P2pLevel::kPxb},
      {"Phb", P2pLevel::kPhb}, {"SYS", P2pLevel::kSys}, {"0", P2pLevel::kLoc},
      {"1", P2pLevel::kPix},   {"2", P2pLevel::kPxb},   {"3", P2pLevel::kPhb},
      {"4", P2pLevel::kSys},   {"5", P2pLevel::kSys}};
  for (const auto& g : good) {
    Result<P2pLevel> r = parseNetGdrLevel(g.first, "NCCL_NET_GDR_LEVEL");
    ASSERT_TRUE(r.isOk()) << g.first << ": " << r.status().message();
    EXPECT_EQ(r.value(), g.second) << g.first;
  }
  for (const char* bad : {"NVL", "nvl", "", "6", "PCI", "-1", "PXB,SYS"}) {
    Result<P2pLevel> r = parseNetGdrLevel(bad, "NCCL_NET_GDR_LEVEL");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find("NCCL_NET_GDR_LEVEL=" + std::string(bad)), std::string::npos) << m;
    EXPECT_NE(m.find("LOC, PIX, PXB, PHB, SYS"), std::string::npos) << m;
  }
}

TEST(NetGdr, OptionsFromTheEnvironment) {
  unsetenv("CHORUS_NET_GDR_LEVEL");
  unsetenv("NCCL_NET_GDR_LEVEL");
  unsetenv("CHORUS_NET_GDR_READ");
  unsetenv("CHORUS_NET_PLACE_SLOTS");
  Result<NetGdrOptions> o = netGdrOptionsFromEnv();
  ASSERT_TRUE(o.isOk());
  EXPECT_EQ(o.value().level, P2pLevel::kPxb);
  EXPECT_TRUE(o.value().read);
  EXPECT_TRUE(o.value().place);
  setenv("NCCL_NET_GDR_LEVEL", "PHB", 1);
  setenv("CHORUS_NET_GDR_READ", "0", 1);
  o = netGdrOptionsFromEnv();
  ASSERT_TRUE(o.isOk());
  EXPECT_EQ(o.value().level, P2pLevel::kPhb);
  EXPECT_FALSE(o.value().read);
  setenv("NCCL_NET_GDR_LEVEL", "NVL", 1);
  o = netGdrOptionsFromEnv();
  ASSERT_FALSE(o.isOk());
  EXPECT_NE(o.status().message().find("NCCL_NET_GDR_LEVEL=NVL"), std::string::npos)
      << o.status().message();
  unsetenv("NCCL_NET_GDR_LEVEL");
  unsetenv("CHORUS_NET_GDR_READ");
}

NetGdrDevices devices(PciDistance d, int ptr = NCCL_PTR_HOST | NCCL_PTR_CUDA, bool flush = true) {
  NetGdrDevices n;
  n.count = 1;
  n.distance = d;
  n.ptrSupport = ptr;
  n.flush = flush;
  return n;
}

// Distances from the fixture (dual_socket_4gpu_2nic.json: GPUs 0000:18 and :19 share a switch
// with the HCA at :1a, GPUs :cd and :ce one with :cf on the other socket; the NVMe drive at :31
// hangs off another root complex of the first socket) against each level.
TEST(NetGdr, TheLevelBoundsTheGpuToNicDistance) {
  Result<LocalTopology> t =
      loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/dual_socket_4gpu_2nic.json");
  ASSERT_TRUE(t.isOk()) << t.status().message();
  const PciDistance pix = pciDistance(t.value(), "0000:18:00.0", "0000:1a:00.0");
  const PciDistance sys = pciDistance(t.value(), "0000:18:00.0", "0000:cf:00.0");
  const PciDistance node = pciDistance(t.value(), "0000:18:00.0", "0000:31:00.0");
  ASSERT_EQ(pix, PciDistance::kPix);
  ASSERT_EQ(sys, PciDistance::kSys);
  ASSERT_TRUE(node == PciDistance::kNode || node == PciDistance::kPhb) << pciDistanceName(node);
  struct Row {
    P2pLevel level;
    PciDistance distance;
    bool gpu;
  };
  for (const Row& r : {Row{P2pLevel::kLoc, pix, false}, Row{P2pLevel::kPix, pix, true},
                       Row{P2pLevel::kPxb, pix, true}, Row{P2pLevel::kPxb, node, false},
                       Row{P2pLevel::kPhb, node, true}, Row{P2pLevel::kPhb, sys, false},
                       Row{P2pLevel::kSys, sys, true}, Row{P2pLevel::kPxb, PciDistance::kPxb, true},
                       Row{P2pLevel::kPix, PciDistance::kPxb, false},
                       Row{P2pLevel::kPxb, PciDistance::kUnknown, false},
                       Row{P2pLevel::kPhb, PciDistance::kUnknown, false},
                       Row{P2pLevel::kSys, PciDistance::kUnknown, true}}) {
    NetGdrOptions o;
    o.level = r.level;
    const NetGdr g = chooseNetGdr(o, devices(r.distance));
    SCOPED_TRACE(std::string(p2pLevelName(r.level)) + " at " + pciDistanceName(r.distance) + ": " +
                 g.why);
    EXPECT_EQ(g.recv, r.gpu);
    EXPECT_EQ(g.send, r.gpu);
    EXPECT_FALSE(g.dmabufOnly);
    if (!r.gpu && r.level != P2pLevel::kLoc && r.distance != PciDistance::kUnknown) {
      EXPECT_NE(g.why.find(std::string("beyond NET_GDR_LEVEL ") + p2pLevelName(r.level)),
                std::string::npos);
    }
    if (r.gpu) {
      EXPECT_NE(g.why.find("receives into GPU memory, sends from GPU memory"), std::string::npos);
    }
  }
}

TEST(NetGdr, WhatTheNetworkTakesDecides) {
  NetGdrOptions o;
  // Host memory only.
  NetGdr g = chooseNetGdr(o, devices(PciDistance::kPix, NCCL_PTR_HOST));
  EXPECT_FALSE(g.recv || g.send);
  EXPECT_NE(g.why.find("takes no GPU memory"), std::string::npos) << g.why;
  // Dma-bufs only (IB without a peer-memory module).
  g = chooseNetGdr(o, devices(PciDistance::kPix, NCCL_PTR_HOST | NCCL_PTR_DMABUF));
  EXPECT_TRUE(g.recv && g.send && g.dmabufOnly) << g.why;
  g = chooseNetGdr(o, devices(PciDistance::kPix, NCCL_PTR_CUDA | NCCL_PTR_DMABUF));
  EXPECT_TRUE(g.recv && g.send && !g.dmabufOnly) << g.why;
  // No flush of GPU memory: sends only.
  g = chooseNetGdr(o, devices(PciDistance::kPix, NCCL_PTR_CUDA, /*flush=*/false));
  EXPECT_FALSE(g.recv);
  EXPECT_TRUE(g.send);
  EXPECT_NE(g.why.find("cannot flush"), std::string::npos) << g.why;
  // NET_GDR_READ=0: receives only.
  o.read = false;
  g = chooseNetGdr(o, devices(PciDistance::kPix));
  EXPECT_TRUE(g.recv);
  EXPECT_FALSE(g.send);
  EXPECT_NE(g.why.find("NET_GDR_READ=0"), std::string::npos) << g.why;
  // Neither: nothing in GPU memory, and no dma-buf asked for.
  g = chooseNetGdr(o, devices(PciDistance::kPix, NCCL_PTR_DMABUF, false));
  EXPECT_FALSE(g.recv || g.send || g.dmabufOnly) << g.why;
  // No placement at all, or no device.
  o.read = true;
  o.place = false;
  g = chooseNetGdr(o, devices(PciDistance::kPix));
  EXPECT_FALSE(g.recv || g.send);
  EXPECT_NE(g.why.find("NET_PLACE_SLOTS=0"), std::string::npos) << g.why;
  o.place = true;
  NetGdrDevices none = devices(PciDistance::kPix);
  none.count = 0;
  g = chooseNetGdr(o, none);
  EXPECT_FALSE(g.recv || g.send);
}

// The net plugin transport's verdict over the devices its channels take, as the fixture places
// them: the example plugin as two NICs on rails 0 and 1, at 0000:cf (below the switch of the
// other socket's GPUs) and 0000:1a (below GPU 0000:18's switch). A rank takes the NIC below
// its GPU's switch; its sends may also leave through the other rail's NIC, the other socket's.
TEST(NetGdr, TheTransportJudgesTheDevicesItsChannelsTake) {
  const char* lib = getenv("NET_EXAMPLE_V12");
  if (lib == nullptr) GTEST_SKIP() << "needs NET_EXAMPLE_V12 (meson test test_net_gdr)";
  setenv("EXAMPLE_NET_PCI_PATHS", "/nonexistent/0000:cf:00.0,/nonexistent/0000:1a:00.0", 1);
  setenv("EXAMPLE_NET_GDR", "1", 1);
  setenv("EXAMPLE_NET_RAILS", "0,1", 1);
  Result<std::unique_ptr<NetPlugin>> plugin = loadNetPlugin(lib);
  ASSERT_TRUE(plugin.isOk()) << plugin.status().message();
  ASSERT_EQ(plugin.value()->devices(), 2);
  Result<LocalTopology> topo =
      loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/dual_socket_4gpu_2nic.json");
  ASSERT_TRUE(topo.isOk()) << topo.status().message();
  auto verdict = [&](const char* gpu) {
    TransportContext ctx;
    ctx.nranks = 2;
    ctx.geometry = FifoGeometry{8, 65536};
    ctx.topo = &topo.value();
    ctx.gpuBusId = gpu;
    std::unique_ptr<Transport> t = makeNetPluginTransport(ctx, plugin.value().get());
    Result<NetGdr> g = t->gpuDirect();
    EXPECT_TRUE(g.isOk()) << g.status().message();
    return g.isOk() ? g.value() : NetGdr();
  };
  // Receives through the NIC below the GPU's own switch (PIX); sends may take the other rail's.
  for (const char* gpu : {"0000:18:00.0", "0000:cd:00.0"}) {
    const NetGdr g = verdict(gpu);
    EXPECT_TRUE(g.recv && !g.send && !g.dmabufOnly) << gpu << ": " << g.why;
    EXPECT_NE(g.why.find("receives: the GPU and the network devices are PIX apart (NET_GDR_LEVEL "
                         "PXB)"),
              std::string::npos)
        << g.why;
    EXPECT_NE(g.why.find("other rails' devices: the GPU and the network devices are SYS apart"),
              std::string::npos)
        << g.why;
  }
  // Every device, the other socket's too: the farthest is SYS, within SYS only.
  setenv("CHORUS_NET_NUMA_DEVICES", "0", 1);
  NetGdr g = verdict("0000:18:00.0");
  EXPECT_FALSE(g.recv || g.send);
  EXPECT_NE(g.why.find("SYS apart, beyond NET_GDR_LEVEL PXB"), std::string::npos) << g.why;
  setenv("CHORUS_NET_GDR_LEVEL", "SYS", 1);
  g = verdict("0000:18:00.0");
  EXPECT_TRUE(g.recv && g.send) << g.why;
  unsetenv("CHORUS_NET_NUMA_DEVICES");
  unsetenv("CHORUS_NET_GDR_LEVEL");
  // A GPU the topology does not have: its distance is unknown.
  g = verdict("0000:77:00.0");
  EXPECT_FALSE(g.recv || g.send);
  EXPECT_NE(g.why.find("unknown"), std::string::npos) << g.why;
  // A bad level is an error naming the knob.
  setenv("CHORUS_NET_GDR_LEVEL", "NVL", 1);
  TransportContext ctx;
  ctx.topo = &topo.value();
  Result<NetGdr> bad = makeNetPluginTransport(ctx, plugin.value().get())->gpuDirect();
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHORUS_NET_GDR_LEVEL=NVL"), std::string::npos)
      << bad.status().message();
  unsetenv("CHORUS_NET_GDR_LEVEL");
  unsetenv("EXAMPLE_NET_RAILS");
  unsetenv("EXAMPLE_NET_PCI_PATHS");
  unsetenv("EXAMPLE_NET_GDR");
}

// A host FIFO whose far end is a proxy that takes no placement, or none at all.
class RefusingProxy final : public ProxyLink {
 public:
  void tryProgress(const void*) override {}
  void tryProgressAll() override {}
  bool progressNeedsProxy() override { return false; }
  int asked = 0;
  Result<bool> placeSlots(const void*, const SlotMemory*) override {
    ++asked;
    return false;
  }
};

TEST(NetGdr, TheProxyRefusesGpuMemoryTheNetworkDidNotTake) {
  const FifoGeometry geometry{4, 4096};
  RefusingProxy refusing;
  for (ProxyLink* proxy : {static_cast<ProxyLink*>(&refusing), static_cast<ProxyLink*>(nullptr)}) {
    FifoHeader* header = nullptr;
    char* data = nullptr;
    FifoMemory memory = allocLocalFifo(geometry, proxy, &header, &data);
    RecvConnector recv(memory.get());
    SendConnector send(memory.get());
    std::vector<char> slots(4 * 4096);
    alignas(64) uint64_t tail[8] = {}, head[8] = {};
    std::vector<uint32_t> sizes(4, 0);
    dev::Fifo fifo;
    fifo.slots = slots.data();
    fifo.tail = tail;
    fifo.head = head;
    fifo.sizes = sizes.data();
    fifo.nslots = 4;
    fifo.slotBytes = 4096;
    SlotMemory mem;
    mem.data = fifo.slots;
    mem.nslots = 4;
    mem.slotBytes = 4096;
    mem.device = true;
    DeviceProxy p;
    Status s = p.addRecv(&recv, fifo, dev::Proto::kSimple, "receive link", &mem);
    EXPECT_EQ(s.code(), Code::kInternalError);
    EXPECT_NE(s.message().find("receive link: the device FIFO's slots are in GPU memory"),
              std::string::npos)
        << s.message();
    s = p.addSend(fifo, &send, "send link", &mem);
    EXPECT_NE(s.message().find("send link: the device FIFO's slots are in GPU memory"),
              std::string::npos)
        << s.message();
    s = p.addRecv(&recv, fifo, dev::Proto::kLl, "LL link", &mem);
    EXPECT_NE(s.message().find("LL link: LL lines in GPU memory"), std::string::npos)
        << s.message();
    // Host memory the network does not take is staged by the proxy: no error.
    mem.device = false;
    EXPECT_TRUE(p.addRecv(&recv, fifo, dev::Proto::kSimple, "host link", &mem).isOk());
    EXPECT_EQ(p.placedLinks(), 0);
  }
  EXPECT_EQ(refusing.asked, 3);
}

}  // namespace
}  // namespace chorus
