// Planning device launches: the protocol list of CHORUS_PROTO/NCCL_PROTO, the cost model's
// choices, the encoding of calls into work descriptors and the packing of a group into
// launches; then planned launches queued on fake streams (one worker thread per rank, like a
// CUDA stream: the enqueue returns at once, completion is seen at synchronize) and run by the
// CPU twin of the kernel, results checked against the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/double_binary_tree.h"
#include "algorithms/rd_allreduce.h"
#include "cuda/dev_emulator.h"
#include "cuda/dev_plan.h"
#include "multirank/reference.h"

namespace chorus {
namespace dev {
namespace {

// Sends that overlap a receive of their group get a place in the copy; the others none.
TEST(SendCopies, OnlySendsOverlappingAReceiveAreCopied) {
  static char buf[4096];
  auto send = [](const char* p, size_t bytes) {
    DeviceP2p op;
    op.isSend = true;
    op.sendbuff = p;
    op.bytes = bytes;
    return op;
  };
  auto recv = [](char* p, size_t bytes) {
    DeviceP2p op;
    op.recvbuff = p;
    op.bytes = bytes;
    return op;
  };
  // An in-place all-to-all of 3 blocks of 100 bytes: every send overlaps.
  std::vector<DeviceP2p> inPlace;
  for (int b = 0; b < 3; ++b) {
    inPlace.push_back(send(buf + 100 * b, 100));
    inPlace.push_back(recv(buf + 100 * b, 100));
  }
  std::vector<size_t> at;
  EXPECT_EQ(planSendCopies(inPlace.data(), inPlace.size(), &at), 3u * 256);
  EXPECT_EQ(at, (std::vector<size_t>{0, SIZE_MAX, 256, SIZE_MAX, 512, SIZE_MAX}));
  // Disjoint buffers, touching ends, and a send inside a larger receive of another size.
  std::vector<DeviceP2p> mixed = {send(buf, 100),       recv(buf + 100, 100), send(buf + 1000, 10),
                                  recv(buf + 900, 300), send(buf + 2000, 0),  recv(buf + 2000, 8)};
  EXPECT_EQ(planSendCopies(mixed.data(), mixed.size(), &at), 256u);
  EXPECT_EQ(at, (std::vector<size_t>{SIZE_MAX, SIZE_MAX, 0, SIZE_MAX, SIZE_MAX, SIZE_MAX}));
}

TEST(ProtoList, NamesAndExclusions) {
  Result<ProtoMask> m = parseProtoList("LL", "NCCL_PROTO=LL");
  ASSERT_TRUE(m.isOk());
  EXPECT_TRUE(m.value().allows(Proto::kLl));
  EXPECT_FALSE(m.value().allows(Proto::kSimple));
  m = parseProtoList(" simple , ll128", "x");
  ASSERT_TRUE(m.isOk());
  EXPECT_TRUE(m.value().allows(Proto::kSimple));
  EXPECT_FALSE(m.value().allows(Proto::kLl));
  m = parseProtoList("^LL", "x");
  ASSERT_TRUE(m.isOk());
  EXPECT_FALSE(m.value().allows(Proto::kLl));
  EXPECT_TRUE(m.value().allows(Proto::kSimple));
  m = parseProtoList("", "x");
  ASSERT_TRUE(m.isOk());
  EXPECT_FALSE(m.value().isSet);
}

TEST(ProtoList, BadListsAreNamed) {
  Result<ProtoMask> m = parseProtoList("LL,fast", "NCCL_PROTO=LL,fast");
  ASSERT_FALSE(m.isOk());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("NCCL_PROTO=LL,fast"), std::string::npos);
  EXPECT_NE(m.status().message().find("fast"), std::string::npos);
  m = parseProtoList("LL128", "NCCL_PROTO=LL128");
  ASSERT_FALSE(m.isOk());
  EXPECT_NE(m.status().message().find("LL128 is not implemented"), std::string::npos);
  EXPECT_FALSE(parseProtoList("^LL,Simple", "x").isOk());
}

DeviceShape shapeOf(int nranks, int nchannels, const int32_t* ring) {
  DeviceShape s;
  s.nranks = nranks;
  s.nchannels = nchannels;
  s.ringRanks = ring;
  return s;
}

TEST(DeviceChoice, SmallCallsTakeLlLargeOnesSimpleOnMoreChannels) {
  const int32_t ring[4] = {0, 1, 2, 3};
  DeviceShape s = shapeOf(4, 8, ring);
  DeviceChoice small = chooseDevice(s, Collective::kAllReduce, 8);
  EXPECT_EQ(small.proto, Proto::kLl);
  EXPECT_EQ(small.nchannels, 1);
  DeviceChoice large = chooseDevice(s, Collective::kAllReduce, 256u << 20);
  EXPECT_EQ(large.proto, Proto::kSimple);
  EXPECT_EQ(large.nchannels, 8);
  // The choice is the model's minimum over what is allowed.
  for (size_t bytes : {size_t{8}, size_t{1} << 16, size_t{1} << 20, size_t{1} << 26}) {
    DeviceChoice c = chooseDevice(s, Collective::kAllReduce, bytes);
    for (int p = 0; p < kNumProtos; ++p)
      for (int ch = 1; ch <= 8; ++ch)
        EXPECT_LE(c.us, predictDeviceUs(4, Collective::kAllReduce, Algo::kRing,
                                        static_cast<Proto>(p), ch, bytes) +
                            1e-9);
  }
}

// With direct regions, all-reduce weighs one-shot and two-shot against the ring: one exchange
// instead of 2 (n - 1) ring steps for small calls; large calls stay on the ring (one-shot reads
// every rank's whole input, and the direct buffers cut a call into many sequences).
TEST(DeviceChoice, DirectAllReduceForSmallCallsWhenRegionsExist) {
  const int32_t ring[4] = {0, 1, 2, 3};
  DeviceShape s = shapeOf(4, 8, ring);
  s.directBytes = 65536;
  DeviceChoice small = chooseDevice(s, Collective::kAllReduce, 8);
  EXPECT_EQ(small.algo, Algo::kOneShot);
  EXPECT_EQ(small.proto, Proto::kLl);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 256u << 20).algo, Algo::kRing);
  // Only all-reduce has a direct algorithm.
  EXPECT_EQ(chooseDevice(s, Collective::kReduceScatter, 8).algo, Algo::kRing);
  EXPECT_EQ(chooseDevice(s, Collective::kBroadcast, 8).algo, Algo::kRing);
  for (size_t bytes : {size_t{8}, size_t{1} << 14, size_t{1} << 20, size_t{1} << 26}) {
    DeviceChoice c = chooseDevice(s, Collective::kAllReduce, bytes);
    for (int a = 0; a < kNumAlgos; ++a)
      for (int p = 0; p < kNumProtos; ++p)
        for (int ch = 1; ch <= 8; ++ch) {
          if (a == static_cast<int>(Algo::kTwoShot) && p == static_cast<int>(Proto::kLl)) continue;
          // No tree or partner links in this shape.
          if (a == static_cast<int>(Algo::kTree) || a == static_cast<int>(Algo::kRd)) continue;
          EXPECT_LE(c.us, predictDeviceUs(4, Collective::kAllReduce, static_cast<Algo>(a),
                                          static_cast<Proto>(p), ch, bytes, s.directBytes) +
                              1e-9)
              << bytes << " bytes";
        }
  }
  // No regions (a pair without P2P, more than 8 ranks, CHORUS_DEVICE_DIRECT_BUFFSIZE=0): ring.
  s.directBytes = 0;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRing);
}

// With tree links, all-reduce weighs the tree (2 log2 n steps, on at most the tree channels)
// against the ring (2 (n - 1) steps): the tree for small calls on many ranks, the ring for
// large ones and for 2 ranks, whose tree is no shorter than the ring.
TEST(DeviceChoice, TreeAllReduceForSmallCallsOnManyRanks) {
  std::vector<int32_t> ring(16);
  for (int i = 0; i < 16; ++i) ring[static_cast<size_t>(i)] = i;
  DeviceShape s = shapeOf(16, 8, ring.data());
  s.treeChannels = 2;
  const DeviceChoice small = chooseDevice(s, Collective::kAllReduce, 8);
  EXPECT_EQ(small.algo, Algo::kTree);
  EXPECT_EQ(small.proto, Proto::kLl);
  EXPECT_LE(small.nchannels, 2);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 256u << 20).algo, Algo::kRing);
  EXPECT_EQ(chooseDevice(s, Collective::kAllGather, 8).algo, Algo::kRing);
  for (size_t bytes : {size_t{8}, size_t{1} << 14, size_t{1} << 20, size_t{1} << 26}) {
    const DeviceChoice c = chooseDevice(s, Collective::kAllReduce, bytes);
    EXPECT_TRUE(c.algo == Algo::kTree || c.algo == Algo::kRing) << "no direct regions";
    if (c.algo == Algo::kTree) {
      EXPECT_LE(c.nchannels, s.treeChannels);
    }
    for (int p = 0; p < kNumProtos; ++p) {
      for (int ch = 1; ch <= 8; ++ch)
        EXPECT_LE(c.us, predictDeviceUs(16, Collective::kAllReduce, Algo::kRing,
                                        static_cast<Proto>(p), ch, bytes) +
                            1e-9);
      for (int ch = 1; ch <= s.treeChannels; ++ch)
        EXPECT_LE(c.us, predictDeviceUs(16, Collective::kAllReduce, Algo::kTree,
                                        static_cast<Proto>(p), ch, bytes) +
                            1e-9);
    }
  }
  // NCCL_ALGO=tree runs the tree at every size, on the tree channels only.
  s.algos = parseAlgorithmList("tree", "NCCL_ALGO=tree").value();
  const DeviceChoice forced = chooseDevice(s, Collective::kAllReduce, 256u << 20);
  EXPECT_EQ(forced.algo, Algo::kTree);
  EXPECT_LE(forced.nchannels, 2);
  s.minChannels = 4;  // more than the tree has: the tree's channels still
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).nchannels, 2);
  // Two ranks: the tree is one edge up and down, as long as the ring.
  const int32_t two[2] = {0, 1};
  DeviceShape pair = shapeOf(2, 8, two);
  pair.treeChannels = 2;
  for (size_t bytes : {size_t{8}, size_t{1} << 20})
    EXPECT_EQ(chooseDevice(pair, Collective::kAllReduce, bytes).algo, Algo::kRing);
}

// The tree nodes the kernels get are the host's double binary trees, and tree neighbours are
// exactly the pairs linked in either tree.
TEST(DeviceTrees, NodesAndNeighboursFollowTheDoubleBinaryTree) {
  for (int n : {2, 3, 5, 8, 13}) {
    int edges = 0;
    for (int r = 0; r < n; ++r)
      for (int t = 0; t < kDevTrees; ++t) {
        const DevTreeNode d = devTreeNode(n, r, t);
        const TreeNode h = treeNode(n, r, t);
        EXPECT_EQ(d.parent, h.parent);
        EXPECT_EQ(d.nchildren, h.nchildren);
        EXPECT_EQ(d.depth, h.depth);
        for (int c = 0; c < h.nchildren; ++c) EXPECT_EQ(d.children[c], h.children[c]);
        if (d.parent >= 0) {
          EXPECT_TRUE(treeNeighbours(n, r, d.parent));
          EXPECT_TRUE(treeNeighbours(n, d.parent, r));
          ++edges;
        }
      }
    EXPECT_EQ(edges, 2 * (n - 1)) << n << " ranks: each tree has n - 1 edges";
    int pairs = 0;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) pairs += treeNeighbours(n, a, b) ? 1 : 0;
    EXPECT_LE(pairs, 2 * edges);
    EXPECT_FALSE(treeNeighbours(n, 0, 0));
  }
}

// With tree and partner links as well, each all-reduce algorithm wins its range on 16 ranks:
// recursive doubling (log2 n exchanges of the whole buffer) the smallest calls, the tree (more
// steps, half the data per step) the middle, the ring (every channel) the largest.
TEST(DeviceChoice, RdTreeAndRingEachWinARange) {
  std::vector<int32_t> ring(16);
  for (int i = 0; i < 16; ++i) ring[static_cast<size_t>(i)] = i;
  DeviceShape s = shapeOf(16, 8, ring.data());
  s.treeChannels = 2;
  s.rdChannels = 2;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRd);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 1u << 20).algo, Algo::kTree);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 256u << 20).algo, Algo::kRing);
  for (size_t bytes : {size_t{8}, size_t{1} << 12, size_t{1} << 16, size_t{1} << 20}) {
    const DeviceChoice c = chooseDevice(s, Collective::kAllReduce, bytes);
    if (c.algo == Algo::kRd) {
      EXPECT_LE(c.nchannels, s.rdChannels);
    }
    for (int a : {static_cast<int>(Algo::kRing), static_cast<int>(Algo::kTree),
                  static_cast<int>(Algo::kRd)})
      for (int p = 0; p < kNumProtos; ++p)
        for (int ch = 1; ch <= (a == static_cast<int>(Algo::kRing) ? 8 : 2); ++ch)
          EXPECT_LE(c.us, predictDeviceUs(16, Collective::kAllReduce, static_cast<Algo>(a),
                                          static_cast<Proto>(p), ch, bytes) +
                              1e-9)
              << bytes << " bytes";
  }
  // Ranks past the largest power of two cost two exchanges more.
  EXPECT_GT(predictDeviceUs(12, Collective::kAllReduce, Algo::kRd, Proto::kLl, 1, 8),
            predictDeviceUs(8, Collective::kAllReduce, Algo::kRd, Proto::kLl, 1, 8));
  s.algos = parseAlgorithmList("rd", "CHORUS_ALGO=rd").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 256u << 20).algo, Algo::kRd);
  s.rdChannels = 0;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRing) << "no partner links";
}

// The partners recursive doubling exchanges with are exactly the pairs rdPartners names:
// algorithms/rd_allreduce.h run with primitives that only record whom each rank talks to.
struct PeerRecorder {
  std::vector<int> peers;
  bool init() { return true; }
  bool send(int peer, size_t, size_t) { return note(peer); }
  bool recvReduce(int peer, size_t, size_t, bool, bool) { return note(peer); }
  bool recvCopy(int peer, size_t, size_t) { return note(peer); }
  bool note(int peer) {
    peers.push_back(peer);
    return true;
  }
};

TEST(DeviceTrees, RdPartnersAreTheRanksRecursiveDoublingExchangesWith) {
  for (int n : {2, 3, 4, 6, 8, 13, 16}) {
    for (int r = 0; r < n; ++r) {
      PeerRecorder rec;
      ASSERT_TRUE(rdAllReduce(rec, RdAllReduceShape{10, 4, n, r}));
      for (int q = 0; q < n; ++q) {
        const bool talks = std::find(rec.peers.begin(), rec.peers.end(), q) != rec.peers.end();
        EXPECT_EQ(rdPartners(n, r, q), talks) << n << " ranks, " << r << " and " << q;
        EXPECT_EQ(rdPartners(n, r, q), rdPartners(n, q, r));
      }
      // rdPartner lists them in the order of the exchanges.
      std::vector<int> order, listed;
      for (int p : rec.peers)
        if (std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);
      for (int i = 0; rdPartner(n, r, i) >= 0; ++i) listed.push_back(rdPartner(n, r, i));
      EXPECT_EQ(order, listed) << n << " ranks, rank " << r;
    }
  }
}

TEST(DeviceChoice, AlgorithmOverrideOnTheDevice) {
  const int32_t ring[2] = {0, 1};
  DeviceShape s = shapeOf(2, 4, ring);
  s.directBytes = 65536;
  s.algos = parseAlgorithmList("ring", "CHORUS_ALGO=ring").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRing);
  s.algos = parseAlgorithmList("twoshot", "CHORUS_ALGO=twoshot").value();
  DeviceChoice two = chooseDevice(s, Collective::kAllReduce, 8);
  EXPECT_EQ(two.algo, Algo::kTwoShot);
  EXPECT_EQ(two.proto, Proto::kSimple) << "two-shot runs with Simple only";
  s.protos = parseProtoList("LL", "NCCL_PROTO=LL").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kTwoShot)
      << "the algorithm asked for runs, with its own protocol";
  s.protos = ProtoMask();
  s.algos = parseAlgorithmList("oneshot", "CHORUS_ALGO=oneshot").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 1u << 28).algo, Algo::kOneShot);
  // Nothing allowed applies (the tree without tree links; direct without regions): the ring.
  s.algos = parseAlgorithmList("tree", "NCCL_ALGO=tree").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRing);
  s.algos = parseAlgorithmList("direct", "CHORUS_ALGO=direct").value();
  s.directBytes = 0;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).algo, Algo::kRing);
  EXPECT_EQ(chooseDevice(s, Collective::kAllGather, 8).algo, Algo::kRing);
}

TEST(DeviceChoice, OneRankCopiesLargeBuffersOnEveryChannel) {
  const int32_t ring[1] = {0};
  DeviceShape s = shapeOf(1, 8, ring);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).nchannels, 1);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 256u << 20).nchannels, 8);
}

TEST(DeviceChoice, OverridesAndChannelBounds) {
  const int32_t ring[2] = {0, 1};
  DeviceShape s = shapeOf(2, 8, ring);
  s.protos = parseProtoList("Simple", "x").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).proto, Proto::kSimple);
  s.protos = parseProtoList("LL", "x").value();
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 1u << 28).proto, Proto::kLl);
  s.protos = ProtoMask();
  s.minChannels = 3;
  s.maxChannels = 5;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 8).nchannels, 3);
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 1u << 28).nchannels, 5);
  s.maxChannels = 16;  // never past the channels connected
  s.minChannels = 1;
  EXPECT_EQ(chooseDevice(s, Collective::kAllReduce, 1u << 28).nchannels, 8);
}

DeviceCall call(Collective coll, DataType type, RedKind kind, size_t count) {
  DeviceCall c;
  c.coll = coll;
  c.type = type;
  c.op.kind = kind;
  c.count = count;
  static char a[1], b[1];
  c.sendbuff = a;
  c.recvbuff = b;
  return c;
}

TEST(EncodeLaunches, WorksCarryTheCall) {
  const int32_t ring[3] = {2, 0, 1};
  DeviceShape s = shapeOf(3, 4, ring);
  const Comm* comm = reinterpret_cast<const Comm*>(0x1000);
  std::vector<DeviceCall> calls;
  calls.push_back(call(Collective::kReduce, DataType::kFloat16, RedKind::kPreMulSum, 100));
  calls[0].root = 1;
  calls[0].op.scalar[0] = 0x00;
  calls[0].op.scalar[1] = 0x40;  // 2.0 in binary16
  std::vector<Launch> launches;
  ASSERT_TRUE(encodeLaunches(s, comm, calls.data(), calls.size(), &launches).isOk());
  ASSERT_EQ(launches.size(), 1u);
  const Work& w = launches[0].works[0];
  EXPECT_EQ(launches[0].comm, comm);
  EXPECT_EQ(w.coll, Coll::kReduce);
  EXPECT_EQ(w.count, 100u);
  EXPECT_EQ(w.sendbuff, calls[0].sendbuff);
  EXPECT_EQ(w.recvbuff, calls[0].recvbuff);
  EXPECT_EQ(w.type, static_cast<uint8_t>(DataType::kFloat16));
  EXPECT_EQ(w.redKind, static_cast<uint8_t>(RedKind::kPreMulSum));
  EXPECT_EQ(w.rootIndex, 2) << "rank 1 is at ring position 2";
  EXPECT_EQ(w.scalarBits, 0x4000u);
  EXPECT_EQ(w.scalarPtr, nullptr);
  DeviceChoice c = chooseDevice(s, Collective::kReduce, 200);
  EXPECT_EQ(w.proto, c.proto);
  EXPECT_EQ(w.nchannels, c.nchannels);

  // A device scalar travels as its address; copies take the Sum kernel of their type.
  static const float scalarOnDevice = 3.0f;
  calls.clear();
  calls.push_back(call(Collective::kAllReduce, DataType::kFloat32, RedKind::kPreMulSum, 5));
  calls[0].scalarDevice = &scalarOnDevice;
  calls.push_back(call(Collective::kAllGather, DataType::kInt8, RedKind::kMax, 5));
  launches.clear();
  ASSERT_TRUE(encodeLaunches(s, comm, calls.data(), calls.size(), &launches).isOk());
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].works[0].scalarPtr, &scalarOnDevice);
  EXPECT_EQ(launches[1].works[0].redKind, static_cast<uint8_t>(RedKind::kSum));
}

TEST(EncodeLaunches, GroupsPackIntoLaunchesPerKernel) {
  const int32_t ring[2] = {0, 1};
  DeviceShape s = shapeOf(2, 2, ring);
  std::vector<DeviceCall> calls;
  for (int i = 0; i < kMaxLaunchWorks + 3; ++i)
    calls.push_back(call(Collective::kAllReduce, DataType::kFloat32, RedKind::kSum, 10));
  calls.push_back(call(Collective::kAllGather, DataType::kFloat32, RedKind::kProd, 10));
  calls.push_back(call(Collective::kBroadcast, DataType::kFloat32, RedKind::kSum, 0));
  calls.push_back(call(Collective::kAllReduce, DataType::kFloat32, RedKind::kMax, 10));
  calls.push_back(call(Collective::kAllReduce, DataType::kBfloat16, RedKind::kMax, 10));
  std::vector<Launch> launches;
  ASSERT_TRUE(encodeLaunches(s, nullptr, calls.data(), calls.size(), &launches).isOk());
  // A full launch of sums, then 3 sums with the all-gather (Sum kernel); the empty broadcast is
  // dropped; the two Max calls differ in type.
  ASSERT_EQ(launches.size(), 4u);
  EXPECT_EQ(launches[0].nworks, kMaxLaunchWorks);
  EXPECT_EQ(launches[1].nworks, 4);
  EXPECT_EQ(launches[1].works[3].coll, Coll::kAllGather);
  EXPECT_EQ(launches[2].nworks, 1);
  EXPECT_EQ(launches[3].works[0].type, static_cast<uint8_t>(DataType::kBfloat16));
}

TEST(EncodeLaunches, RefusesWhatNoKernelRuns) {
  const int32_t ring[2] = {0, 1};
  DeviceShape s = shapeOf(2, 2, ring);
  DeviceCall c = call(Collective::kAllReduce, DataType::kNumTypes, RedKind::kSum, 4);
  std::vector<Launch> launches;
  EXPECT_EQ(encodeLaunches(s, nullptr, &c, 1, &launches).code(), Code::kInvalidArgument);
  c = call(Collective::kCount, DataType::kFloat32, RedKind::kSum, 4);
  EXPECT_EQ(encodeLaunches(s, nullptr, &c, 1, &launches).code(), Code::kInvalidArgument);
}

// A stand-in for a CUDA stream: work queued returns at once and runs in order on the stream's
// own thread; synchronize waits for everything queued before it.
class FakeStream {
 public:
  FakeStream() : worker_([this] { loop(); }) {}
  ~FakeStream() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void enqueue(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(fn));
    ++queued_;
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return done_ == queued_; });
  }
  size_t queued() {
    std::lock_guard<std::mutex> l(mu_);
    return queued_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      l.unlock();
      fn();
      l.lock();
      ++done_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  size_t queued_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread worker_;
};

// A group of calls of several types, planned and queued per rank on its own stream; every
// result against the reference after the streams are synchronized.
TEST(PlannedLaunches, GroupOnFakeStreamsMatchesReference) {
  namespace ref = chorus_test::ref;
  const int nranks = 3;
  EmuGeometry g;
  g.nchannels = 4;
  EmuClique clique(nranks, g);
  DeviceShape s = shapeOf(nranks, g.nchannels, clique.ringRanks());
  const ncclDataType_t types[] = {ncclFloat32, ncclFloat32, ncclBfloat16, ncclInt64};
  const ref::Op ops[] = {ref::kSum, ref::kAvg, ref::kMax, ref::kProd};
  const size_t counts[] = {3, 70000, 5000, 129};
  std::vector<std::vector<std::vector<unsigned char>>> in(nranks), out(nranks);
  std::vector<std::vector<Launch>> launches(nranks);
  for (int r = 0; r < nranks; ++r) {
    std::vector<DeviceCall> calls;
    for (size_t k = 0; k < 4; ++k) {
      const size_t elt = chorus_test::typeSize(types[k]);
      in[r].emplace_back(counts[k] * elt);
      out[r].emplace_back(counts[k] * elt);
      for (size_t i = 0; i < counts[k]; ++i)
        chorus_test::storeExact(in[r][k].data(), i, types[k],
                                ref::inputValue(r, i, types[k], ops[k]));
      DeviceCall c;
      c.coll = Collective::kAllReduce;
      c.type = static_cast<DataType>(types[k]);
      c.op.kind = static_cast<RedKind>(static_cast<int>(ops[k]));
      c.op.nranks = nranks;
      c.count = counts[k];
      c.sendbuff = in[r][k].data();
      c.recvbuff = out[r][k].data();
      calls.push_back(c);
    }
    ASSERT_TRUE(encodeLaunches(s, clique.comm(r), calls.data(), calls.size(), &launches[r]).isOk());
    ASSERT_EQ(launches[r].size(), 4u) << "four kernels: the types and ops all differ";
  }
  {
    std::vector<std::unique_ptr<FakeStream>> streams;
    for (int r = 0; r < nranks; ++r) streams.emplace_back(new FakeStream());
    for (int r = 0; r < nranks; ++r)
      for (const Launch& l : launches[r])
        streams[r]->enqueue([l] { ASSERT_TRUE(emuRunLaunch(l, 2)); });
    for (int r = 0; r < nranks; ++r) {
      EXPECT_EQ(streams[r]->queued(), 4u);
      streams[r]->synchronize();
    }
  }
  for (int r = 0; r < nranks; ++r)
    for (size_t k = 0; k < 4; ++k)
      EXPECT_EQ(ref::countWrong(out[r][k].data(), counts[k], 0, nranks, types[k], ops[k],
                                "rank " + std::to_string(r) + " call " + std::to_string(k)),
                0u);
}

}  // namespace
}  // namespace dev
}  // namespace chorus
