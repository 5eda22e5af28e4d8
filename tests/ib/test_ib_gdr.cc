// The IB network and GPU memory registered by its address: the peer memory module seen in
// /sys, the knob that overrides it, and over the stand-in verbs registrations of their own
// that remote reads may reach, received into and flushed by an RDMA read.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/ib/fake_verbs_testing.h"
#include "tests/unit/net_plugin_testing.h"
#include "transport/ib/ib_logic.h"
#include "transport/ib/ib_net.h"
#include "transport/net_plugin/net_abi.h"

namespace {

using chorus::NetPlugin;

TEST(IbPeerMemory, TheModuleIsSeenWhereSysShowsIt) {
  char tmpl[] = "/tmp/chorus-sys-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::filesystem::path root = tmpl;
  EXPECT_FALSE(chorus::ib::peerMemoryLoaded(root.string()));
  for (const char* path : {"module/nvidia_peermem", "kernel/mm/memory_peers/nvidia-peermem",
                           "kernel/mm/memory_peers/nv_mem"}) {
    std::filesystem::create_directories(root / path);
    EXPECT_FALSE(chorus::ib::peerMemoryLoaded(root.string())) << path << " without a version";
    std::ofstream(root / path / "version") << "1.0\n";
    EXPECT_TRUE(chorus::ib::peerMemoryLoaded(root.string())) << path;
    std::filesystem::remove_all(root / path);
  }
  // Another module's directory is not one.
  std::filesystem::create_directories(root / "module/nvidia");
  std::ofstream(root / "module/nvidia/version") << "1.0\n";
  EXPECT_FALSE(chorus::ib::peerMemoryLoaded(root.string()));
  std::filesystem::remove_all(root);
}

TEST(IbPeerMemory, TheKnobTakesMinusOneToOne) {
  for (const char* bad : {"2", "-2", "yes"}) {
    ScopedEnv v("CHORUS_IB_PEER_MEMORY", bad);
    chorus::Result<chorus::ib::Options> o = chorus::ib::optionsFromEnvironment();
    ASSERT_FALSE(o.isOk()) << bad;
    EXPECT_NE(o.status().message().find("CHORUS_IB_PEER_MEMORY"), std::string::npos)
        << o.status().message();
  }
  ScopedEnv on("CHORUS_IB_PEER_MEMORY", "1");
  chorus::Result<chorus::ib::Options> o = chorus::ib::optionsFromEnvironment();
  ASSERT_TRUE(o.isOk()) << o.status().message();
  EXPECT_EQ(o.value().peerMemory, 1);
}

// Without peer memory the devices take GPU memory only as dma-bufs and refuse it by address,
// naming the knob; with it they report NCCL_PTR_CUDA, and a registration by address is one of
// its own (not shared with later ones of the same pages), which a receive lands in and a flush
// reads.
TEST(IbPeerMemory, GpuMemoryByItsAddress) {
  const size_t bytes = 6000;
  std::vector<unsigned char> gpu(2 * bytes), out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 13 + 5);
  for (int peer : {0, 1}) {
    SCOPED_TRACE(peer == 1 ? "CHORUS_IB_PEER_MEMORY=1" : "CHORUS_IB_PEER_MEMORY=0");
    ScopedEnv knob("CHORUS_IB_PEER_MEMORY", peer == 1 ? "1" : "0");
    auto made = chorus::makeIbNet(fakeVerbs());
    ASSERT_TRUE(made.isOk()) << made.status().message();
    NetPlugin& p = *made.value();
    NetPlugin::Properties props;
    ASSERT_TRUE(p.properties(0, &props).isOk());
    EXPECT_EQ((props.ptrSupport & NCCL_PTR_CUDA) != 0, peer == 1);
    const uint64_t live = fakeStats().mrsLive;
    void *send = nullptr, *recv = nullptr;
    connectPair(p, 0, &send, &recv);
    const FakeVerbsStats before = fakeStats();
    void* mr = nullptr;
    chorus::Status s = p.regMrDevice(recv, gpu.data(), bytes, &mr);
    if (peer == 0) {
      EXPECT_EQ(s.code(), chorus::Code::kInvalidUsage);
      EXPECT_NE(s.message().find("CHORUS_IB_PEER_MEMORY=1"), std::string::npos) << s.message();
    } else {
      ASSERT_TRUE(s.isOk()) << s.message();
      void* again = nullptr;
      ASSERT_TRUE(p.regMrDevice(recv, gpu.data(), bytes, &again).isOk());
      EXPECT_NE(again, mr);
      EXPECT_EQ(fakeStats().readableMrs, before.readableMrs + 2);
      void* smr = nullptr;
      ASSERT_TRUE(p.regMr(send, out.data(), bytes, &smr).isOk());
      void *sreq = nullptr, *rreq = nullptr;
      ASSERT_TRUE(p.irecv(recv, gpu.data(), bytes, 7, mr, &rreq).isOk());
      ASSERT_TRUE(p.isend(send, out.data(), bytes, 7, smr, &sreq).isOk());
      size_t sent = 0, got = 0;
      std::string why;
      ASSERT_TRUE(finish(p, sreq, rreq, &sent, &got, &why)) << why;
      EXPECT_EQ(got, bytes);
      EXPECT_EQ(memcmp(gpu.data(), out.data(), bytes), 0);
      void* data = gpu.data();
      void* flush = nullptr;
      ASSERT_TRUE(p.iflush(recv, 1, &data, &got, &mr, &flush).isOk());
      ASSERT_NE(flush, nullptr);
      ASSERT_TRUE(finish(p, nullptr, flush, nullptr, nullptr, &why)) << why;
      EXPECT_EQ(fakeStats().reads, before.reads + 1);
      EXPECT_TRUE(p.deregMr(recv, again).isOk());
      EXPECT_TRUE(p.deregMr(recv, mr).isOk());
      EXPECT_TRUE(p.deregMr(send, smr).isOk());
    }
    EXPECT_TRUE(p.closeSend(send).isOk());
    EXPECT_TRUE(p.closeRecv(recv).isOk());
    EXPECT_EQ(fakeStats().mrsLive, live);
  }
}

}  // namespace
