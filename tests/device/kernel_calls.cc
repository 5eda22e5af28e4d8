#include "device/kernel_calls.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <thread>

#include "cuda/dev_memory.h"

namespace chorus {
namespace dev {

using chorus_test::loadValue;
using chorus_test::storeExact;
using chorus_test::typeSize;

namespace {

RedKind kindOf(ref::Op op) {
  return static_cast<RedKind>(static_cast<int>(op));  // same order as RedKind
}

const void* resultOf(const Call&, const Work& w) {
  return w.recvbuff;
}

}  // namespace

// What rank `rank` should hold after the collective, element by element.
double expectedAt(Coll coll, int nranks, int rank, int root, size_t count, size_t i,
                  ncclDataType_t type, ref::Op op) {
  switch (coll) {
    case Coll::kAllReduce:
    case Coll::kReduce:
      return ref::expectedValue(nranks, i, type, op);
    case Coll::kReduceScatter:
      return ref::expectedValue(nranks, static_cast<size_t>(rank) * count + i, type, op);
    case Coll::kAllGather:
      return ref::inputValue(static_cast<int>(i / count), i % count, type, ref::kSum);
    case Coll::kBroadcast:
      return ref::inputValue(root, i, type, ref::kSum);
    default:  // point-to-point: test_device_p2p_on_host.cc
      break;
  }
  return 0;
}

size_t sendElems(const Call& c, int nranks) {
  return c.coll == Coll::kReduceScatter ? c.count * static_cast<size_t>(nranks) : c.count;
}
size_t recvElems(const Call& c, int nranks) {
  return c.coll == Coll::kAllGather ? c.count * static_cast<size_t>(nranks) : c.count;
}

// Fills rank's buffers and describes the call as a work.
Work prepare(const Call& c, int nranks, int rank, Buffers* b, unsigned char* scalar) {
  const size_t elt = typeSize(c.type);
  b->send.assign(sendElems(c, nranks) * elt + 16, 0);
  b->recv.assign(recvElems(c, nranks) * elt + 16, 0xee);
  const ref::Op fillOp =
      c.coll == Coll::kAllGather || c.coll == Coll::kBroadcast ? ref::kSum : c.op;
  for (size_t i = 0; i < sendElems(c, nranks); ++i)
    storeExact(b->send.data(), i, c.type, ref::inputValue(rank, i, c.type, fillOp));
  Work w;
  w.count = c.count;
  w.sendbuff = b->send.data();
  w.recvbuff = c.inPlace ? static_cast<void*>(b->send.data()) : b->recv.data();
  if (c.inPlace && c.coll == Coll::kAllGather) {
    // In place: the input is this rank's block of the output.
    b->recv.assign(recvElems(c, nranks) * elt + 16, 0xee);
    std::memcpy(b->recv.data() + static_cast<size_t>(rank) * c.count * elt, b->send.data(),
                c.count * elt);
    w.recvbuff = b->recv.data();
    w.sendbuff = b->recv.data() + static_cast<size_t>(rank) * c.count * elt;
  }
  w.coll = c.coll;
  w.proto = c.proto;
  w.algo = c.algo;
  w.type = static_cast<uint8_t>(c.type);
  const bool copyOnly = c.coll == Coll::kAllGather || c.coll == Coll::kBroadcast;
  w.redKind = static_cast<uint8_t>(copyOnly ? RedKind::kSum : kindOf(c.op));
  w.nchannels = static_cast<int16_t>(c.nchannels);
  w.rootIndex = static_cast<int16_t>(c.root);  // ring order 0..n-1: position == rank
  std::memset(scalar, 0, 8);
  storeExact(scalar, 0, c.type, 2.0);
  if (c.deviceScalar) {
    w.scalarPtr = scalar;
  } else {
    std::memcpy(&w.scalarBits, scalar, 8);
  }
  return w;
}

// Runs calls[] as consecutive launches (or as one launch when fused) on every rank at once and
// checks each rank's results after all of them.
void runCalls(int nranks, const std::vector<Call>& calls, bool fused, int threadsPerBlock,
              const EmuGeometry& g, int* placedLinks) {
  EmuClique clique(nranks, g);
  if (placedLinks != nullptr) *placedLinks = clique.placedLinks();
  std::vector<std::vector<Buffers>> bufs(static_cast<size_t>(nranks),
                                         std::vector<Buffers>(calls.size()));
  std::vector<std::vector<Work>> works(static_cast<size_t>(nranks));
  std::vector<std::vector<std::array<unsigned char, 8>>> scalarMem(
      static_cast<size_t>(nranks), std::vector<std::array<unsigned char, 8>>(calls.size()));
  for (int r = 0; r < nranks; ++r)
    for (size_t k = 0; k < calls.size(); ++k)
      works[static_cast<size_t>(r)].push_back(prepare(calls[k], nranks, r,
                                                      &bufs[static_cast<size_t>(r)][k],
                                                      scalarMem[static_cast<size_t>(r)][k].data()));
  std::vector<std::thread> ranks;
  std::vector<int> ok(static_cast<size_t>(nranks), 1);
  for (int r = 0; r < nranks; ++r) {
    ranks.emplace_back([&, r] {
      const std::vector<Work>& ws = works[static_cast<size_t>(r)];
      size_t k = 0;
      while (k < ws.size()) {
        Launch l;
        l.comm = clique.comm(r);
        l.nworks = 0;
        do {
          l.works[l.nworks++] = ws[k++];
        } while (fused && k < ws.size() && l.nworks < kMaxLaunchWorks);
        if (!emuRunLaunch(l, threadsPerBlock)) ok[static_cast<size_t>(r)] = 0;
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_EQ(clique.proxyError(), "");
  for (int r = 0; r < nranks; ++r) {
    ASSERT_TRUE(ok[static_cast<size_t>(r)]) << "rank " << r << ": no kernel for the work";
    ASSERT_EQ(clique.comm(r)->errorFlag[0], 0u);
    for (size_t k = 0; k < calls.size(); ++k) {
      const Call& c = calls[k];
      if (c.coll == Coll::kReduce && r != c.root) continue;
      const Work& w = works[static_cast<size_t>(r)][k];
      const void* got = resultOf(c, w);
      size_t wrong = 0;
      for (size_t i = 0; i < recvElems(c, nranks); ++i) {
        double want = expectedAt(c.coll, nranks, r, c.root, c.count, i, c.type, c.op);
        double v = loadValue(got, i, c.type);
        if (!(std::fabs(v - want) <= ref::tolerance(c.type, c.op, want)) && wrong++ < 3)
          ADD_FAILURE() << "rank " << r << " call " << k << " element " << i << ": " << v
                        << ", expected " << want;
      }
      EXPECT_EQ(wrong, 0u) << "rank " << r << " call " << k << " (coll " << static_cast<int>(c.coll)
                           << ", " << chorus_test::typeName(c.type) << ", " << ref::kOpNames[c.op]
                           << ", count " << c.count << ", proto " << static_cast<int>(c.proto)
                           << ", algo " << static_cast<int>(c.algo) << ")";
      // Every rank of an all-reduce ends with the same bits.
      if (c.coll == Coll::kAllReduce && r > 0) {
        EXPECT_EQ(std::memcmp(got, resultOf(c, works[0][k]), c.count * typeSize(c.type)), 0)
            << "rank " << r << " call " << k << " differs from rank 0";
      }
    }
  }
}

}  // namespace dev
}  // namespace chorus
