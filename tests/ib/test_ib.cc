// The IB network without RDMA hardware: its pure logic (connection setup encoding, queue pair
// transitions, message split, registration cache, knobs, port rates), then device discovery
// and the whole NetPlugin interface over the stand-in verbs library (CHORUS_IB_VERBS_LIBRARY,
// tests/ib/fake_verbs.cc), which checks transitions, addressing, keys and bounds as an HCA does.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "tests/ib/fake_verbs.h"
#include "tests/ib/fake_verbs_testing.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_logic.h"
#include "transport/ib/ib_net.h"
#include "transport/ib/verbs.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"
#include "tests/unit/net_plugin_testing.h"

namespace {

using chorus::NetPlugin;
using namespace chorus::ib;

TEST(IbLogic, ConnectionInfoRoundTripsAndBadInfoIsRefused) {
  ConnInfo in;
  in.nqps = 3;
  in.lid = 0x1234;
  in.linkLayer = IBV_LINK_LAYER_ETHERNET;
  in.mtu = IBV_MTU_2048;
  for (int i = 0; i < 16; ++i) in.gid[i] = static_cast<uint8_t>(i * 11);
  in.qpn[0] = 0x11;
  in.qpn[1] = 0xabcdef;
  in.qpn[2] = 7;
  in.psn = 0x123456;
  in.fifoAddr = 0x7fff12345678ull;
  in.fifoRkey = 0xdeadbeef;
  uint8_t bytes[kConnInfoBytes];
  encodeConnInfo(in, bytes);
  auto out = decodeConnInfo(bytes);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(out.value().nqps, 3u);
  EXPECT_EQ(out.value().lid, 0x1234);
  EXPECT_EQ(out.value().linkLayer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(out.value().mtu, IBV_MTU_2048);
  EXPECT_EQ(memcmp(out.value().gid, in.gid, 16), 0);
  EXPECT_EQ(out.value().qpn[1], 0xabcdefu);
  EXPECT_EQ(out.value().psn, 0x123456u);
  EXPECT_EQ(out.value().fifoAddr, 0x7fff12345678ull);
  EXPECT_EQ(out.value().fifoRkey, 0xdeadbeefu);
  // Little-endian on the wire whatever the host: the magic's first byte is 'C' of "IBNC".
  EXPECT_EQ(bytes[0], 0x43);

  auto refused = [&](const ConnInfo& bad, const char* words) {
    uint8_t b[kConnInfoBytes];
    encodeConnInfo(bad, b);
    auto r = decodeConnInfo(b);
    ASSERT_FALSE(r.isOk()) << words;
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  ConnInfo bad = in;
  bad.nqps = 0;
  refused(bad, "0 queue pairs");
  bad.nqps = 17;
  refused(bad, "17 queue pairs");
  bad = in;
  bad.mtu = 9;
  refused(bad, "MTU code 9");
  bad = in;
  bad.qpn[2] = 0;
  refused(bad, "queue pair 2 has number 0");
  bad = in;
  bad.linkLayer = 7;
  refused(bad, "link layer 7");
  uint8_t junk[kConnInfoBytes];
  memset(junk, 0x5a, sizeof junk);
  auto notIb = decodeConnInfo(junk);
  ASSERT_FALSE(notIb.isOk());
  EXPECT_NE(notIb.status().message().find("not an IB connection"), std::string::npos);
}

TEST(IbLogic, QueuePairTransitionsCarryWhatEachStateNeeds) {
  LocalPort ibPort;
  ibPort.port = 1;
  ibPort.lid = 5;
  ibPort.mtu = IBV_MTU_4096;
  ConnInfo remote;
  remote.nqps = 2;
  remote.lid = 9;
  remote.mtu = IBV_MTU_2048;
  remote.qpn[0] = 100;
  remote.qpn[1] = 101;
  remote.psn = 77;
  remote.gid[15] = 3;
  Options o;
  o.serviceLevel = 3;
  o.trafficClass = 106;
  o.timeout = 18;
  o.retryCount = 5;
  ibv_qp_attr a;
  int mask = 0;
  initTransition(ibPort, &a, &mask);
  EXPECT_EQ(a.qp_state, IBV_QPS_INIT);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  EXPECT_TRUE(a.qp_access_flags & IBV_ACCESS_REMOTE_WRITE);
  rtrTransition(ibPort, remote, 1, o, &a, &mask);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(a.dest_qp_num, 101u);
  EXPECT_EQ(a.rq_psn, 77u);
  EXPECT_EQ(a.path_mtu, IBV_MTU_2048);  // the smaller of the two ends
  EXPECT_EQ(a.ah_attr.is_global, 0);
  EXPECT_EQ(a.ah_attr.dlid, 9);
  EXPECT_EQ(a.ah_attr.sl, 3);
  EXPECT_TRUE(mask & IBV_QP_AV);
  EXPECT_TRUE(mask & IBV_QP_DEST_QPN);
  LocalPort roce = ibPort;
  roce.roce = true;
  roce.gidIndex = 3;
  rtrTransition(roce, remote, 0, o, &a, &mask);
  EXPECT_EQ(a.ah_attr.is_global, 1);
  EXPECT_EQ(a.ah_attr.grh.sgid_index, 3);
  EXPECT_EQ(a.ah_attr.grh.dgid.raw[15], 3);
  EXPECT_EQ(a.ah_attr.grh.traffic_class, 106);
  rtsTransition(1234, o, &a, &mask);
  EXPECT_EQ(a.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(a.sq_psn, 1234u);
  EXPECT_EQ(a.timeout, 18);
  EXPECT_EQ(a.retry_cnt, 5);
  EXPECT_EQ(a.rnr_retry, 7);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

TEST(IbLogic, MessagesSplitOverQueuePairsInAlignedPieces) {
  for (int nqps : {1, 2, 3, 4, 16}) {
    for (size_t total : {size_t(0), size_t(1), size_t(127), size_t(128), size_t(1000), size_t(4096),
                         size_t(1) << 20, (size_t(1) << 20) + 3}) {
      size_t next = 0;
      for (int q = 0; q < nqps; ++q) {
        Chunk c = chunkOfQp(total, nqps, q);
        if (c.bytes > 0) {
          EXPECT_EQ(c.offset, next) << total << " over " << nqps;
          if (c.offset + c.bytes < total) {
            EXPECT_EQ(c.bytes % 128, 0u);
          }
        }
        next = c.offset + c.bytes;
      }
      EXPECT_EQ(next, total) << total << " over " << nqps;
    }
  }
}

TEST(IbLogic, RegistrationCacheSharesPagesAndCountsReferences) {
  MrCache cache(4096);
  int registered = 0, deregistered = 0;
  std::vector<std::pair<uintptr_t, size_t>> regions;
  auto reg = [&](void* b, size_t n) -> chorus::Result<void*> {
    ++registered;
    regions.push_back({reinterpret_cast<uintptr_t>(b), n});
    return reinterpret_cast<void*>(static_cast<uintptr_t>(registered));
  };
  auto dereg = [&](void*) {
    ++deregistered;
    return chorus::Status::ok();
  };
  alignas(4096) static char buf[5 * 4096];
  auto a = cache.acquire(buf + 100, 8000, reg);  // pages 0-1
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(regions[0].first, reinterpret_cast<uintptr_t>(buf));
  EXPECT_EQ(regions[0].second, 2u * 4096);
  auto b = cache.acquire(buf + 4096, 100, reg);  // inside: shared
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b.value(), a.value());
  EXPECT_EQ(registered, 1);
  auto c = cache.acquire(buf + 4096, 3 * 4096, reg);  // reaches past: a new registration
  ASSERT_TRUE(c.isOk());
  EXPECT_NE(c.value(), a.value());
  EXPECT_EQ(registered, 2);
  EXPECT_EQ(cache.entries(), 2u);
  EXPECT_TRUE(cache.release(a.value(), dereg).isOk());
  EXPECT_EQ(deregistered, 0);  // b still holds it
  EXPECT_TRUE(cache.release(b.value(), dereg).isOk());
  EXPECT_EQ(deregistered, 1);
  EXPECT_FALSE(cache.release(b.value(), dereg).isOk());  // no longer registered
  EXPECT_TRUE(cache.release(c.value(), dereg).isOk());
  EXPECT_EQ(cache.entries(), 0u);
  // An entry of its own (a dma-buf's) is neither taken by nor takes other registrations.
  auto own = cache.acquire(buf + 100, 100, reg, false);
  ASSERT_TRUE(own.isOk());
  auto within = cache.acquire(buf + 200, 10, reg);
  ASSERT_TRUE(within.isOk());
  EXPECT_NE(within.value(), own.value());
  auto ownAgain = cache.acquire(buf + 200, 10, reg, false);
  ASSERT_TRUE(ownAgain.isOk());
  EXPECT_NE(ownAgain.value(), within.value());
  EXPECT_NE(ownAgain.value(), own.value());
  EXPECT_EQ(registered, 5);
  for (auto* e : {own.value(), within.value(), ownAgain.value()})
    EXPECT_TRUE(cache.release(e, dereg).isOk());
  EXPECT_EQ(cache.entries(), 0u);
  auto failing = cache.acquire(buf, 10, [](void*, size_t) -> chorus::Result<void*> {
    return chorus::systemError("no memory to pin");
  });
  ASSERT_FALSE(failing.isOk());
  EXPECT_EQ(failing.status().message(), "no memory to pin");
  EXPECT_EQ(cache.entries(), 0u);
}

TEST(IbLogic, KnobsOutOfRangeAreErrorsNamingTheVariable) {
  {
    auto o = optionsFromEnvironment();
    ASSERT_TRUE(o.isOk());
    EXPECT_EQ(o.value().qpsPerConnection, 1);
    EXPECT_FALSE(o.value().adaptiveRouting);
  }
  {
    ScopedEnv e("NCCL_IB_QPS_PER_CONNECTION", "4");
    ScopedEnv ar("NCCL_IB_ADAPTIVE_ROUTING", "1");
    auto o = optionsFromEnvironment();
    ASSERT_TRUE(o.isOk());
    EXPECT_EQ(o.value().qpsPerConnection, 4);
    EXPECT_TRUE(o.value().adaptiveRouting);
  }
  {
    ScopedEnv e("NCCL_IB_QPS_PER_CONNECTION", "17");
    auto o = optionsFromEnvironment();
    ASSERT_FALSE(o.isOk());
    EXPECT_EQ(o.status().message(),
              "NCCL_IB_QPS_PER_CONNECTION=17: expected an integer from 1 to 16");
  }
  {
    ScopedEnv e("CHORUS_IB_TIMEOUT", "x");
    auto o = optionsFromEnvironment();
    ASSERT_FALSE(o.isOk());
    EXPECT_NE(o.status().message().find("CHORUS_IB_TIMEOUT=x"), std::string::npos);
  }
}

TEST(IbLogic, PortRatesAndGidText) {
  EXPECT_EQ(portRateGbps(2, 64), 200);   // 4x HDR
  EXPECT_EQ(portRateGbps(2, 128), 400);  // 4x NDR
  EXPECT_EQ(portRateGbps(1, 32), 25);    // 1x EDR
  EXPECT_EQ(portRateGbps(3, 32), 0);     // no such width
  uint8_t gid[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x0e, 0x42, 0xa1, 0xff, 0xfe, 0x5f, 0x0a, 0x3c};
  EXPECT_EQ(gidToString(gid), "fe80:0000:0000:0000:0e42:a1ff:fe5f:0a3c");
}

TEST(IbDevices, DescribedAsTheTopologyDescribesThem) {
  const chorus::VerbsApi* v = fakeVerbs();
  ASSERT_NE(v, nullptr);
  std::vector<ibv_context*> contexts;
  auto topo = chorus::describeIbDevices(v, &contexts);
  ASSERT_TRUE(topo.isOk()) << topo.status().message();
  ASSERT_EQ(topo.value().ibDevices.size(), 2u);
  const chorus::IbDevice& ibDev = topo.value().ibDevices[0];
  EXPECT_EQ(ibDev.name, "mlx5_0");
  ASSERT_EQ(ibDev.ports.size(), 1u);
  EXPECT_EQ(ibDev.ports[0].state, "ACTIVE");
  EXPECT_EQ(ibDev.ports[0].linkLayer, "InfiniBand");
  EXPECT_EQ(ibDev.ports[0].rateGbps, 200);
  ASSERT_EQ(ibDev.ports[0].gids.size(), 1u);  // zero entries are left out
  const chorus::IbPort& roce = topo.value().ibDevices[1].ports[0];
  EXPECT_EQ(roce.linkLayer, "Ethernet");
  ASSERT_EQ(roce.gids.size(), 4u);
  EXPECT_EQ(roce.gids[1].type, "RoCE v2");
  EXPECT_EQ(roce.gids[2].gid, "0000:0000:0000:0000:0000:ffff:0a00:0002");
  for (ibv_context* c : contexts) v->closeDevice(c);
}

TEST(IbDevices, HcaFilterAndGidPolicyChoosePorts) {
  const chorus::VerbsApi* v = fakeVerbs();
  ASSERT_NE(v, nullptr);
  auto closeAll = [&](const std::vector<chorus::IbPortChoice>& ports) {
    std::vector<ibv_context*> seen;
    for (const auto& p : ports)
      if (std::find(seen.begin(), seen.end(), p.ctx) == seen.end()) seen.push_back(p.ctx);
    for (ibv_context* c : seen) v->closeDevice(c);
  };
  {
    auto all = chorus::discoverIbPorts(v);
    ASSERT_TRUE(all.isOk()) << all.status().message();
    ASSERT_EQ(all.value().size(), 2u);
    EXPECT_FALSE(all.value()[0].local.roce);
    EXPECT_EQ(all.value()[0].local.lid, 0x11);
    EXPECT_TRUE(all.value()[1].local.roce);
    EXPECT_EQ(all.value()[1].local.gidIndex, 3);  // RoCE v2, IPv4
    EXPECT_EQ(all.value()[1].gid[12], 10);
    closeAll(all.value());
  }
  {
    ScopedEnv hca("NCCL_IB_HCA", "=mlx5_1");
    ScopedEnv version("NCCL_IB_ROCE_VERSION_NUM", "1");
    auto one = chorus::discoverIbPorts(v);
    ASSERT_TRUE(one.isOk()) << one.status().message();
    ASSERT_EQ(one.value().size(), 1u);
    EXPECT_EQ(one.value()[0].device, "mlx5_1");
    EXPECT_EQ(one.value()[0].local.gidIndex, 2);  // RoCE v1, IPv4
    closeAll(one.value());
  }
  {
    ScopedEnv hca("NCCL_IB_HCA", "mlx4");
    auto none = chorus::discoverIbPorts(v);
    ASSERT_FALSE(none.isOk());
    EXPECT_NE(none.status().message().find("NCCL_IB_HCA=\"mlx4\" matches no HCA port"),
              std::string::npos)
        << none.status().message();
  }
  {
    ScopedEnv gid("NCCL_IB_GID_INDEX", "6");
    ScopedEnv hca("NCCL_IB_HCA", "mlx5_1");
    auto bad = chorus::discoverIbPorts(v);
    ASSERT_FALSE(bad.isOk());
    EXPECT_NE(bad.status().message().find("mlx5_1"), std::string::npos) << bad.status().message();
  }
}

// In a child with only ports that are down: the network cannot be used, and says why.
TEST(IbDevices, PortsThatAreDownAreNotUsed) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("FAKE_IBV_DEVICES", "mlx5_0:ib:down,mlx5_1:roce:down", 1);
    auto v = chorus::loadVerbs(getenv("CHORUS_IB_VERBS_LIBRARY"));
    if (!v.isOk()) _exit(2);
    auto net = chorus::makeIbNet(v.value().get());
    if (net.isOk()) _exit(3);
    _exit(net.status().message() == "IB: no active port (mlx5_0:1 is DOWN, mlx5_1:1 is DOWN)" ? 0
                                                                                              : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// A grouped receive (net_plugin_testing.h): one FIFO write tells the sender of its three
// buffers.
void expectOneFifoWrite(NetPlugin& p, void* send, void* recv, int nqps) {
  NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(0, &props).isOk());
  EXPECT_EQ(props.maxRecvs, kMaxRecvs);
  const size_t bytes[3] = {100, size_t(3) << 20, 0};
  const FakeVerbsStats before = fakeStats();
  expectGroupedReceive(p, send, recv, bytes);
  const FakeVerbsStats after = fakeStats();
  // Adaptive routing writes each queue pair's data without immediate first.
  const char* ar = getenv("NCCL_IB_ADAPTIVE_ROUTING");
  uint64_t dataWrites = 0;
  for (int i = 0; ar != nullptr && atoi(ar) == 1 && i < 3; ++i)
    for (int q = 0; q < nqps; ++q) dataWrites += chunkOfQp(bytes[i], nqps, q).bytes > 0 ? 1 : 0;
  EXPECT_EQ((after.writes - after.immWrites) - (before.writes - before.immWrites), 1u + dataWrites);
  EXPECT_EQ(after.immWrites - before.immWrites, static_cast<uint64_t>(3 * nqps));
}

void expectMessagesArrive(int dev) {
  const chorus::VerbsApi* v = fakeVerbs();
  ASSERT_NE(v, nullptr);
  auto made = chorus::makeIbNet(v);
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  EXPECT_STREQ(p.name(), "IB");
  ASSERT_EQ(p.devices(), 2);
  NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(dev, &props).isOk());
  EXPECT_EQ(props.name, dev == 0 ? "mlx5_0:1" : "mlx5_1:1");
  EXPECT_EQ(props.speedMbps, dev == 0 ? 200000 : 100000);
  const FakeVerbsStats before = fakeStats();
  void *send = nullptr, *recv = nullptr;
  connectPair(p, dev, &send, &recv);
  const int nqps =
      atoi(getenv("NCCL_IB_QPS_PER_CONNECTION") ? getenv("NCCL_IB_QPS_PER_CONNECTION") : "1");
  for (size_t bytes : {size_t(0), size_t(1), size_t(4096), size_t(3) << 20}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> out(bytes + 1), in(bytes + 64, 0xee);
    for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 7 + bytes);
    void *smr = nullptr, *rmr = nullptr;
    ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
    ASSERT_TRUE(p.regMr(recv, in.data(), in.size(), &rmr).isOk());
    void *sreq = nullptr, *rreq = nullptr;
    // A send before its receive is posted waits (no request yet).
    ASSERT_TRUE(p.isend(send, out.data(), bytes, 3, smr, &sreq).isOk());
    EXPECT_EQ(sreq, nullptr);
    ASSERT_TRUE(p.irecv(recv, in.data(), in.size(), 3, rmr, &rreq).isOk());
    ASSERT_NE(rreq, nullptr);
    const FakeVerbsStats mid = fakeStats();
    ASSERT_TRUE(p.isend(send, out.data(), bytes, 3, smr, &sreq).isOk());
    ASSERT_NE(sreq, nullptr);
    size_t sent = 0, got = 0;
    std::string why;
    ASSERT_TRUE(finish(p, sreq, rreq, &sent, &got, &why)) << why;
    EXPECT_EQ(sent, bytes);
    EXPECT_EQ(got, bytes);
    if (bytes > 0) {
      EXPECT_EQ(memcmp(in.data(), out.data(), bytes), 0);
    }
    EXPECT_EQ(in[bytes], 0xee);  // nothing past the message
    // One write with immediate per queue pair carried it.
    EXPECT_EQ(fakeStats().immWrites - mid.immWrites, static_cast<uint64_t>(nqps));
    EXPECT_TRUE(p.deregMr(send, smr).isOk());
    EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
  }
  expectOneFifoWrite(p, send, recv, nqps);
  const FakeVerbsStats after = fakeStats();
  EXPECT_EQ(after.badTransitions, before.badTransitions);
  EXPECT_EQ(after.cqOverruns, 0u);
  if (dev == 1) {
    EXPECT_GT(after.roceConnects, before.roceConnects);
    EXPECT_EQ(after.lastSgidIndex, 3);
  }
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
  EXPECT_EQ(fakeStats().qpsLive, before.qpsLive);
  EXPECT_EQ(fakeStats().mrsLive, before.mrsLive);
}

TEST(IbLogic, GroupedReceiveEntriesAndImmediates) {
  FifoEntry e[3] = {};
  e[0].tag = 5;
  e[1].tag = 6;
  e[2].tag = 5;
  EXPECT_EQ(matchFifoEntry(e, 3, 0, 5), 0);
  EXPECT_EQ(matchFifoEntry(e, 3, 1u, 5), 2);  // entry 0 written: the next of that tag
  EXPECT_EQ(matchFifoEntry(e, 3, 5u, 5), -1);
  EXPECT_EQ(matchFifoEntry(e, 3, 0, 6), 1);
  EXPECT_EQ(matchFifoEntry(e, 2, 1u, 5), -1);  // entry 2 is not in a receive of 2
  EXPECT_EQ(matchFifoEntry(e, 3, 0, 7), -1);
  int index = -1;
  size_t size = 0;
  decodeImm(encodeImm(0, 1, 0xfffffff0u), 1, &index, &size);  // one buffer: the size alone
  EXPECT_EQ(index, 0);
  EXPECT_EQ(size, 0xfffffff0u);
  for (int i : {0, 3, 7})
    for (size_t bytes : {size_t(0), size_t(1), kGroupedMaxBytes}) {
      decodeImm(encodeImm(i, 8, bytes), 8, &index, &size);
      EXPECT_EQ(index, i);
      EXPECT_EQ(size, bytes);
    }
}

TEST(IbNet, MessagesArriveOverInfiniBand) {
  expectMessagesArrive(0);
}
TEST(IbNet, MessagesArriveOverRoce) {
  expectMessagesArrive(1);
}
TEST(IbNet, MessagesArriveOverFourQueuePairs) {
  ScopedEnv qps("NCCL_IB_QPS_PER_CONNECTION", "4");
  expectMessagesArrive(0);
}
TEST(IbNet, MessagesArriveWithAdaptiveRouting) {
  ScopedEnv qps("NCCL_IB_QPS_PER_CONNECTION", "2");
  ScopedEnv ar("NCCL_IB_ADAPTIVE_ROUTING", "1");
  expectMessagesArrive(1);
}

// Memory exported as a dma-buf (a memfd stands for a GPU's) takes RDMA writes once registered
// with ibv_reg_dmabuf_mr at its address; the fd's bytes must be those at the address (the
// stand-in checks, as the HCA would reach them), and an offset or fd that cannot be is an error.
TEST(IbNet, DmaBufMemoryTakesMessages) {
  auto made = chorus::makeIbNet(fakeVerbs());
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  expectDmaBufSupport(p);
  const size_t at = static_cast<size_t>(sysconf(_SC_PAGESIZE)) + 64, bytes = 5000;
  DmaBufStandIn buf(4);
  ASSERT_NE(buf.mem, nullptr);
  const FakeVerbsStats before = fakeStats();
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  void* mr = nullptr;
  EXPECT_FALSE(p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, 3 * 64, buf.fd, &mr).isOk());
  chorus::Status low = p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, 10, buf.fd, &mr);
  EXPECT_EQ(low.code(), chorus::Code::kInvalidArgument) << low.message();
  EXPECT_EQ(p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, at, -1, &mr).code(),
            chorus::Code::kInvalidArgument);
  EXPECT_EQ(fakeStats().dmabufMrs, before.dmabufMrs);
  chorus::Status right = p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, at, buf.fd, &mr);
  ASSERT_TRUE(right.isOk()) << right.message();
  EXPECT_EQ(fakeStats().dmabufMrs, before.dmabufMrs + 1);
  std::vector<unsigned char> out(bytes);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 31 + 7);
  void* smr = nullptr;
  ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
  void *sreq = nullptr, *rreq = nullptr;
  ASSERT_TRUE(p.irecv(recv, buf.mem + at, bytes, 2, mr, &rreq).isOk());
  ASSERT_TRUE(p.isend(send, out.data(), bytes, 2, smr, &sreq).isOk());
  size_t sent = 0, got = 0;
  std::string why;
  ASSERT_TRUE(finish(p, sreq, rreq, &sent, &got, &why)) << why;
  EXPECT_EQ(got, bytes);
  EXPECT_EQ(memcmp(buf.mem + at, out.data(), bytes), 0);
  EXPECT_EQ(buf.mem[at + bytes], static_cast<unsigned char>((at + bytes) % 253));
  // A second registration of the same pages is a registration of its own (the addresses may
  // map other memory by then); past the end of the dma-buf is an error.
  void* again = nullptr;
  ASSERT_TRUE(p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, at, buf.fd, &again).isOk());
  EXPECT_NE(again, mr);
  EXPECT_EQ(fakeStats().dmabufMrs, before.dmabufMrs + 2);
  void* past = nullptr;
  EXPECT_FALSE(
      p.regMrDmaBuf(recv, buf.mem + at, bytes, NCCL_PTR_CUDA, buf.bytes, buf.fd, &past).isOk());
  // Host memory, or dma-buf memory that took no bytes, needs no flush; what the HCA wrote
  // into dma-buf memory gets an RDMA read of it through the flush queue pair (connected to
  // itself), complete when tested.
  void* data[2] = {out.data(), buf.mem + at};
  size_t sizes[2] = {bytes, 0};
  void* handles[2] = {smr, mr};
  EXPECT_TRUE(p.flushesDevice());
  void* flush = &flush;
  EXPECT_TRUE(p.iflush(recv, 1, data, sizes, handles, &flush).isOk());
  EXPECT_EQ(flush, nullptr);
  EXPECT_TRUE(p.iflush(recv, 2, data, sizes, handles, &flush).isOk());
  EXPECT_EQ(flush, nullptr);
  EXPECT_EQ(fakeStats().reads, before.reads);
  sizes[1] = bytes;
  for (int round = 0; round < 40; ++round) {  // more than the flush slots: each is reused
    ASSERT_TRUE(p.iflush(recv, 2, data, sizes, handles, &flush).isOk());
    ASSERT_NE(flush, nullptr);
    ASSERT_TRUE(finish(p, nullptr, flush, nullptr, nullptr, &why)) << why;
  }
  EXPECT_EQ(fakeStats().reads, before.reads + 40);
  EXPECT_TRUE(p.deregMr(recv, again).isOk());
  EXPECT_TRUE(p.deregMr(recv, mr).isOk());
  EXPECT_TRUE(p.deregMr(send, smr).isOk());
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
  EXPECT_EQ(fakeStats().mrsLive, before.mrsLive);
}

// A kernel driver that does not take dma-bufs (the registration probe at discovery says so):
// the devices say host memory only and a dma-buf registration is refused naming the HCA.
TEST(IbNet, DmaBufsWhereTheDriverRefusesThem) {
  ScopedEnv none("FAKE_IBV_NO_DMABUF", "1");
  auto made = chorus::makeIbNet(fakeVerbs());
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(0, &props).isOk());
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  DmaBufStandIn buf(1);
  ASSERT_NE(buf.mem, nullptr);
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  void* mr = nullptr;
  chorus::Status s = p.regMrDmaBuf(recv, buf.mem, 64, NCCL_PTR_CUDA, 0, buf.fd, &mr);
  EXPECT_EQ(s.code(), chorus::Code::kInvalidUsage);
  EXPECT_NE(s.message().find("mlx5_0 does not register dma-bufs"), std::string::npos)
      << s.message();
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

// Up to 32 requests of each direction are in flight; the next waits for a slot; many
// messages pipeline through the FIFO in order, each in its own buffer.
TEST(IbNet, RequestsPipelineUpToTheLimit) {
  auto made = chorus::makeIbNet(fakeVerbs());
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  constexpr int kMsgs = 100;
  constexpr size_t kBytes = 1000;
  std::vector<int> out(kMsgs * kBytes / sizeof(int)), in(out.size(), -1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int>(i * 13);
  void *smr = nullptr, *rmr = nullptr;
  ASSERT_TRUE(p.regMr(send, out.data(), out.size() * sizeof(int), &smr).isOk());
  ASSERT_TRUE(p.regMr(recv, in.data(), in.size() * sizeof(int), &rmr).isOk());
  std::vector<void*> rreqs, sreqs;
  char* inBytes = reinterpret_cast<char*>(in.data());
  char* outBytes = reinterpret_cast<char*>(out.data());
  int posted = 0;
  while (posted < kMaxRequests) {
    void* r = nullptr;
    ASSERT_TRUE(p.irecv(recv, inBytes + posted * kBytes, kBytes, 1, rmr, &r).isOk());
    ASSERT_NE(r, nullptr);
    rreqs.push_back(r);
    ++posted;
  }
  void* extra = nullptr;
  ASSERT_TRUE(p.irecv(recv, inBytes + posted * kBytes, kBytes, 1, rmr, &extra).isOk());
  EXPECT_EQ(extra, nullptr);  // the 33rd waits
  int sentCount = 0, doneRecv = 0, doneSend = 0;
  for (long iter = 0; iter < 10000000 && doneRecv < kMsgs; ++iter) {
    if (sentCount < posted) {
      void* s = nullptr;
      ASSERT_TRUE(p.isend(send, outBytes + sentCount * kBytes, kBytes, 1, smr, &s).isOk());
      if (s != nullptr) {
        sreqs.push_back(s);
        ++sentCount;
      }
    }
    if (doneSend < sentCount) {
      bool d = false;
      ASSERT_TRUE(p.test(sreqs[doneSend], &d, nullptr).isOk());
      if (d) ++doneSend;
    }
    if (doneRecv < posted) {
      bool d = false;
      size_t got = 0;
      ASSERT_TRUE(p.test(rreqs[doneRecv], &d, &got).isOk());
      if (d) {
        EXPECT_EQ(got, kBytes);
        ++doneRecv;
      }
    }
    if (posted < kMsgs && posted - doneRecv < kMaxRequests) {
      void* r = nullptr;
      ASSERT_TRUE(p.irecv(recv, inBytes + posted * kBytes, kBytes, 1, rmr, &r).isOk());
      if (r != nullptr) {
        rreqs.push_back(r);
        ++posted;
      }
    }
  }
  ASSERT_EQ(doneRecv, kMsgs);
  EXPECT_EQ(in, out);
  EXPECT_EQ(fakeStats().cqOverruns, 0u);
  EXPECT_TRUE(p.deregMr(send, smr).isOk());
  EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

// A send that does not fit its receive, a tag that differs, a write the fabric refuses and a
// peer that closed are errors that say so, never a hang or data past the buffer.
TEST(IbNet, FailuresAreErrorsThatSayWhy) {
  auto made = chorus::makeIbNet(fakeVerbs());
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  std::vector<char> out(8192, 1), in(8192, 0);
  auto attempt = [&](size_t sendBytes, size_t recvBytes, int sendTag, int failNext,
                     bool closeReceiver) -> std::string {
    void *send = nullptr, *recv = nullptr;
    connectPair(p, 0, &send, &recv);
    void *smr = nullptr, *rmr = nullptr;
    EXPECT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
    EXPECT_TRUE(p.regMr(recv, in.data(), in.size(), &rmr).isOk());
    void *sreq = nullptr, *rreq = nullptr;
    EXPECT_TRUE(p.irecv(recv, in.data(), recvBytes, 5, rmr, &rreq).isOk());
    if (failNext > 0) failWrites(failNext);
    std::string why = "no error";
    size_t a = 0, b = 0;
    if (closeReceiver) {
      EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
      EXPECT_TRUE(p.closeRecv(recv).isOk());
      recv = nullptr;
      rreq = nullptr;
    }
    chorus::Status s = p.isend(send, out.data(), sendBytes, sendTag, smr, &sreq);
    if (!s.isOk())
      why = s.message();
    else if (sreq != nullptr && !finish(p, sreq, rreq, &a, &b, &why))
      ;  // why says
    else if (sreq == nullptr)
      why = "not posted";
    EXPECT_TRUE(p.deregMr(send, smr).isOk());
    EXPECT_TRUE(p.closeSend(send).isOk());
    if (recv != nullptr) {
      EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
      EXPECT_TRUE(p.closeRecv(recv).isOk());
    }
    return why;
  };
  EXPECT_NE(attempt(4096, 1024, 5, 0, false).find("a send of 4096 bytes met a receive of 1024"),
            std::string::npos);
  EXPECT_NE(attempt(100, 1024, 6, 0, false).find("a send with tag 6 met a receive with tag 5"),
            std::string::npos);
  const std::string refused = attempt(100, 1024, 5, 1, false);
  EXPECT_NE(refused.find("remote access error"), std::string::npos) << refused;
  EXPECT_NE(refused.find("IB mlx5_0:1 (sending to"), std::string::npos) << refused;
  const std::string gone = attempt(100, 1024, 5, 0, true);
  EXPECT_NE(gone.find("transport retry counter exceeded"), std::string::npos) << gone;
  EXPECT_EQ(fakeStats().cqOverruns, 0u);
}

// A sender that finished and closed: the receive it completed stays complete, with its data,
// although the next receive's FIFO write then fails on the closed queue pair.
TEST(IbNet, CompletedReceivesSurviveAPeerThatCloses) {
  auto made = chorus::makeIbNet(fakeVerbs());
  ASSERT_TRUE(made.isOk()) << made.status().message();
  NetPlugin& p = *made.value();
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  std::vector<char> out(4096), in(8192, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<char>(i * 5);
  void *smr = nullptr, *rmr = nullptr;
  ASSERT_TRUE(p.regMr(send, out.data(), out.size(), &smr).isOk());
  ASSERT_TRUE(p.regMr(recv, in.data(), in.size(), &rmr).isOk());
  void *rreq = nullptr, *sreq = nullptr, *next = nullptr;
  ASSERT_TRUE(p.irecv(recv, in.data(), 4096, 9, rmr, &rreq).isOk());
  ASSERT_TRUE(p.isend(send, out.data(), 4096, 9, smr, &sreq).isOk());
  ASSERT_NE(sreq, nullptr);
  size_t sent = 0, got = 0;
  std::string why;
  ASSERT_TRUE(finish(p, sreq, nullptr, &sent, &got, &why)) << why;
  ASSERT_TRUE(p.deregMr(send, smr).isOk());
  ASSERT_TRUE(p.closeSend(send).isOk());
  ASSERT_TRUE(p.irecv(recv, in.data() + 4096, 4096, 9, rmr, &next).isOk());
  ASSERT_NE(next, nullptr);
  bool done = false;
  chorus::Status first = p.test(rreq, &done, &got);
  ASSERT_TRUE(first.isOk()) << first.message();
  ASSERT_TRUE(done);
  EXPECT_EQ(got, 4096u);
  EXPECT_EQ(memcmp(in.data(), out.data(), 4096), 0);
  chorus::Status second = p.test(next, &done, &got);
  EXPECT_FALSE(second.isOk());
  EXPECT_NE(second.message().find("transport retry counter exceeded"), std::string::npos)
      << second.message();
  EXPECT_TRUE(p.deregMr(recv, rmr).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

// Chosen without being asked for when an HCA port is active; NCCL_NET=Socket,
// NCCL_IB_DISABLE=1, or no usable port leave the sockets; NCCL_NET=IB insists.
TEST(IbChoice, UsedWhereAPortIsActive) {
  EXPECT_EQ(chooseInChild({{"NCCL_NET_PLUGIN", "none"}}), "IB v10");
  EXPECT_EQ(chooseInChild({}), "IB v10");  // no libnccl-net.so here
  EXPECT_EQ(chooseInChild({{"NCCL_NET", "ib"}}), "IB v10");
  EXPECT_EQ(chooseInChild({{"NCCL_NET", "Socket"}}), "none");
  EXPECT_EQ(chooseInChild({{"NCCL_IB_DISABLE", "1"}}), "none");
  EXPECT_EQ(chooseInChild({{"FAKE_IBV_DEVICES", "mlx5_0:ib:down"}}), "none");
  EXPECT_EQ(chooseInChild({{"NCCL_IB_HCA", "mlx4"}}), "none");
  EXPECT_EQ(chooseInChild({{"NCCL_IB_DISABLE", "1"}, {"NCCL_NET", "IB"}}),
            "error 4: NCCL_NET=IB: the IB network cannot be used: NCCL_IB_DISABLE=1 turns it off");
  EXPECT_EQ(chooseInChild({{"FAKE_IBV_DEVICES", "mlx5_0:ib:down"}, {"NCCL_NET", "IB"}}),
            "error 4: NCCL_NET=IB: the IB network cannot be used: IB: no active port (mlx5_0:1 "
            "is DOWN)");
  const std::string noLib =
      chooseInChild({{"CHORUS_IB_VERBS_LIBRARY", "libno-such-verbs.so"}, {"NCCL_NET", "IB"}});
  EXPECT_EQ(noLib.rfind("error 4: NCCL_NET=IB: the IB network cannot be used: cannot load "
                        "libno-such-verbs.so",
                        0),
            0u)
      << noLib;
}

}  // namespace
