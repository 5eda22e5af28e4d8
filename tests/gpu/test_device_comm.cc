// Device communicators through the NCCL API on a GPU: 1, 2 and 4 ranks sharing device 0 as
// threads of this process (ncclCommInitAll), cudaMalloc buffers and a stream per rank; every
// collective against the reference of the multi-rank tests, both protocols, group calls,
// send/recv with all-to-all, gather and scatter, a PreMulSum scalar in device memory, and a CUDA
// graph captured once and replayed with new inputs; the same over links through host memory
// (CHORUS_DEVICE_HOST_LINKS, shared memory and sockets). Without a usable GPU the program exits 77
// (skipped) and says why.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "multirank/reference.h"
#include "nccl.h"

namespace {

namespace ref = chorus_test::ref;
using chorus_test::typeSize;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
#define NCCL_OK(call) ASSERT_EQ((call), ncclSuccess) << #call << ": " << ncclGetLastError(nullptr)

// n ranks on device 0, a stream each; destroyed at the end.
struct Clique {
  explicit Clique(int n) : comms(n), streams(n) {
    std::vector<int> devs(n, 0);
    EXPECT_EQ(ncclCommInitAll(comms.data(), n, devs.data()), ncclSuccess)
        << ncclGetLastError(nullptr);
    for (cudaStream_t& s : streams) EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  }
  ~Clique() {
    for (cudaStream_t s : streams) cudaStreamDestroy(s);
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  void sync() {
    for (cudaStream_t s : streams) EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  }
  std::vector<ncclComm_t> comms;
  std::vector<cudaStream_t> streams;
};

struct DeviceBuf {
  explicit DeviceBuf(size_t bytes) : bytes(bytes) {
    EXPECT_EQ(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes), cudaSuccess);
  }
  ~DeviceBuf() { cudaFree(ptr); }
  void* ptr = nullptr;
  size_t bytes;
};

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };

// One collective on every rank (in a group), then each rank's output against the reference.
void checkCollective(Clique& c, Kind kind, ncclDataType_t type, ref::Op op, size_t count,
                     int root) {
  const int n = static_cast<int>(c.comms.size());
  const size_t elt = typeSize(type);
  const size_t inElems = kind == Kind::kReduceScatter ? count * n : count;
  const size_t outElems = kind == Kind::kAllGather ? count * n : count;
  const ref::Op fill = kind == Kind::kAllGather || kind == Kind::kBroadcast ? ref::kSum : op;
  std::vector<std::unique_ptr<DeviceBuf>> in, out;
  std::vector<ncclRedOp_t> ops(n, static_cast<ncclRedOp_t>(op));
  std::vector<void*> scalars(n, nullptr);
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> host(inElems * elt);
    for (size_t i = 0; i < inElems; ++i)
      chorus_test::storeExact(host.data(), i, type, ref::inputValue(r, i, type, fill));
    in.emplace_back(new DeviceBuf(host.size()));
    out.emplace_back(new DeviceBuf(outElems * elt));
    CUDA_OK(cudaMemcpy(in[r]->ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(out[r]->ptr, 0xee, outElems * elt));
    if (op == ref::kPreMulSum) {
      unsigned char two[8] = {};
      chorus_test::storeExact(two, 0, type, 2.0);
      CUDA_OK(cudaMalloc(&scalars[r], 8));
      CUDA_OK(cudaMemcpy(scalars[r], two, 8, cudaMemcpyHostToDevice));
      NCCL_OK(ncclRedOpCreatePreMulSum(&ops[r], scalars[r], type, ncclScalarDevice, c.comms[r]));
    }
  }
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ncclResult_t res = ncclSuccess;
    switch (kind) {
      case Kind::kAllReduce:
        res = ncclAllReduce(in[r]->ptr, out[r]->ptr, count, type, ops[r], c.comms[r], c.streams[r]);
        break;
      case Kind::kReduceScatter:
        res = ncclReduceScatter(in[r]->ptr, out[r]->ptr, count, type, ops[r], c.comms[r],
                                c.streams[r]);
        break;
      case Kind::kAllGather:
        res = ncclAllGather(in[r]->ptr, out[r]->ptr, count, type, c.comms[r], c.streams[r]);
        break;
      case Kind::kBroadcast:
        res = ncclBroadcast(in[r]->ptr, out[r]->ptr, count, type, root, c.comms[r], c.streams[r]);
        break;
      case Kind::kReduce:
        res = ncclReduce(in[r]->ptr, out[r]->ptr, count, type, ops[r], root, c.comms[r],
                         c.streams[r]);
        break;
    }
    EXPECT_EQ(res, ncclSuccess) << ncclGetLastError(c.comms[r]);
  }
  NCCL_OK(ncclGroupEnd());
  c.sync();
  for (int r = 0; r < n; ++r) {
    if (op == ref::kPreMulSum) {
      ncclRedOpDestroy(ops[r], c.comms[r]);
      cudaFree(scalars[r]);
    }
    if (kind == Kind::kReduce && r != root) continue;
    std::vector<unsigned char> host(outElems * elt);
    CUDA_OK(cudaMemcpy(host.data(), out[r]->ptr, host.size(), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < outElems; ++i) {
      double want = 0;
      switch (kind) {
        case Kind::kAllReduce:
        case Kind::kReduce:
          want = ref::expectedValue(n, i, type, op);
          break;
        case Kind::kReduceScatter:
          want = ref::expectedValue(n, r * count + i, type, op);
          break;
        case Kind::kAllGather:
          want = ref::inputValue(static_cast<int>(i / count), i % count, type, ref::kSum);
          break;
        case Kind::kBroadcast:
          want = ref::inputValue(root, i, type, ref::kSum);
          break;
      }
      double got = chorus_test::loadValue(host.data(), i, type);
      if (!(std::fabs(got - want) <= ref::tolerance(type, op, want)) && wrong++ < 3)
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << got << ", expected " << want;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r << " of " << n << ", kind " << static_cast<int>(kind)
                         << ", " << chorus_test::typeName(type) << ", " << ref::kOpNames[op]
                         << ", count " << count;
  }
}

// All-reduce of every type and op: one element, a few, and a million.
void allReduceEveryTypeAndOp(Clique& c) {
  const ncclDataType_t types[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                  ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                  ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
  for (ncclDataType_t t : types)
    for (int op = 0; op < ref::kNumTestOps; ++op)
      for (size_t count : {size_t{1}, size_t{1031}, size_t{1} << 20})
        checkCollective(c, Kind::kAllReduce, t, static_cast<ref::Op>(op), count, 0);
}

// Ranks, CHORUS_PROTO, and the links: "p2p" (as chosen), "shm" or "socket" (every link through
// host memory and the proxy: CHORUS_DEVICE_HOST_LINKS=1, with CHORUS_SHM_DISABLE=1 for sockets).
using DeviceCommParam = std::tuple<int, const char*, const char*>;

class DeviceComm : public ::testing::TestWithParam<DeviceCommParam> {
 protected:
  void SetUp() override {
    setenv("CHORUS_PROTO", std::get<1>(GetParam()), 1);
    const std::string links = std::get<2>(GetParam());
    if (links != "p2p") setenv("CHORUS_DEVICE_HOST_LINKS", "1", 1);
    if (links == "socket") setenv("CHORUS_SHM_DISABLE", "1", 1);
  }
  void TearDown() override {
    unsetenv("CHORUS_PROTO");
    unsetenv("CHORUS_DEVICE_HOST_LINKS");
    unsetenv("CHORUS_SHM_DISABLE");
  }
};

std::string paramName(const ::testing::TestParamInfo<DeviceCommParam>& info) {
  const std::string proto = std::get<1>(info.param), links = std::get<2>(info.param);
  return std::to_string(std::get<0>(info.param)) + "ranks_" + (proto.empty() ? "auto" : proto) +
         (links == "p2p" ? "" : "_" + links);
}

TEST_P(DeviceComm, EveryCollectiveTypeAndOp) {
  Clique c(std::get<0>(GetParam()));
  allReduceEveryTypeAndOp(c);
  const int n = std::get<0>(GetParam());
  for (ncclDataType_t t : {ncclFloat32, ncclBfloat16, ncclInt8})
    for (size_t count : {size_t{7}, size_t{100003}}) {
      checkCollective(c, Kind::kReduceScatter, t, ref::kSum, count, 0);
      checkCollective(c, Kind::kAllGather, t, ref::kSum, count, 0);
      checkCollective(c, Kind::kBroadcast, t, ref::kSum, count, n - 1);
      checkCollective(c, Kind::kReduce, t, ref::kMax, count, n / 2);
    }
}

INSTANTIATE_TEST_SUITE_P(RanksOnOneGpu, DeviceComm,
                         ::testing::Combine(::testing::Values(1, 2, 4),
                                            ::testing::Values("LL", "Simple", ""),
                                            ::testing::Values("p2p")),
                         paramName);
// Links through host memory: mapped pinned FIFOs, the proxy and the host transports.
INSTANTIATE_TEST_SUITE_P(RanksThroughHost, DeviceComm,
                         ::testing::Combine(::testing::Values(2, 3),
                                            ::testing::Values("LL", "Simple", ""),
                                            ::testing::Values("shm", "socket")),
                         paramName);

// The direct all-reduce (one-shot, two-shot), the tree and recursive doubling forced by
// CHORUS_ALGO, with each protocol they run: ranks on one GPU read each other's direct buffers,
// or pass partial sums over the tree or partner links; every type and op, one element, a few,
// and a million (many sequences of the 64 KiB buffers, or many chunks, on each channel).
using DirectParam = std::tuple<int, const char*, const char*>;

class DeviceDirect : public ::testing::TestWithParam<DirectParam> {
 protected:
  void SetUp() override {
    setenv("CHORUS_ALGO", std::get<1>(GetParam()), 1);
    setenv("CHORUS_PROTO", std::get<2>(GetParam()), 1);
  }
  void TearDown() override {
    unsetenv("CHORUS_ALGO");
    unsetenv("CHORUS_PROTO");
  }
};

TEST_P(DeviceDirect, AllReduceEveryTypeAndOp) {
  Clique c(std::get<0>(GetParam()));
  allReduceEveryTypeAndOp(c);
}

std::string directName(const ::testing::TestParamInfo<DirectParam>& info) {
  std::string algo = std::get<1>(info.param), proto = std::get<2>(info.param);
  for (char& ch : algo)
    if (ch == ',') ch = '_';
  return std::to_string(std::get<0>(info.param)) + "ranks_" + algo + "_" +
         (proto.empty() ? "auto" : proto);
}

INSTANTIATE_TEST_SUITE_P(
    RanksOnOneGpu, DeviceDirect,
    ::testing::Values(DirectParam(2, "oneshot", "LL"), DirectParam(2, "oneshot", "Simple"),
                      DirectParam(2, "twoshot", "Simple"), DirectParam(4, "oneshot", "LL"),
                      DirectParam(4, "twoshot", "Simple"), DirectParam(4, "direct,ring", ""),
                      DirectParam(2, "tree", "LL"), DirectParam(4, "tree", "LL"),
                      DirectParam(4, "tree", "Simple"), DirectParam(2, "rd", "LL"),
                      DirectParam(4, "rd", "Simple")),
    directName);

// The point-to-point calls: all-to-all, gather, scatter and a ring shift by send/recv in a
// group (all-to-all also in place), each block of bytes checked against the pattern its sender
// wrote.
unsigned char patternByte(int src, int dst, size_t i) {
  return static_cast<unsigned char>(src * 131 + dst * 31 + i * 13 + (i >> 8));
}

enum class P2pKind { kAllToAll, kAllToAllInPlace, kGather, kScatter, kRingShift };

void checkP2p(Clique& c, P2pKind kind, size_t bytes, int root) {
  const int n = static_cast<int>(c.comms.size());
  // Every rank's send buffer holds n blocks (block d for rank d), its receive buffer n blocks
  // (block s from rank s); the calls use the blocks their pattern needs.
  std::vector<std::unique_ptr<DeviceBuf>> in, out;
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> host(bytes * n);
    for (int d = 0; d < n; ++d)
      for (size_t i = 0; i < bytes; ++i) host[bytes * d + i] = patternByte(r, d, i);
    in.emplace_back(new DeviceBuf(bytes * n));
    out.emplace_back(new DeviceBuf(bytes * n));
    CUDA_OK(cudaMemcpy(in[r]->ptr, host.data(), host.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(out[r]->ptr, 0xee, bytes * n));
  }
  auto block = [&](std::unique_ptr<DeviceBuf>& b, int k) {
    return static_cast<char*>(b->ptr) + bytes * static_cast<size_t>(k);
  };
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r) {
    ncclResult_t res = ncclSuccess;
    switch (kind) {
      case P2pKind::kAllToAll:
        res = ncclAlltoAll(in[r]->ptr, out[r]->ptr, bytes, ncclUint8, c.comms[r], c.streams[r]);
        break;
      case P2pKind::kAllToAllInPlace:
        res = ncclAlltoAll(in[r]->ptr, in[r]->ptr, bytes, ncclUint8, c.comms[r], c.streams[r]);
        break;
      case P2pKind::kGather:
        res = ncclGather(block(in[r], root), out[r]->ptr, bytes, ncclUint8, root, c.comms[r],
                         c.streams[r]);
        break;
      case P2pKind::kScatter:
        res = ncclScatter(in[r]->ptr, block(out[r], root), bytes, ncclUint8, root, c.comms[r],
                          c.streams[r]);
        break;
      case P2pKind::kRingShift: {
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        res = ncclSend(block(in[r], next), bytes, ncclUint8, next, c.comms[r], c.streams[r]);
        if (res == ncclSuccess)
          res = ncclRecv(block(out[r], prev), bytes, ncclUint8, prev, c.comms[r], c.streams[r]);
        break;
      }
    }
    EXPECT_EQ(res, ncclSuccess) << ncclGetLastError(c.comms[r]);
  }
  NCCL_OK(ncclGroupEnd());
  c.sync();
  for (int r = 0; r < n; ++r) {
    std::vector<unsigned char> host(bytes * n);
    const bool inPlace = kind == P2pKind::kAllToAllInPlace;
    CUDA_OK(cudaMemcpy(host.data(), (inPlace ? in[r] : out[r])->ptr, host.size(),
                       cudaMemcpyDeviceToHost));
    for (int s = 0; s < n; ++s) {
      bool expected = kind == P2pKind::kAllToAll || inPlace ||
                      (kind == P2pKind::kGather && r == root) ||
                      (kind == P2pKind::kScatter && s == root) ||
                      (kind == P2pKind::kRingShift && s == (r + n - 1) % n);
      if (!expected) continue;
      // Scatter: rank r's block arrives at offset root (where the call put recvbuff).
      const size_t at = kind == P2pKind::kScatter ? static_cast<size_t>(root) : s;
      size_t wrong = 0;
      for (size_t i = 0; i < bytes; ++i)
        if (host[bytes * at + i] != patternByte(s, r, i) && wrong++ < 3)
          ADD_FAILURE() << "rank " << r << " from " << s << " byte " << i;
      EXPECT_EQ(wrong, 0u) << "kind " << static_cast<int>(kind) << ", " << n << " ranks, " << bytes
                           << " bytes, rank " << r << " from " << s;
    }
  }
}

TEST_P(DeviceComm, SendRecvAllToAllGatherScatter) {
  Clique c(std::get<0>(GetParam()));
  const int n = std::get<0>(GetParam());
  for (size_t bytes : {size_t{1}, size_t{4099}, size_t{3} << 20}) {
    checkP2p(c, P2pKind::kAllToAll, bytes, 0);
    checkP2p(c, P2pKind::kAllToAllInPlace, bytes, 0);
    checkP2p(c, P2pKind::kGather, bytes, n - 1);
    checkP2p(c, P2pKind::kScatter, bytes, n / 2);
    checkP2p(c, P2pKind::kRingShift, bytes, 0);
  }
}

// An all-reduce captured in a CUDA graph on every rank's stream, replayed with new inputs:
// nothing in the launch may depend on state the host advanced at capture.
TEST(DeviceCommGraph, CapturedAllReduceReplaysCorrectly) {
  const int n = 2;
  const size_t count = 300000;
  Clique c(n);
  std::vector<std::unique_ptr<DeviceBuf>> in, out;
  for (int r = 0; r < n; ++r) {
    in.emplace_back(new DeviceBuf(count * sizeof(float)));
    out.emplace_back(new DeviceBuf(count * sizeof(float)));
  }
  std::vector<cudaGraph_t> graphs(n);
  std::vector<cudaGraphExec_t> execs(n);
  for (int r = 0; r < n; ++r)
    CUDA_OK(cudaStreamBeginCapture(c.streams[r], cudaStreamCaptureModeThreadLocal));
  NCCL_OK(ncclGroupStart());
  for (int r = 0; r < n; ++r)
    NCCL_OK(ncclAllReduce(in[r]->ptr, out[r]->ptr, count, ncclFloat32, ncclSum, c.comms[r],
                          c.streams[r]));
  NCCL_OK(ncclGroupEnd());
  // Every capture ends before any graph is instantiated: CUDA refuses to instantiate while a
  // stream of this thread is still capturing.
  for (int r = 0; r < n; ++r) CUDA_OK(cudaStreamEndCapture(c.streams[r], &graphs[r]));
  for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphInstantiate(&execs[r], graphs[r], 0));
  for (int replay = 0; replay < 5; ++replay) {
    for (int r = 0; r < n; ++r) {
      std::vector<float> host(count);
      for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((i % 7) + r * 10 + replay);
      CUDA_OK(cudaMemcpy(in[r]->ptr, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int r = 0; r < n; ++r) CUDA_OK(cudaGraphLaunch(execs[r], c.streams[r]));
    c.sync();
    for (int r = 0; r < n; ++r) {
      std::vector<float> host(count);
      CUDA_OK(cudaMemcpy(host.data(), out[r]->ptr, count * sizeof(float), cudaMemcpyDeviceToHost));
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        float want = static_cast<float>(2 * (i % 7) + 10 + 2 * replay);
        if (host[i] != want && wrong++ < 3)
          ADD_FAILURE() << "replay " << replay << " rank " << r << " element " << i << ": "
                        << host[i] << ", expected " << want;
      }
      EXPECT_EQ(wrong, 0u) << "replay " << replay << " rank " << r;
    }
  }
  for (int r = 0; r < n; ++r) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
  }
}

// Ranks sharing a GPU in one process on the legacy default stream would wait on each other
// forever: refused with a message instead.
TEST(DeviceCommErrors, SharedGpuOnTheDefaultStreamIsRefused) {
  Clique c(2);
  DeviceBuf buf(1024);
  ncclResult_t res = ncclAllReduce(buf.ptr, buf.ptr, 16, ncclFloat32, ncclSum, c.comms[0], 0);
  EXPECT_EQ(res, ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(c.comms[0])).find("stream each"), std::string::npos)
      << ncclGetLastError(c.comms[0]);
}

}  // namespace

// Decides between running and skipping before GoogleTest starts.
int main(int argc, char** argv) {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf(
        "no usable CUDA device (cudaGetDeviceCount: %s): skipping the device "
        "communicator tests\n",
        err != cudaSuccess ? cudaGetErrorString(err) : "no device");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
