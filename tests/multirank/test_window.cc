// Collectives on window buffers (ncclMemAlloc memory registered with ncclCommWindowRegister),
// which ranks on one host read from each other in place: all-reduce, all-gather, reduce-scatter
// and broadcast against the reference computed here from every rank's inputs, for several
// types, ops (PreMulSum falls back to the usual algorithms), counts and both in place and out of
// place, with each rank's buffers at its own offset in its windows. Also: windows over other
// memory (registered, copied as usual), a call the ranks disagree on (fails on both instead of
// reading wrong data), and the arguments the API refuses.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "reference.h"

using chorus_test::RankMode;
using namespace chorus_test::ref;  // NOLINT: Op and the reference values

namespace {

constexpr size_t kWindowBytes = 8u << 20;
const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint32,  ncclFloat16,
                                 ncclFloat32, ncclFloat64, ncclBfloat16};
const Op kOps[] = {kSum, kProd, kMax, kMin, kAvg, kPreMulSum};
const size_t kCounts[] = {1, 5, 4099, 40009, 300007};

// A send and a receive window of this rank; shared memory unless `plain`. Each rank's buffers
// start at an offset of its own (rank * 320 bytes: a multiple of every element size).
struct RankWindows {
  RankWindows(ncclComm_t comm, int rank, bool plain) : comm(comm), plain(plain) {
    for (int k = 0; k < 2; ++k) {
      if (plain) {
        mem[k] = std::aligned_alloc(4096, kWindowBytes);
      } else {
        EXPECT_EQ(ncclMemAlloc(&mem[k], kWindowBytes), ncclSuccess);
      }
      EXPECT_NE(mem[k], nullptr);
      EXPECT_EQ(ncclCommWindowRegister(comm, mem[k], kWindowBytes, &win[k],
                                       k == 0 ? NCCL_WIN_COLL_SYMMETRIC : NCCL_WIN_DEFAULT),
                ncclSuccess)
          << ncclGetLastError(comm);
    }
    offset = static_cast<size_t>(rank) * 320;
  }
  ~RankWindows() {
    for (int k = 0; k < 2; ++k) {
      if (comm != nullptr) EXPECT_EQ(ncclCommWindowDeregister(comm, win[k]), ncclSuccess);
      if (plain)
        std::free(mem[k]);
      else
        EXPECT_EQ(ncclMemFree(mem[k]), ncclSuccess);
    }
  }
  unsigned char* send() const { return static_cast<unsigned char*>(mem[0]) + offset; }
  unsigned char* recv() const { return static_cast<unsigned char*>(mem[1]) + offset; }

  ncclComm_t comm;
  bool plain;
  void* mem[2] = {nullptr, nullptr};
  ncclWindow_t win[2] = {nullptr, nullptr};
  size_t offset = 0;
};

std::string describe(const char* coll, ncclDataType_t type, Op op, size_t count, bool inPlace,
                     int rank) {
  return "rank " + std::to_string(rank) + " " + coll + " " + chorus_test::typeName(type) + " " +
         kOpNames[op] + " count " + std::to_string(count) + (inPlace ? " in-place" : "");
}

// inPlace: 0 out of place, 1 in place, 2 in place on odd ranks only (the ranks then agree on
// how to run the call).
void checkAllReduce(const RankWindows& w, int rank, int n, ncclComm_t comm, ncclDataType_t type,
                    Op op, size_t count, int placement) {
  const bool inPlace = placement == 1 || (placement == 2 && rank % 2 == 1);
  unsigned char* in = inPlace ? w.recv() : w.send();
  for (size_t i = 0; i < count; ++i)
    chorus_test::storeExact(in, i, type, inputValue(rank, i, type, op));
  ScopedOp redop(op, type, comm);
  ASSERT_EQ(ncclAllReduce(in, w.recv(), count, type, redop.value, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  EXPECT_EQ(countWrong(w.recv(), count, 0, n, type, op,
                       describe("all-reduce", type, op, count, inPlace, rank)),
            0u);
}

void checkReduceScatter(const RankWindows& w, int rank, int n, ncclComm_t comm, ncclDataType_t type,
                        Op op, size_t count, bool inPlace) {
  const size_t es = chorus_test::typeSize(type);
  unsigned char* in = inPlace ? w.recv() : w.send();
  for (size_t j = 0; j < count * n; ++j)
    chorus_test::storeExact(in, j, type, inputValue(rank, j, type, op));
  unsigned char* out = inPlace ? in + rank * count * es : w.recv();
  ScopedOp redop(op, type, comm);
  ASSERT_EQ(ncclReduceScatter(in, out, count, type, redop.value, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  EXPECT_EQ(countWrong(out, count, rank * count, n, type, op,
                       describe("reduce-scatter", type, op, count, inPlace, rank)),
            0u);
}

uint8_t pattern(int rank, size_t byte) {
  return static_cast<uint8_t>((rank * 131 + byte * 7 + (byte >> 8)) & 0xff);
}

void checkAllGather(const RankWindows& w, int rank, int n, ncclComm_t comm, size_t bytes,
                    bool inPlace) {
  unsigned char* src = inPlace ? w.recv() + rank * bytes : w.send();
  for (size_t b = 0; b < bytes; ++b) src[b] = pattern(rank, b);
  w.recv()[n * bytes] = 0xEE;
  ASSERT_EQ(ncclAllGather(src, w.recv(), bytes, ncclUint8, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r)
    for (size_t b = 0; b < bytes; ++b)
      if (w.recv()[r * bytes + b] != pattern(r, b) && wrong++ < 3)
        ADD_FAILURE() << "rank " << rank << " all-gather of " << bytes << " bytes: byte " << b
                      << " of rank " << r << "'s block";
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(w.recv()[n * bytes], 0xEE) << "wrote past the end";
}

void checkBroadcast(const RankWindows& w, int rank, ncclComm_t comm, size_t bytes, int root,
                    bool inPlace) {
  unsigned char* src = inPlace ? w.recv() : w.send();
  std::memset(w.recv(), 0xEE, bytes + 1);
  if (rank == root)
    for (size_t b = 0; b < bytes; ++b) src[b] = pattern(root, b);
  ASSERT_EQ(ncclBroadcast(src, w.recv(), bytes, ncclUint8, root, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (size_t b = 0; b < bytes; ++b)
    if (w.recv()[b] != pattern(root, b) && wrong++ < 3)
      ADD_FAILURE() << "rank " << rank << " broadcast of " << bytes << " bytes from " << root
                    << ": byte " << b;
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(w.recv()[bytes], 0xEE) << "wrote past the end";
}

// (mode, nranks, plain memory, in-place all-reduce of every size read in place)
using Config = std::tuple<RankMode, int, bool, bool>;
class WindowMatrix : public ::testing::TestWithParam<Config> {
 protected:
  // Every size reads the windows in place (none is below the threshold), and in-place
  // all-reduces either run the usual algorithms (the default) or read in place too.
  void run(const std::function<void(const RankWindows&, int, int, ncclComm_t)>& body) {
    const bool plain = std::get<2>(GetParam());
    std::vector<std::string> env = {"CHORUS_WINDOW_MIN_BYTES=0", "CHORUS_STREAM_BYTES=4194304"};
    if (std::get<3>(GetParam())) env.push_back("CHORUS_WINDOW_INPLACE_BYTES=0");
    chorus_test::runRanks(std::get<1>(GetParam()), std::get<0>(GetParam()), env,
                          [&](int rank, int n, ncclComm_t& comm) {
                            RankWindows w(comm, rank, plain);
                            body(w, rank, n, comm);
                          });
  }
};

TEST_P(WindowMatrix, AllReduce) {
  run([](const RankWindows& w, int rank, int n, ncclComm_t comm) {
    for (ncclDataType_t t : kTypes)
      for (Op op : kOps)
        for (size_t count : kCounts)
          for (int placement : {0, 1, 2}) checkAllReduce(w, rank, n, comm, t, op, count, placement);
  });
}

TEST_P(WindowMatrix, ReduceScatter) {
  run([](const RankWindows& w, int rank, int n, ncclComm_t comm) {
    for (ncclDataType_t t : {ncclInt8, ncclFloat16, ncclFloat32})
      for (Op op : {kSum, kMax, kAvg, kPreMulSum})
        for (size_t count : {size_t{1}, size_t{4099}, size_t{300007}})
          for (bool inPlace : {false, true})
            checkReduceScatter(w, rank, n, comm, t, op, count, inPlace);
  });
}

TEST_P(WindowMatrix, AllGather) {
  run([](const RankWindows& w, int rank, int n, ncclComm_t comm) {
    for (size_t bytes : {size_t{1}, size_t{4099}, size_t{1} << 20, (size_t{3} << 20) / 2 + 7})
      for (bool inPlace : {false, true}) checkAllGather(w, rank, n, comm, bytes, inPlace);
  });
}

TEST_P(WindowMatrix, BroadcastFromEveryRoot) {
  run([](const RankWindows& w, int rank, int n, ncclComm_t comm) {
    for (int root = 0; root < n; ++root)
      for (size_t bytes : {size_t{1}, size_t{40009}, size_t{6} << 20})
        for (bool inPlace : {false, true}) checkBroadcast(w, rank, comm, bytes, root, inPlace);
  });
}

std::string configName(const ::testing::TestParamInfo<Config>& info) {
  return std::string(chorus_test::modeName(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param)) + "ranks" +
         (std::get<2>(info.param) ? "_plainmemory" : "") +
         (std::get<3>(info.param) ? "_inplaceread" : "");
}

INSTANTIATE_TEST_SUITE_P(Threads, WindowMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kThreads),
                                            ::testing::Values(2, 3), ::testing::Values(false),
                                            ::testing::Bool()),
                         configName);
INSTANTIATE_TEST_SUITE_P(Processes, WindowMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(2, 4), ::testing::Values(false),
                                            ::testing::Bool()),
                         configName);
INSTANTIATE_TEST_SUITE_P(PlainMemory, WindowMatrix,
                         ::testing::Combine(::testing::Values(RankMode::kProcesses),
                                            ::testing::Values(2), ::testing::Values(true),
                                            ::testing::Values(false)),
                         configName);

// Ranks that disagree on a call on window buffers both fail with an error that says so (the
// message only the in-place path gives), rather than reading each other's buffers wrongly.
TEST(Windows, RanksThatDisagreeFailOnBoth) {
  chorus_test::runRanks(
      2, RankMode::kProcesses, {"CHORUS_TIMEOUT=60"}, [](int rank, int, ncclComm_t& comm) {
        RankWindows w(comm, rank, false);
        const size_t count = rank == 0 ? 65536 : 65537;
        ncclResult_t r =
            ncclAllReduce(w.send(), w.recv(), count, ncclFloat, ncclSum, comm, nullptr);
        EXPECT_EQ(r, ncclInvalidUsage);
        EXPECT_NE(std::string(ncclGetLastError(comm)).find("window buffers"), std::string::npos)
            << ncclGetLastError(comm);
        // The windows go with the communicator.
        w.comm = nullptr;
      });
}

// One rank on window buffers, the other on plain ones where the selector runs the direct
// all-reduce (one-shot at 16 KiB on two ranks of one host): both fail at once, naming the other
// kind of call, instead of one reading staging buffers nobody wrote.
TEST(Windows, WindowCallAgainstDirectAllReduceFailsOnBoth) {
  chorus_test::runRanks(
      2, RankMode::kProcesses, {"CHORUS_TIMEOUT=60"}, [](int rank, int, ncclComm_t& comm) {
        RankWindows w(comm, rank, false);
        std::vector<float> plain(2 * 4096, 1.0f);
        const float* in = rank == 0 ? reinterpret_cast<float*>(w.send()) : plain.data();
        float* out = rank == 0 ? reinterpret_cast<float*>(w.recv()) : plain.data() + 4096;
        ncclResult_t r = ncclAllReduce(in, out, 4096, ncclFloat, ncclSum, comm, nullptr);
        EXPECT_EQ(r, ncclInvalidUsage);
        const std::string e = ncclGetLastError(comm);
        EXPECT_NE(e.find(rank == 0 ? "on other buffers" : "on window buffers"), std::string::npos)
            << e;
        w.comm = nullptr;
      });
}

TEST(Windows, BadArgumentsAreRefused) {
  chorus_test::runRanks(1, RankMode::kThreads, {}, [](int, int, ncclComm_t& comm) {
    void* mem = nullptr;
    ASSERT_EQ(ncclMemAlloc(&mem, 4096), ncclSuccess);
    ncclWindow_t win = nullptr;
    EXPECT_EQ(ncclCommWindowRegister(comm, mem, 4096, &win, 0x4), ncclInvalidArgument);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("winFlags"), std::string::npos);
    EXPECT_EQ(ncclCommWindowRegister(comm, mem, 4096, nullptr, 0), ncclInvalidArgument);
    EXPECT_EQ(ncclCommWindowRegister(comm, nullptr, 4096, &win, 0), ncclInvalidArgument);
    EXPECT_EQ(ncclCommWindowDeregister(comm, nullptr), ncclInvalidArgument);
    int notAWindow = 0;
    EXPECT_EQ(ncclCommWindowDeregister(comm, reinterpret_cast<ncclWindow_t>(&notAWindow)),
              ncclInvalidArgument);
    EXPECT_NE(std::string(ncclGetLastError(comm)).find("not a window"), std::string::npos);
    ASSERT_EQ(ncclCommWindowRegister(comm, mem, 4096, &win, 0), ncclSuccess);
    EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclSuccess);
    EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclInvalidArgument) << "deregistered twice";
    int onStack = 0;
    EXPECT_EQ(ncclMemFree(&onStack), ncclInvalidArgument);
    EXPECT_EQ(ncclMemFree(mem), ncclSuccess);
    EXPECT_EQ(ncclMemFree(mem), ncclInvalidArgument) << "freed twice";
    EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
  });
}

}  // namespace
