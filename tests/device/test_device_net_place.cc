// Device links through a network with their Simple slots placed in the emulated kernels' own
// FIFOs (DeviceProxy's place), over the example net plugin (NCCL_NET_PLUGIN names it: meson's
// device_net_place tests), Chorus's IB network over the stand-in verbs (NCCL_NET=IB:
// device_net_place_ib) or its socket network (NCCL_NET=Socket, CHORUS_SOCKET_NET=1:
// device_net_place_socket): the emulated kernels' collectives give the reference's results,
// and the network's counters show how the slots moved.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda/dev_emulator.h"
#include "device/comm_host_links.h"
#include "device/kernel_calls.h"
#include "tests/ib/fake_verbs.h"

namespace chorus {
namespace dev {
namespace {

// The network under test: which GPU memory it takes, and its counters of dma-buf
// registrations, registrations of GPU memory by address, and flushes (read after the
// communicators loaded it).
struct Network {
  std::string name;
  bool cuda = false;    // NCCL_PTR_CUDA
  bool dmabuf = false;  // NCCL_PTR_DMABUF
  std::function<void(unsigned long* counts)> counters;
};

bool flag(const char* name) {
  return getenv(name) != nullptr && atoi(getenv(name)) == 1;
}

bool networkUnderTest(Network* n) {
  if (const char* plugin = getenv("NCCL_NET_PLUGIN")) {
    n->name = "the example plugin";
    n->cuda = flag("EXAMPLE_NET_GDR");
    n->dmabuf = flag("EXAMPLE_NET_DMABUF");
    n->counters = [plugin](unsigned long* c) {
      void* lib = dlopen(plugin, RTLD_NOW | RTLD_NOLOAD);
      ASSERT_NE(lib, nullptr) << "the communicators did not load " << plugin;
      auto fn = reinterpret_cast<void (*)(unsigned long*, unsigned long*, unsigned long*)>(
          dlsym(lib, "exampleNetCounters"));
      ASSERT_NE(fn, nullptr);
      fn(&c[0], &c[1], &c[2]);
      dlclose(lib);
    };
    return true;
  }
  const char* net = getenv("NCCL_NET");
  if (net != nullptr && std::string(net) == "Socket" && flag("CHORUS_SOCKET_NET")) {
    // Chorus's socket network: host memory only, nothing registered or flushed to count.
    n->name = "the socket network";
    n->counters = [](unsigned long* c) { c[0] = c[1] = c[2] = 0; };
    return true;
  }
  const char* verbs = getenv("CHORUS_IB_VERBS_LIBRARY");
  if (net == nullptr || std::string(net) != "IB" || verbs == nullptr) return false;
  // Chorus's IB network: GPU memory as dma-bufs, and by its address with a peer memory module
  // (CHORUS_IB_PEER_MEMORY=1), flushed by an RDMA read.
  n->name = "the IB network";
  n->cuda = flag("CHORUS_IB_PEER_MEMORY");
  n->dmabuf = !flag("FAKE_IBV_NO_DMABUF");
  n->counters = [verbs](unsigned long* c) {
    void* lib = dlopen(verbs, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NE(lib, nullptr) << "the IB network did not load " << verbs;
    auto fn = reinterpret_cast<FakeVerbsStatsFn>(dlsym(lib, "fake_verbs_stats"));
    ASSERT_NE(fn, nullptr);
    FakeVerbsStats st;
    fn(&st);
    c[0] = st.dmabufMrs;
    c[1] = st.readableMrs;  // by address: only GPU memory is registered for remote reads
    c[2] = st.reads;
    dlclose(lib);
  };
  return true;
}

// The Simple slots of every link placed in the emulated device FIFOs, which the network sends
// from and receives into, as host memory, as a dma-buf (memfd; the example moves the bytes
// through its own mapping of it, the stand-in verbs write at the registered addresses), and as
// GPU memory (host memory standing in: registered as NCCL_PTR_CUDA or as a dma-buf, each
// receive flushed: by the example at its second test, by IB with an RDMA read) where the
// transport's gpuDirect puts the slots there, as a device communicator asks it: within
// NET_GDR_LEVEL (SYS: the distance of the emulated GPU is unknown), sends too unless
// NET_GDR_READ=0, and only where the network takes GPU memory; elsewhere in host memory, with
// the same results. Also CHORUS_NET_PLACE_SLOTS=0 and FIFOs of other slots: staged.
TEST(NetPlace, NetworkMovesSlotsInTheKernelsMemory) {
  Network net;
  if (!networkUnderTest(&net))
    GTEST_SKIP()
        << "needs NCCL_NET_PLUGIN, NCCL_NET=IB with the stand-in verbs, or NCCL_NET=Socket "
           "with CHORUS_SOCKET_NET=1 (meson test device_net_place, device_net_place_ib, "
           "device_net_place_socket)";
  SCOPED_TRACE(net.name);
  const bool gdr = net.cuda, dmabuf = net.dmabuf;
  constexpr int kRanks = 3;
  struct Variant {
    const char* name;
    bool dmabuf, gpu;
    const char* level;           // CHORUS_NET_GDR_LEVEL (null: unset, PXB)
    bool read = true;            // CHORUS_NET_GDR_READ
    bool off = false;            // CHORUS_NET_PLACE_SLOTS=0
    bool otherGeometry = false;  // device FIFOs of other slots than the host FIFOs': not placed
  };
  for (const Variant& v : {Variant{"host memory", false, false, nullptr},
                           Variant{"host memory, a dma-buf", true, false, nullptr},
                           Variant{"GPU memory", false, true, "SYS"},
                           Variant{"GPU memory, a dma-buf", true, true, "sys"},
                           Variant{"GPU memory, receives only", true, true, "4", false},
                           Variant{"GPU memory at an unknown distance", true, true, nullptr},
                           Variant{"CHORUS_NET_PLACE_SLOTS=0", false, true, "SYS", true, true},
                           Variant{"other slots", false, false, nullptr, true, false, true}}) {
    SCOPED_TRACE(v.name);
    if (v.off) setenv("CHORUS_NET_PLACE_SLOTS", "0", 1);
    if (v.level != nullptr) setenv("CHORUS_NET_GDR_LEVEL", v.level, 1);
    if (!v.read) setenv("CHORUS_NET_GDR_READ", "0", 1);
    EmuGeometry g;
    g.proxied = true;
    g.placeSimple = true;
    g.dmabufSlots = v.dmabuf;
    unsigned long before[3] = {0, 0, 0}, after[3] = {0, 0, 0};
    {
      CommHostLinks links(kRanks, /*tcp=*/true, g.nchannels, /*p2p=*/false);
      ASSERT_EQ(links.error(), "");
      net.counters(before);
      // Slot i of the host FIFO is slot i of the device FIFO, as a device communicator sizes
      // its FIFOs from the host geometry.
      SendConnector* send = nullptr;
      RecvConnector* recv = nullptr;
      ASSERT_TRUE(links.link(0, 1, 0, static_cast<int>(Proto::kSimple), &send, &recv));
      if (!v.otherGeometry) {
        g.nslots[static_cast<int>(Proto::kSimple)] = send->nslots();
        g.slotBytes[static_cast<int>(Proto::kSimple)] = static_cast<uint32_t>(send->slotBytes());
      }
      ASSERT_NE(g.nslots[static_cast<int>(Proto::kSimple)] == send->nslots(), v.otherGeometry);
      g.hostLinks = [&links](int sender, int receiver, int channel, int proto, SendConnector** send,
                             RecvConnector** recv) {
        return links.link(sender, receiver, channel, proto, send, recv);
      };
      // As the CUDA communicator decides (cuda/dev_comm_links.cc: gdrFor, gpuSlots, gpuEnd):
      // GPU memory where the transport says so, as the network takes it (a dma-buf or not).
      int gpuEnds = 0;
      std::string verdict;
      if (v.gpu)
        g.gpuMemory = [&](int rank, int peer, bool sending) {
          Result<NetGdr> r = links.gpuDirect(rank, peer);
          EXPECT_TRUE(r.isOk()) << r.status().message();
          if (!r.isOk()) return false;
          verdict = r.value().why;
          const bool in = gpuEnd(r.value(), sending, v.dmabuf);
          gpuEnds += in ? 1 : 0;
          return in;
        };
      std::vector<Call> calls;
      for (Proto p : {Proto::kSimple, Proto::kLl})
        for (size_t count : {size_t{1}, size_t{3001}, size_t{70000}}) {
          calls.push_back(Call{Coll::kAllReduce, ncclFloat32, ref::kSum, count, p, 2});
          calls.push_back(Call{Coll::kAllGather, ncclBfloat16, ref::kSum, count, p, 2});
        }
      int placed = -1;
      runCalls(kRanks, calls, false, 2, g, &placed);
      net.counters(after);
      const bool takes = !v.off && !v.otherGeometry;
      // Both ends of every ring channel's Simple link, in GPU or host memory.
      const int ends = kRanks * g.nchannels;
      EXPECT_EQ(placed, takes ? 2 * ends : 0);
      // GPU memory: within the level, where the plugin takes it, sends only with NET_GDR_READ.
      const bool reaches = gdr || (dmabuf && v.dmabuf);
      const int wantGpu =
          v.gpu && takes && v.level != nullptr && reaches ? ends + (v.read ? ends : 0) : 0;
      EXPECT_EQ(gpuEnds, wantGpu) << verdict;
      if (v.gpu && v.level == nullptr && reaches) {
        EXPECT_NE(verdict.find("unknown (NET_GDR_LEVEL PXB"), std::string::npos) << verdict;
      }
      const unsigned long regs = takes ? 2 * ends : 0;
      EXPECT_EQ(after[0] - before[0], v.dmabuf && dmabuf ? regs : 0) << "dma-buf registrations";
      EXPECT_EQ(after[1] - before[1],
                v.dmabuf && dmabuf ? 0ul : static_cast<unsigned long>(wantGpu))
          << "GPU memory registrations by address";
      if (wantGpu > 0)
        EXPECT_GT(after[2] - before[2], 0u) << "receives into GPU memory are flushed";
      else
        EXPECT_EQ(after[2] - before[2], 0u);
    }
    unsetenv("CHORUS_NET_PLACE_SLOTS");
    unsetenv("CHORUS_NET_GDR_LEVEL");
    unsetenv("CHORUS_NET_GDR_READ");
  }
}

}  // namespace
}  // namespace dev
}  // namespace chorus
