// Sends and receives on device communicators, proven on the CPU: the schedule that turns one
// group's transfers into launches (encodeP2pLaunches), and those launches run by the CPU twin
// of the kernel on every rank at once: all-to-all, gather and scatter patterns, several
// transfers to one peer in one group, transfers larger than the FIFO both ways at once, groups
// one after another, and a receiver that never comes stopped by abort. Every received byte is
// checked against the pattern its sender wrote; a schedule that could deadlock is caught by a
// watchdog that aborts the clique and fails the test.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda/dev_emulator.h"
#include "device/comm_host_links.h"
#include "transport/connector.h"
#include "transport/device_proxy.h"
#include "cuda/dev_plan.h"

namespace chorus {
namespace dev {
namespace {

DeviceShape shapeOf(int nranks) {
  DeviceShape s;
  s.nranks = nranks;
  return s;
}

DeviceP2p sendTo(int peer, const void* buf, size_t bytes) {
  DeviceP2p op;
  op.isSend = true;
  op.peer = peer;
  op.sendbuff = buf;
  op.bytes = bytes;
  return op;
}

DeviceP2p recvFrom(int peer, void* buf, size_t bytes) {
  DeviceP2p op;
  op.peer = peer;
  op.recvbuff = buf;
  op.bytes = bytes;
  return op;
}

TEST(EncodeP2p, AllToAllOfEightRanksTakesTwoLaunches) {
  const int n = 8, me = 3;
  std::vector<char> send(64 * n), recv(64 * n);
  std::vector<DeviceP2p> ops;
  for (int p = 0; p < n; ++p) {
    ops.push_back(sendTo(p, send.data() + 64 * p, 64));
    ops.push_back(recvFrom(p, recv.data() + 64 * p, 64));
  }
  std::vector<Launch> launches;
  ASSERT_TRUE(encodeP2pLaunches(shapeOf(n), nullptr, me, ops.data(), ops.size(), &launches).isOk());
  ASSERT_EQ(launches.size(), 2u);
  // Distances 0..3: the copy to itself, then a send and a receive per distance.
  ASSERT_EQ(launches[0].nworks, 7);
  ASSERT_EQ(launches[1].nworks, 8);
  const Work& copy = launches[0].works[0];
  EXPECT_EQ(copy.coll, Coll::kCopy);
  EXPECT_EQ(copy.sendbuff, send.data() + 64 * me);
  EXPECT_EQ(copy.recvbuff, recv.data() + 64 * me);
  int sends = 0, recvs = 0;
  for (const Launch& l : launches) {
    EXPECT_EQ(l.p2p, 1);
    for (int i = 0; i < l.nworks; ++i) {
      const Work& w = l.works[i];
      EXPECT_EQ(w.type, static_cast<uint8_t>(DataType::kUint8));
      EXPECT_EQ(w.redKind, static_cast<uint8_t>(RedKind::kSum));
      EXPECT_EQ(w.count, 64u);
      if (w.coll == Coll::kSend) {
        ++sends;
        EXPECT_EQ(w.sendbuff, send.data() + 64 * w.peer);
      } else if (w.coll == Coll::kRecv) {
        ++recvs;
        EXPECT_EQ(w.recvbuff, recv.data() + 64 * w.peer);
      }
    }
  }
  EXPECT_EQ(sends, n - 1);
  EXPECT_EQ(recvs, n - 1);
  // Launch 0 holds distances 1..3: sends to 4, 5, 6 and receives from 2, 1, 0.
  for (int i = 1; i < 7; ++i) {
    const Work& w = launches[0].works[i];
    const int d = w.coll == Coll::kSend ? (w.peer - me + n) % n : (me - w.peer + n) % n;
    EXPECT_GE(d, 1);
    EXPECT_LE(d, 3);
  }
}

TEST(EncodeP2p, SecondTransferToAPeerGoesIntoALaterLaunch) {
  char a[8], b[8];
  std::vector<DeviceP2p> ops = {sendTo(1, a, 8), sendTo(1, b, 8)};
  std::vector<Launch> launches;
  ASSERT_TRUE(encodeP2pLaunches(shapeOf(2), nullptr, 0, ops.data(), ops.size(), &launches).isOk());
  ASSERT_EQ(launches.size(), 2u) << "one FIFO per peer: transfers to it go one after another";
  EXPECT_EQ(launches[0].works[0].sendbuff, a);
  EXPECT_EQ(launches[1].works[0].sendbuff, b);
}

// A large transfer runs as parts on links of their own, a block each: the sender's and the
// receiver's parts cut the same bytes (16-byte multiples) and use the same links; a launch
// holds every part of its distances.
TEST(EncodeP2p, LargeTransfersRunInPartsOnLinksOfTheirOwn) {
  DeviceShape shape = shapeOf(3);
  shape.p2pParts = kP2pParts;
  shape.p2pPartBytes = 1000;
  EXPECT_EQ(p2pPartsOf(shape, 999), 1);
  EXPECT_EQ(p2pPartsOf(shape, 2500), 2);
  EXPECT_EQ(p2pPartsOf(shape, 1000000), kP2pParts);
  shape.p2pParts = 1;
  EXPECT_EQ(p2pPartsOf(shape, 1000000), 1) << "never more parts than links";
  shape.p2pParts = kP2pParts;
  std::vector<char> send(3 * 4001), recv(3 * 4001);
  std::vector<DeviceP2p> ops;
  for (int p = 0; p < 3; ++p) {
    ops.push_back(sendTo(p, send.data() + 4001 * p, 4001));
    ops.push_back(recvFrom(p, recv.data() + 4001 * p, 4001));
  }
  std::vector<Launch> launches;
  ASSERT_TRUE(encodeP2pLaunches(shape, nullptr, 1, ops.data(), ops.size(), &launches).isOk());
  ASSERT_EQ(launches.size(), 1u);
  ASSERT_EQ(launches[0].nworks, 5 * kP2pParts) << "a copy, two sends, two receives: 4 parts each";
  // Per transfer (collective and peer): its parts in order, consecutive, on 16-byte offsets.
  std::map<std::pair<int, int>, std::pair<int, size_t>> seen;  // -> next part, bytes covered
  for (int i = 0; i < launches[0].nworks; ++i) {
    const Work& w = launches[0].works[i];
    auto& [next, covered] = seen[{static_cast<int>(w.coll), w.peer}];
    EXPECT_EQ(w.part, next++);
    const bool intoRecv = w.coll == Coll::kRecv;
    const char* base = intoRecv ? recv.data() + 4001 * w.peer : send.data() + 4001 * w.peer;
    const char* at = static_cast<const char*>(intoRecv ? w.recvbuff : w.sendbuff);
    EXPECT_EQ(static_cast<size_t>(at - base), covered) << "parts are consecutive";
    EXPECT_EQ(covered % 16, 0u);
    if (w.coll == Coll::kCopy) {
      EXPECT_EQ(static_cast<char*>(w.recvbuff), recv.data() + 4001 * 1 + covered);
    }
    covered += w.count;
  }
  ASSERT_EQ(seen.size(), 5u);
  for (const auto& [key, state] : seen) {
    EXPECT_EQ(state.first, kP2pParts) << "collective " << key.first << ", peer " << key.second;
    EXPECT_EQ(state.second, 4001u) << "collective " << key.first << ", peer " << key.second;
  }
}

TEST(EncodeP2p, ProtocolFollowsTheSizeAndTheOverride) {
  ProtoMask both;
  EXPECT_EQ(chooseP2pProto(both, 64), Proto::kLl);
  EXPECT_EQ(chooseP2pProto(both, 4 << 20), Proto::kSimple);
  Result<ProtoMask> simple = parseProtoList("Simple", "NCCL_PROTO=Simple");
  ASSERT_TRUE(simple.isOk());
  EXPECT_EQ(chooseP2pProto(simple.value(), 64), Proto::kSimple);
  Result<ProtoMask> ll = parseProtoList("LL", "NCCL_PROTO=LL");
  ASSERT_TRUE(ll.isOk());
  EXPECT_EQ(chooseP2pProto(ll.value(), 4 << 20), Proto::kLl);
}

TEST(EncodeP2p, BadGroupsAreRefusedWithReasons) {
  char a[16], b[16];
  std::vector<Launch> launches;
  std::vector<DeviceP2p> ops = {sendTo(0, a, 16)};
  Status s = encodeP2pLaunches(shapeOf(2), nullptr, 0, ops.data(), ops.size(), &launches);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("itself"), std::string::npos) << s.message();
  ops = {sendTo(0, a, 16), recvFrom(0, b, 8)};
  s = encodeP2pLaunches(shapeOf(2), nullptr, 0, ops.data(), ops.size(), &launches);
  EXPECT_EQ(s.code(), Code::kInvalidUsage);
  EXPECT_NE(s.message().find("16 bytes"), std::string::npos) << s.message();
  ops = {sendTo(2, a, 16)};
  s = encodeP2pLaunches(shapeOf(2), nullptr, 0, ops.data(), ops.size(), &launches);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("peer 2"), std::string::npos) << s.message();
  EXPECT_TRUE(launches.empty());
  ops = {sendTo(1, a, 0), recvFrom(1, b, 0)};
  ASSERT_TRUE(encodeP2pLaunches(shapeOf(2), nullptr, 0, ops.data(), ops.size(), &launches).isOk());
  EXPECT_TRUE(launches.empty()) << "empty transfers launch nothing";
}

// The byte at offset i of the k-th transfer from src to dst.
unsigned char pattern(int src, int dst, int k, size_t i) {
  return static_cast<unsigned char>(src * 131 + dst * 31 + k * 7 + i * 13 + (i >> 8));
}

// One transfer of a test: from src to dst, the k-th between them in its group.
struct Transfer {
  int src, dst;
  size_t bytes;
  size_t sendOffset, recvOffset;  // into the ranks' buffers (unaligned ones on purpose)
};

struct Group {
  std::vector<Transfer> transfers;
};

// Runs groups one after another on every rank of a clique, each rank's launches on its own
// thread, then checks every received byte. A watchdog aborts the clique if the ranks have not
// finished in time (a schedule that deadlocks fails instead of hanging).
// Transfers of at least 2 x partBytes run in parts, each on a link of its own.
void runGroups(int nranks, const std::vector<Group>& groups, int threadsPerBlock,
               const EmuGeometry& g = EmuGeometry(), const ProtoMask& protos = ProtoMask(),
               size_t partBytes = 4096) {
  EmuClique clique(nranks, g);
  DeviceShape shape = shapeOf(nranks);
  shape.protos = protos;
  shape.p2pParts = g.p2pParts;
  shape.p2pPartBytes = partBytes;
  struct Buffers {
    std::vector<unsigned char> send, recv;
  };
  // Per group and rank.
  std::vector<std::vector<Buffers>> bufs(groups.size(), std::vector<Buffers>(nranks));
  std::vector<std::vector<std::vector<Launch>>> launches(groups.size(),
                                                         std::vector<std::vector<Launch>>(nranks));
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::vector<std::vector<DeviceP2p>> ops(nranks);
    std::vector<std::vector<int>> sentTo(nranks, std::vector<int>(nranks, 0));
    for (int r = 0; r < nranks; ++r) {
      size_t sendBytes = 16, recvBytes = 16;
      for (const Transfer& t : groups[gi].transfers) {
        if (t.src == r) sendBytes = std::max(sendBytes, t.sendOffset + t.bytes);
        if (t.dst == r) recvBytes = std::max(recvBytes, t.recvOffset + t.bytes);
      }
      bufs[gi][r].send.assign(sendBytes, 0);
      bufs[gi][r].recv.assign(recvBytes, 0xee);
    }
    for (const Transfer& t : groups[gi].transfers) {
      const int k = sentTo[t.src][t.dst]++;
      unsigned char* src = bufs[gi][t.src].send.data() + t.sendOffset;
      for (size_t i = 0; i < t.bytes; ++i) src[i] = pattern(t.src, t.dst, k, i);
      ops[t.src].push_back(sendTo(t.dst, src, t.bytes));
      ops[t.dst].push_back(recvFrom(t.src, bufs[gi][t.dst].recv.data() + t.recvOffset, t.bytes));
    }
    for (int r = 0; r < nranks; ++r) {
      Status s = encodeP2pLaunches(shape, clique.comm(r), r, ops[r].data(), ops[r].size(),
                                   &launches[gi][r]);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
  }
  std::atomic<int> running{nranks};
  std::vector<int> ok(nranks, 1);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread> ranks;
  for (int r = 0; r < nranks; ++r)
    ranks.emplace_back([&, r] {
      for (size_t gi = 0; gi < groups.size(); ++gi)
        for (const Launch& l : launches[gi][r])
          if (!emuRunLaunch(l, threadsPerBlock)) ok[r] = 0;
      std::lock_guard<std::mutex> lock(mu);
      --running;
      cv.notify_all();
    });
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mu);
    finished = cv.wait_for(lock, std::chrono::seconds(120), [&] { return running.load() == 0; });
  }
  if (!finished) clique.abort();
  for (std::thread& t : ranks) t.join();
  ASSERT_EQ(clique.proxyError(), "");
  ASSERT_TRUE(finished) << "the ranks did not finish: the schedule waits in a cycle";
  for (int r = 0; r < nranks; ++r) {
    ASSERT_TRUE(ok[r]) << "rank " << r << ": no kernel for a launch";
    ASSERT_EQ(clique.comm(r)->errorFlag[0], 0u) << "rank " << r;
  }
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    std::vector<std::vector<int>> seen(nranks, std::vector<int>(nranks, 0));
    for (const Transfer& t : groups[gi].transfers) {
      const int k = seen[t.src][t.dst]++;
      const unsigned char* got = bufs[gi][t.dst].recv.data() + t.recvOffset;
      size_t wrong = 0;
      for (size_t i = 0; i < t.bytes; ++i)
        if (got[i] != pattern(t.src, t.dst, k, i) && wrong++ < 3)
          ADD_FAILURE() << "group " << gi << ": " << t.src << " -> " << t.dst << " #" << k
                        << " byte " << i << ": " << int(got[i]) << ", expected "
                        << int(pattern(t.src, t.dst, k, i));
      EXPECT_EQ(wrong, 0u) << "group " << gi << ": " << t.src << " -> " << t.dst << " #" << k
                           << " of " << t.bytes << " bytes";
    }
  }
}

// All-to-all of `bytes` per pair, blocks laid out as ncclAlltoAll lays them out.
Group allToAll(int nranks, size_t bytes) {
  Group g;
  for (int s = 0; s < nranks; ++s)
    for (int d = 0; d < nranks; ++d)
      g.transfers.push_back(Transfer{s, d, bytes, bytes * d, bytes * s});
  return g;
}

class AllToAllOnHost : public ::testing::TestWithParam<std::tuple<int, Proto>> {};

// Sizes below a line, across LL and Simple slots, and past the whole FIFO; every rank count
// up to 6 (two launches per group from 5 ranks on).
TEST_P(AllToAllOnHost, EverySizeMatches) {
  const int nranks = std::get<0>(GetParam());
  ProtoMask protos;
  protos.bits = 1u << static_cast<int>(std::get<1>(GetParam()));
  std::vector<Group> groups;
  for (size_t bytes : {size_t{1}, size_t{24}, size_t{1000}, size_t{4096 * 5 + 3}})
    groups.push_back(allToAll(nranks, bytes));
  runGroups(nranks, groups, 1, EmuGeometry(), protos);
}

INSTANTIATE_TEST_SUITE_P(RanksAndProtocols, AllToAllOnHost,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 6),
                                            ::testing::Values(Proto::kLl, Proto::kSimple)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Proto>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  (std::get<1>(info.param) == Proto::kLl ? "LL" : "Simple");
                         });

TEST(P2pOnHost, GatherAndScatterPatterns) {
  const int n = 4, root = 2;
  const size_t bytes = 3000;
  Group gather, scatter;
  for (int r = 0; r < n; ++r) {
    gather.transfers.push_back(Transfer{r, root, bytes, 0, bytes * r});
    scatter.transfers.push_back(Transfer{root, r, bytes, bytes * r, 0});
  }
  runGroups(n, {gather, scatter, gather}, 2);
}

// Transfers larger than the FIFO in both directions of a pair at once: in one block after
// another they would wait on each other.
TEST(P2pOnHost, ExchangeLargerThanTheFifoBothWays) {
  EmuGeometry g;  // Simple FIFO: 4 slots of 4096 bytes
  Group x;
  x.transfers.push_back(Transfer{0, 1, 100000, 0, 0});
  x.transfers.push_back(Transfer{1, 0, 100000, 0, 0});
  runGroups(2, {x}, 2, g);
  // A ring shift of every rank at once, on unaligned buffers.
  Group ring;
  for (int r = 0; r < 4; ++r) ring.transfers.push_back(Transfer{r, (r + 1) % 4, 50001, 3, 5});
  runGroups(4, {ring, ring}, 3, g);
}

// Links through proxies and host FIFOs (as between ranks without peer-to-peer access): an
// all-to-all of every size, both directions of a pair past the FIFO at once, a ring shift.
TEST(P2pOnHost, ProxiedLinksCarryTransfers) {
  EmuGeometry g;
  g.proxied = true;
  std::vector<Group> groups;
  for (size_t bytes : {size_t{1}, size_t{1000}, size_t{4096 * 5 + 3}})
    groups.push_back(allToAll(3, bytes));
  runGroups(3, groups, 2, g);
  Group x;
  x.transfers.push_back(Transfer{0, 1, 100000, 0, 0});
  x.transfers.push_back(Transfer{1, 0, 100000, 0, 0});
  Group ring;
  for (int r = 0; r < 4; ++r) ring.transfers.push_back(Transfer{r, (r + 1) % 4, 50001, 3, 5});
  runGroups(2, {x, x}, 1, g);
  runGroups(4, {ring}, 2, g);
}

// The same through host communicators' own transports (Communicator::connectDeviceHost, as a
// device communicator connects pairs without a P2P path): shared memory, then TCP.
TEST(P2pOnHost, CommunicatorTransportsCarryTransfers) {
  for (bool tcp : {false, true}) {
    SCOPED_TRACE(tcp ? "TCP" : "shared memory");
    EmuGeometry g;
    g.proxied = true;
    CommHostLinks links(3, tcp, /*ringChannels=*/0, /*p2p=*/true);
    ASSERT_EQ(links.error(), "");
    g.hostLinks = [&links](int sender, int receiver, int channel, int proto, SendConnector** send,
                           RecvConnector** recv) {
      return channel < 0 && links.link(sender, receiver, channel, proto, send, recv);
    };
    std::vector<Group> groups;
    for (size_t bytes : {size_t{1}, size_t{1000}, size_t{4096 * 5 + 3}, size_t{100000}})
      groups.push_back(allToAll(3, bytes));
    runGroups(3, groups, 2, g);
    // Both protocols of every part of every ordered pair went through the communicators'
    // connectors.
    EXPECT_EQ(links.supplied(), 3 * 2 * kNumProtos * kP2pParts);
  }
}

// Several transfers between the same two ranks in one group arrive in call order.
TEST(P2pOnHost, TransfersToOnePeerKeepTheirOrder) {
  Group grp;
  size_t off = 0;
  for (size_t bytes : {size_t{10}, size_t{70000}, size_t{1}, size_t{5000}}) {
    grp.transfers.push_back(Transfer{0, 1, bytes, off, off});
    grp.transfers.push_back(Transfer{1, 0, bytes, off, off});
    off += bytes;
  }
  runGroups(2, {grp}, 2);
}

// Random groups of matched transfers (any pairs, repeats, self copies), one after another, so
// that the FIFO steps of every link carry over from group to group.
TEST(P2pOnHost, RandomGroupsOneAfterAnother) {
  std::mt19937 rng(1234);
  for (int nranks : {3, 5}) {
    std::vector<Group> groups;
    for (int gi = 0; gi < 6; ++gi) {
      Group grp;
      std::vector<size_t> sendUsed(nranks, 0), recvUsed(nranks, 0);
      const int transfers = 1 + static_cast<int>(rng() % 12);
      for (int t = 0; t < transfers; ++t) {
        const int s = static_cast<int>(rng() % nranks), d = static_cast<int>(rng() % nranks);
        const size_t sizes[] = {1, 7, 64, 333, 4096, 9000, 40000};
        const size_t bytes = sizes[rng() % 7];
        grp.transfers.push_back(Transfer{s, d, bytes, sendUsed[s] + 1, recvUsed[d] + 1});
        sendUsed[s] += bytes + 1;
        recvUsed[d] += bytes + 1;
      }
      groups.push_back(grp);
    }
    runGroups(nranks, groups, 2);
  }
}

// A send whose receiver never launches waits until the communicator is aborted, then stops
// and flags the error.
TEST(P2pOnHost, AbortStopsASendNoOneReceives) {
  for (Proto p : {Proto::kLl, Proto::kSimple}) {
    EmuClique clique(2, EmuGeometry());
    std::vector<char> data(200000, 1);
    DeviceShape shape = shapeOf(2);
    shape.protos.bits = 1u << static_cast<int>(p);
    DeviceP2p op = sendTo(1, data.data(), data.size());
    std::vector<Launch> launches;
    ASSERT_TRUE(encodeP2pLaunches(shape, clique.comm(0), 0, &op, 1, &launches).isOk());
    ASSERT_EQ(launches.size(), 1u);
    std::thread stopper([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      clique.abort();
    });
    ASSERT_TRUE(emuRunLaunch(launches[0], 2));
    stopper.join();
    EXPECT_EQ(clique.comm(0)->errorFlag[0], 1u);
  }
}

// A transfer over a link with no FIFO (the host refuses those before launching) ends at once
// with the error flag raised, in either direction, rather than spin.
TEST(P2pOnHost, TransferWithoutALinkStopsAndFlagsTheError) {
  for (bool isSend : {true, false}) {
    EmuClique clique(2, EmuGeometry());
    Comm comm = *clique.comm(0);
    std::vector<Channel> none(static_cast<size_t>(2 * comm.p2pParts));
    comm.peers = none.data();
    uint32_t error = 0;
    comm.errorFlag = &error;
    std::vector<char> data(5000, 1);
    DeviceP2p op =
        isSend ? sendTo(1, data.data(), data.size()) : recvFrom(1, data.data(), data.size());
    std::vector<Launch> launches;
    ASSERT_TRUE(encodeP2pLaunches(shapeOf(2), &comm, 0, &op, 1, &launches).isOk());
    ASSERT_EQ(launches.size(), 1u);
    ASSERT_TRUE(emuRunLaunch(launches[0], 2));
    EXPECT_EQ(error, 1u) << (isSend ? "send" : "recv");
  }
}

}  // namespace
}  // namespace dev
}  // namespace chorus

namespace chorus {
namespace {

// A host FIFO of 4 slots of 64 bytes, with both connectors.
struct HostLink {
  FifoHeader* header;
  char* data;
  FifoMemory memory = allocLocalFifo(FifoGeometry{4, 64}, nullptr, &header, &data);
  SendConnector send{memory.get()};
  RecvConnector recv{memory.get()};
};

// A kernel's end of a FIFO of 4 slots, as the proxy sees it.
struct KernelFifo {
  alignas(16) char slots[4 * 128] = {};
  uint64_t tail = 0, head = 0, step = 0;
  uint32_t sizes[4] = {};
  dev::Fifo view(uint32_t slotBytes, bool withSizes) {
    dev::Fifo f;
    f.slots = slots;
    f.tail = &tail;
    f.head = &head;
    f.step = &step;
    f.nslots = 4;
    f.slotBytes = slotBytes;
    if (withSizes) f.sizes = sizes;
    return f;
  }
};

// A proxy refuses links it cannot serve and reports, once, what goes wrong while it runs.
TEST(DeviceProxy, RefusesAndReportsBadLinks) {
  KernelFifo k;
  char* slots = k.slots;
  uint64_t& tail = k.tail;
  uint32_t* sizes = k.sizes;
  dev::Fifo f = k.view(128, false);
  {
    HostLink h;
    DeviceProxy proxy;
    Status s = proxy.addSend(f, &h.send, "ring channel 0 to rank 1, Simple");
    EXPECT_FALSE(s.isOk());  // no sizes
    f.sizes = sizes;
    s = proxy.addSend(f, &h.send, "ring channel 0 to rank 1, Simple");
    ASSERT_FALSE(s.isOk());
    EXPECT_NE(s.message().find("128 bytes do not fit the host FIFO's 64"), std::string::npos)
        << s.message();
  }
  {
    // The peer sends more than a device slot holds.
    HostLink h;
    int failures = 0;
    DeviceProxy proxy([&](const Status&) { ++failures; });
    f.slotBytes = 32;
    ASSERT_TRUE(proxy.addRecv(&h.recv, f, dev::Proto::kSimple, "ring 1 -> 0, Simple").isOk());
    ASSERT_NE(h.send.tryAcquire(), nullptr);
    h.send.post(48);
    EXPECT_FALSE(proxy.progress());
    EXPECT_FALSE(proxy.progress());
    EXPECT_EQ(failures, 1);
    EXPECT_NE(proxy.error().message().find("slot of 48 bytes into a FIFO of 32-byte slots"),
              std::string::npos)
        << proxy.error().message();
    EXPECT_EQ(tail, 0u);  // nothing delivered
  }
  {
    // Slots arrive, then the peer closes: the slots are delivered first, then the error raised.
    HostLink h;
    DeviceProxy proxy;
    f.slotBytes = 64;
    ASSERT_TRUE(proxy.addRecv(&h.recv, f, dev::Proto::kSimple, "link 2 -> 0, Simple").isOk());
    char* dst = static_cast<char*>(h.send.tryAcquire());
    ASSERT_NE(dst, nullptr);
    memset(dst, 7, 20);
    h.send.post(20);
    h.header->peerClosed.store(1);
    EXPECT_TRUE(proxy.progress());
    EXPECT_EQ(tail, 1u);
    EXPECT_EQ(slots[19], 7);
    EXPECT_FALSE(proxy.progress());
    EXPECT_EQ(proxy.error().code(), Code::kRemoteError);
    EXPECT_NE(proxy.error().message().find("link 2 -> 0, Simple: the peer closed"),
              std::string::npos)
        << proxy.error().message();
  }
}

// A peer that closes its connection while no kernel waits on the link (it finished first) is
// no failure: the link is marked closed for the owner to refuse new work over it.
TEST(DeviceProxy, PeerClosingWhileIdleMarksTheLinkClosed) {
  KernelFifo k;
  const dev::Fifo f = k.view(64, false);
  for (bool busy : {false, true}) {
    HostLink h;
    int failures = 0;
    DeviceProxy proxy([&](const Status&) { ++failures; }, [busy] { return busy; });
    ASSERT_TRUE(proxy.addRecv(&h.recv, f, dev::Proto::kSimple, "link 1 -> 0, LL").isOk());
    h.header->peerClosed.store(1);
    EXPECT_FALSE(proxy.progress());
    EXPECT_FALSE(proxy.progress());
    if (busy) {
      EXPECT_EQ(failures, 1);
      EXPECT_EQ(proxy.error().code(), Code::kRemoteError);
      EXPECT_EQ(proxy.closedLink(), "");
    } else {
      EXPECT_EQ(failures, 0);
      EXPECT_TRUE(proxy.error().isOk()) << proxy.error().message();
      EXPECT_NE(proxy.closedLink().find("link 1 -> 0, LL: the peer closed"), std::string::npos)
          << proxy.closedLink();
    }
  }
}

// Stopping forwards what a kernel published before its end: a kernel does not wait for its last
// slots to leave its own FIFO.
TEST(DeviceProxy, StopForwardsWhatKernelsPublished) {
  KernelFifo k;
  char* slots = k.slots;
  uint64_t &tail = k.tail, &head = k.head;
  uint32_t* sizes = k.sizes;
  const dev::Fifo f = k.view(64, true);
  HostLink h;
  DeviceProxy proxy;
  ASSERT_TRUE(proxy.addSend(f, &h.send, "ring channel 0 to rank 1, Simple").isOk());
  // Three slots published, as a kernel leaves them at its end; the proxy was never started.
  for (int k = 0; k < 3; ++k) {
    memset(slots + 64 * k, 10 + k, 64);
    sizes[k] = 64 - k;
  }
  tail = 3;
  EXPECT_TRUE(proxy.sendsPending());
  proxy.stop(std::chrono::milliseconds(2000));
  EXPECT_FALSE(proxy.sendsPending());
  EXPECT_EQ(head, 3u);
  for (int k = 0; k < 3; ++k) {
    size_t bytes = 0;
    const void* got = h.recv.tryWait(&bytes);
    ASSERT_NE(got, nullptr) << k;
    EXPECT_EQ(bytes, static_cast<size_t>(64 - k));
    EXPECT_EQ(static_cast<const char*>(got)[0], 10 + k);
    h.recv.release();
  }
  // Without time to drain, nothing moves (an aborted communicator's stop).
  tail = 4;
  sizes[3] = 8;
  proxy.stop(std::chrono::milliseconds(2000), [] { return true; });
  EXPECT_EQ(head, 3u);
}

}  // namespace
}  // namespace chorus
