// The hierarchical algorithm across simulated hosts: rank processes placed on hosts by
// CHORUS_HOSTID (shared memory within a host, TCP over loopback between hosts). Every
// collective, several types and every op, counts that the ranks per host do and do not divide,
// in place and out of place, all roots, against the independent reference of reference.h; the
// all-reduce's result must also be bitwise the same on every rank. Placements: 3 hosts x 2
// ranks, 2 x 3, hosts whose ranks interleave (host of rank r = r % 2), and placements the
// algorithm does not apply to (uneven 3+1, 4 x 1), which must fall back and stay correct.
#include <gtest/gtest.h>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "harness.h"
#include "reference.h"

using namespace chorus_test::ref;  // NOLINT: Op and the reference values

namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint32,   ncclFloat16,
                                 ncclFloat32, ncclBfloat16, ncclFloat8e4m3};
const Op kOps[] = {kSum, kProd, kMax, kMin, kAvg, kPreMulSum};
const size_t kCounts[] = {0, 1, 5, 4099, 40009};

uint64_t hashBytes(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

void checkAllReduce(int rank, int n, ncclComm_t comm, ncclDataType_t type, Op op, size_t count,
                    bool inPlace) {
  const size_t es = chorus_test::typeSize(type);
  std::vector<unsigned char> send(count * es + 8), recv(count * es + 8, 0xEE);
  for (size_t i = 0; i < count; ++i)
    chorus_test::storeExact(send.data(), i, type, inputValue(rank, i, type, op));
  unsigned char* out = inPlace ? send.data() : recv.data();
  ScopedOp redop(op, type, comm);
  ASSERT_EQ(ncclAllReduce(send.data(), out, count, type, redop.value, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  const std::string what = "rank " + std::to_string(rank) + " all-reduce " +
                           chorus_test::typeName(type) + " " + kOpNames[op] + " count " +
                           std::to_string(count) + (inPlace ? " in place" : "");
  EXPECT_EQ(countWrong(out, count, 0, n, type, op, what), 0u);
  // Every rank holds the same bits.
  std::vector<uint64_t> hashes(n);
  hashes[rank] = hashBytes(out, count * es);
  ASSERT_EQ(ncclAllGather(&hashes[rank], hashes.data(), 1, ncclUint64, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  for (int r = 0; r < n; ++r)
    EXPECT_EQ(hashes[r], hashes[0]) << what << ": rank " << r << " differs";
}

void checkAllGather(int rank, int n, ncclComm_t comm, size_t bytes, bool inPlace) {
  std::vector<uint8_t> recv(bytes * n + 1, 0xEE), send(bytes + 1);
  auto value = [](int r, size_t i) { return static_cast<uint8_t>(r * 31 + i * 7 + 1); };
  uint8_t* in = inPlace ? recv.data() + rank * bytes : send.data();
  for (size_t i = 0; i < bytes; ++i) in[i] = value(rank, i);
  ASSERT_EQ(ncclAllGather(in, recv.data(), bytes, ncclUint8, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bytes; ++i) wrong += recv[r * bytes + i] != value(r, i);
  EXPECT_EQ(wrong, 0u) << "rank " << rank << " all-gather of " << bytes << " B"
                       << (inPlace ? " in place" : "");
  EXPECT_EQ(recv[bytes * n], 0xEE) << "all-gather wrote past its output";
}

void checkBroadcast(int rank, ncclComm_t comm, size_t bytes, int root, bool inPlace) {
  std::vector<uint8_t> send(bytes + 1), recv(bytes + 1, 0xEE);
  for (size_t i = 0; i < bytes; ++i) send[i] = static_cast<uint8_t>(root * 13 + i * 5 + 3);
  uint8_t* out = inPlace ? send.data() : recv.data();
  if (inPlace && rank != root) std::fill(send.begin(), send.end(), 0xEE);
  ASSERT_EQ(ncclBroadcast(send.data(), out, bytes, ncclUint8, root, comm, nullptr), ncclSuccess)
      << ncclGetLastError(comm);
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; ++i) wrong += out[i] != static_cast<uint8_t>(root * 13 + i * 5 + 3);
  EXPECT_EQ(wrong, 0u) << "rank " << rank << " broadcast of " << bytes << " B from root " << root;
  EXPECT_EQ(out[bytes], inPlace && rank == root ? send[bytes] : 0xEE);
}

// Every collective on one placement: hostOf(rank) names the simulated host of each rank.
void runEverything(int nranks, const std::function<int(int)>& hostOf,
                   const std::vector<std::string>& env) {
  chorus_test::runRankProcesses(
      nranks, env,
      [&](int r) {
        return std::vector<std::string>{"CHORUS_HOSTID=host" + std::to_string(hostOf(r))};
      },
      [](int rank, int n, ncclComm_t& comm) {
        for (ncclDataType_t type : kTypes)
          for (Op op : kOps)
            for (size_t count : kCounts)
              for (bool inPlace : {false, true}) {
                checkAllReduce(rank, n, comm, type, op, count, inPlace);
                if (type == ncclFloat32 || type == ncclInt8)
                  checkReduceScatter(rank, n, comm, type, op, count, inPlace);
                if (::testing::Test::HasFailure()) return;
              }
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{70001}})
          for (bool inPlace : {false, true}) {
            checkAllGather(rank, n, comm, bytes, inPlace);
            for (int root = 0; root < n; ++root) checkBroadcast(rank, comm, bytes, root, inPlace);
          }
        // A group mixing hierarchical calls with others runs them in order.
        std::vector<float> a(1000, 1.0f + rank), b(3000);
        ASSERT_EQ(ncclGroupStart(), ncclSuccess);
        ASSERT_EQ(ncclAllReduce(a.data(), a.data(), a.size(), ncclFloat32, ncclSum, comm, nullptr),
                  ncclSuccess);
        ASSERT_EQ(ncclReduce(a.data(), b.data(), a.size(), ncclFloat32, ncclMax, 0, comm, nullptr),
                  ncclSuccess);
        ASSERT_EQ(ncclAllGather(a.data(), b.data(), a.size() / n, ncclFloat32, comm, nullptr),
                  ncclSuccess);
        ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << ncclGetLastError(comm);
        const float sum = n + n * (n - 1) / 2.0f;
        for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], sum) << "grouped all-reduce, " << i;
        for (size_t i = 0; i < a.size() / n * n; ++i) ASSERT_EQ(b[i], sum) << "grouped all-gather";
      });
}

const std::vector<std::string> kForced = {"CHORUS_ALGO=hier"};

TEST(Hierarchical, ThreeHostsOfTwo) {
  runEverything(
      6, [](int r) { return r / 2; }, kForced);
}

TEST(Hierarchical, TwoHostsOfThree) {
  runEverything(
      6, [](int r) { return r / 3; }, kForced);
}

TEST(Hierarchical, InterleavedHosts) {
  runEverything(
      4, [](int r) { return r % 2; }, kForced);
}

// The algorithm does not apply: the selector's choice among the others must be used.
TEST(Hierarchical, UnevenHostsFallBack) {
  runEverything(
      4, [](int r) { return r < 3 ? 0 : 1; }, kForced);
}

TEST(Hierarchical, OneRankPerHostFallsBack) {
  runEverything(
      4, [](int r) { return r; }, kForced);
}

// Left to the cost model, 2 hosts x 2 ranks pick it for a large all-reduce (rank 0 logs the
// choice), and the result is right.
TEST(Hierarchical, ChosenByTheSelector) {
  char dir[] = "/tmp/chorus-hier-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string log = std::string(dir) + "/log";
  chorus_test::runRankProcesses(
      4, {"CHORUS_DEBUG=INFO", "CHORUS_DEBUG_SUBSYS=TUNING", "CHORUS_DEBUG_FILE=" + log + ".%p"},
      [](int r) { return std::vector<std::string>{"CHORUS_HOSTID=h" + std::to_string(r / 2)}; },
      [](int rank, int n, ncclComm_t& comm) {
        checkAllReduce(rank, n, comm, ncclFloat32, kSum, size_t{1} << 20, false);
      });
  std::string text;
  DIR* d = opendir(dir);
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string(dir) + "/" + e->d_name;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    text += ss.str();
    unlink(path.c_str());
  }
  closedir(d);
  rmdir(dir);
  EXPECT_NE(text.find("AllReduce 4 MiB class (4194304 B): hier"), std::string::npos) << text;
}

}  // namespace
