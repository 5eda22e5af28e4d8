// Bootstrap and sockets: unique id encoding, rendezvous with ranks as threads, tagged messages,
// collectives, rejection of stray connections, timeouts, abort, and interface selection.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <sched.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "common/socket.h"

namespace chorus {
namespace {

// Whether text contains part, with both shown on failure.
::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

class BootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Keep every connection on the loopback interface.
    setenv("CHORUS_SOCKET_IFNAME", "=lo", 1);
    setenv("CHORUS_SOCKET_FAMILY", "AF_INET", 1);
    unsetenv("CHORUS_COMM_ID");
    unsetenv("NCCL_COMM_ID");
    unsetenv("CHORUS_COMM_SECRET");
  }
  void TearDown() override {
    unsetenv("CHORUS_SOCKET_IFNAME");
    unsetenv("CHORUS_SOCKET_FAMILY");
    unsetenv("CHORUS_COMM_ID");
  }
};

BootstrapOptions quickOptions(double initTimeout = 20, double timeout = 20) {
  BootstrapOptions o;
  o.initTimeoutSeconds = initTimeout;
  o.timeoutSeconds = timeout;
  return o;
}

// Runs fn(rank) on nranks threads and returns each rank's Status.
std::vector<Status> runRanks(int nranks, const std::function<Status(int)>& fn) {
  std::vector<Status> results(static_cast<size_t>(nranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = fn(r); });
  for (std::thread& t : threads) t.join();
  return results;
}

unsigned char pattern(int rank, int iter, size_t i) {
  return static_cast<unsigned char>(rank * 31 + iter * 7 + i * 13 + 1);
}

// allGather, out-of-order tagged send/recv with every peer, self messages and a barrier.
Status exercise(Bootstrap& b, int iterations) {
  const int r = b.rank();
  const int n = b.nranks();
  for (int it = 0; it < iterations; ++it) {
    const size_t block = 13 + static_cast<size_t>(it);
    std::vector<unsigned char> buf(static_cast<size_t>(n) * block, 0xEE);
    for (size_t i = 0; i < block; ++i) buf[static_cast<size_t>(r) * block + i] = pattern(r, it, i);
    CHORUS_TRY(b.allGather(buf.data(), block));
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < block; ++i)
        if (buf[static_cast<size_t>(q) * block + i] != pattern(q, it, i))
          return internalError("rank %d iteration %d: allGather block %d byte %zu is wrong", r, it,
                               q, i);

    for (int p = 0; p < n; ++p) {
      for (int tag = 1; tag <= 3; ++tag) {
        int msg[4] = {r, p, tag, it};
        CHORUS_TRY(b.send(p, tag, msg, sizeof(msg)));
      }
    }
    for (int p = 0; p < n; ++p) {
      for (int tag = 3; tag >= 1; --tag) {
        int msg[4] = {-1, -1, -1, -1};
        CHORUS_TRY(b.recv(p, tag, msg, sizeof(msg)));
        if (msg[0] != p || msg[1] != r || msg[2] != tag || msg[3] != it)
          return internalError("rank %d: message from %d tag %d holds {%d,%d,%d,%d}", r, p, tag,
                               msg[0], msg[1], msg[2], msg[3]);
      }
    }
    CHORUS_TRY(b.barrier());
  }
  return Status::ok();
}

// Waits (without sleeping) until every root thread of the process has ended.
bool rootsEnd(double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (liveRendezvousRoots() != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

UniqueIdInfo loopbackId(int port) {
  UniqueIdInfo info;
  memset(&info, 0, sizeof(info));
  info.rootAddr = SocketAddress::loopback(AF_INET, port).storage();
  info.secret = 0x1234567890abcdefull;
  info.magic = 0xfedcba0987654321ull;
  return info;
}

int freeLoopbackPort() {
  Result<Listener> l = Listener::open(SocketAddress::loopback(AF_INET, 0));
  EXPECT_TRUE(l.isOk()) << l.status().message();
  return l.isOk() ? l.value().address().port() : 0;
}

TEST_F(BootstrapTest, UniqueIdRoundTrip) {
  UniqueIdInfo in = loopbackId(4567);
  unsigned char bytes[kUniqueIdBytes];
  encodeUniqueId(in, bytes);
  Result<UniqueIdInfo> out = decodeUniqueId(bytes);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(SocketAddress(out.value().rootAddr), SocketAddress(in.rootAddr));
  EXPECT_EQ(out.value().secret, in.secret);
  EXPECT_EQ(out.value().magic, in.magic);

  Result<SocketAddress> v6 = SocketAddress::parse("[::1]:80");
  ASSERT_TRUE(v6.isOk()) << v6.status().message();
  in.rootAddr = v6.value().storage();
  encodeUniqueId(in, bytes);
  out = decodeUniqueId(bytes);
  ASSERT_TRUE(out.isOk()) << out.status().message();
  EXPECT_EQ(SocketAddress(out.value().rootAddr).toString(), "[::1]:80");
}

TEST_F(BootstrapTest, GarbageAndCorruptedIdsAreRejected) {
  unsigned char bytes[kUniqueIdBytes];
  for (size_t i = 0; i < kUniqueIdBytes; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 5);
  Result<UniqueIdInfo> out = decodeUniqueId(bytes);
  EXPECT_EQ(out.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(out.status().message(), "uniqueId is not a valid Chorus id"));

  memset(bytes, 0, sizeof(bytes));
  EXPECT_EQ(decodeUniqueId(bytes).status().code(), Code::kInvalidArgument);

  unsigned char good[kUniqueIdBytes];
  encodeUniqueId(loopbackId(4567), good);
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    memcpy(bytes, good, sizeof(bytes));
    bytes[i] ^= 0x10;
    Result<UniqueIdInfo> bad = decodeUniqueId(bytes);
    EXPECT_EQ(bad.status().code(), Code::kInvalidArgument) << "byte " << i;
    EXPECT_TRUE(contains(bad.status().message(), "uniqueId")) << "byte " << i;
  }
}

TEST_F(BootstrapTest, RanksRendezvousAndExchange) {
  for (int nranks : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE("nranks " + std::to_string(nranks));
    Result<UniqueIdInfo> id = createUniqueId();
    ASSERT_TRUE(id.isOk()) << id.status().message();
    EXPECT_TRUE(SocketAddress(id.value().rootAddr).isLoopback());
    std::vector<Status> results = runRanks(nranks, [&](int rank) -> Status {
      auto b = Bootstrap::init(id.value(), rank, nranks, quickOptions());
      if (!b.isOk()) return b.status();
      if (b.value()->rank() != rank || b.value()->nranks() != nranks)
        return internalError("rank/nranks not kept");
      return exercise(*b.value(), 4);
    });
    for (int r = 0; r < nranks; ++r)
      EXPECT_TRUE(results[static_cast<size_t>(r)].isOk())
          << "rank " << r << ": " << results[static_cast<size_t>(r)].message();
  }
  EXPECT_TRUE(rootsEnd(10)) << "a root thread is still running after its rendezvous";
}

TEST_F(BootstrapTest, Ipv6Loopback) {
  setenv("CHORUS_SOCKET_FAMILY", "AF_INET6", 1);
  Result<std::vector<InterfaceAddress>> v6 = findInterfaces();
  if (!v6.isOk()) GTEST_SKIP() << "no IPv6 loopback: " << v6.status().message();
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  EXPECT_EQ(SocketAddress(id.value().rootAddr).family(), AF_INET6);
  std::vector<Status> results = runRanks(2, [&](int rank) -> Status {
    auto b = Bootstrap::init(id.value(), rank, 2, quickOptions());
    if (!b.isOk()) return b.status();
    if (SocketAddress(b.value()->localAddress()).family() != AF_INET6)
      return internalError("rank %d listens on %s", rank,
                           addressToString(b.value()->localAddress()).c_str());
    return exercise(*b.value(), 1);
  });
  for (const Status& s : results) EXPECT_TRUE(s.isOk()) << s.message();
}

TEST_F(BootstrapTest, LocalIdIgnoresCommIdAndInterfaceFilter) {
  setenv("CHORUS_COMM_ID", "127.0.0.1:1", 1);
  setenv("CHORUS_SOCKET_IFNAME", "nosuchif", 1);
  Result<UniqueIdInfo> id = createLocalUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  EXPECT_TRUE(SocketAddress(id.value().rootAddr).isLoopback());
  EXPECT_NE(SocketAddress(id.value().rootAddr).port(), 1);
  std::vector<Status> results = runRanks(3, [&](int rank) -> Status {
    auto b = Bootstrap::init(id.value(), rank, 3, quickOptions());
    if (!b.isOk()) return b.status();
    return exercise(*b.value(), 1);
  });
  for (const Status& s : results) EXPECT_TRUE(s.isOk()) << s.message();
}

TEST_F(BootstrapTest, LargeAllGatherDoesNotDeadlock) {
  // Blocks bigger than the socket buffers: every rank sends and receives at once.
  const int nranks = 3;
  const size_t block = 8u << 20;
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  std::vector<Status> results = runRanks(nranks, [&](int rank) -> Status {
    auto b = Bootstrap::init(id.value(), rank, nranks, quickOptions());
    if (!b.isOk()) return b.status();
    std::vector<unsigned char> buf(nranks * block, 0);
    for (size_t i = 0; i < block; ++i) buf[rank * block + i] = pattern(rank, 0, i);
    CHORUS_TRY(b.value()->allGather(buf.data(), block));
    for (int q = 0; q < nranks; ++q)
      for (size_t i = 0; i < block; i += 4099)
        if (buf[q * block + i] != pattern(q, 0, i)) return internalError("block %d wrong", q);
    return Status::ok();
  });
  for (const Status& s : results) EXPECT_TRUE(s.isOk()) << s.message();
}

TEST_F(BootstrapTest, StrayConnectionsDoNotDisturbTheRendezvous) {
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  const SocketAddress root(id.value().rootAddr);
  Waiter w(5, nullptr);

  Result<Socket> junk = connectSocket(root, w);
  ASSERT_TRUE(junk.isOk()) << junk.status().message();
  std::vector<unsigned char> noise(wire::kRootHelloBytes, 0x5a);
  ASSERT_TRUE(junk.value().sendAll(noise.data(), noise.size(), w).isOk());

  Result<Socket> wrongSecret = connectSocket(root, w);
  ASSERT_TRUE(wrongSecret.isOk());
  wire::RootHello hello;
  hello.secret = id.value().secret ^ 1;
  hello.idMagic = id.value().magic;
  hello.rank = 0;
  hello.nranks = 3;
  hello.listenAddress = SocketAddress::loopback(AF_INET, 1).storage();
  unsigned char helloBytes[wire::kRootHelloBytes];
  wire::putRootHello(helloBytes, hello);
  ASSERT_TRUE(wrongSecret.value().sendAll(helloBytes, sizeof(helloBytes), w).isOk());

  // Connected but silent, and a partial hello: neither may hold up the real ranks.
  Result<Socket> silent = connectSocket(root, w);
  ASSERT_TRUE(silent.isOk());
  Result<Socket> partial = connectSocket(root, w);
  ASSERT_TRUE(partial.isOk());
  ASSERT_TRUE(partial.value().sendAll(helloBytes, 10, w).isOk());

  // The root closes the rejected connections.
  char byte;
  Status closed = junk.value().recvAll(&byte, 1, w);
  EXPECT_EQ(closed.code(), Code::kRemoteError) << closed.message();
  closed = wrongSecret.value().recvAll(&byte, 1, w);
  EXPECT_EQ(closed.code(), Code::kRemoteError) << closed.message();

  const int nranks = 3;
  std::atomic<bool> strayDone{false};
  std::vector<Status> results = runRanks(nranks, [&](int rank) -> Status {
    auto b = Bootstrap::init(id.value(), rank, nranks, quickOptions());
    if (!b.isOk()) return b.status();
    std::vector<sockaddr_storage> listeners(nranks);
    listeners[static_cast<size_t>(rank)] = b.value()->localAddress();
    CHORUS_TRY(b.value()->allGather(listeners.data(), sizeof(sockaddr_storage)));
    if (rank == 1) {
      // Strays at rank 0's peer listener before rank 0 accepts rank 1's connection.
      Waiter w2(5, nullptr);
      Result<Socket> s = connectSocket(SocketAddress(listeners[0]), w2);
      if (!s.isOk()) return s.status();
      CHORUS_TRY(s.value().sendAll(noise.data(), wire::kPeerHelloBytes, w2));
      Result<Socket> quiet = connectSocket(SocketAddress(listeners[0]), w2);
      if (!quiet.isOk()) return quiet.status();
      strayDone.store(true);
      return exercise(*b.value(), 2);
    }
    if (rank == 0)
      while (!strayDone.load()) std::this_thread::yield();
    return exercise(*b.value(), 2);
  });
  for (int r = 0; r < nranks; ++r)
    EXPECT_TRUE(results[static_cast<size_t>(r)].isOk())
        << "rank " << r << ": " << results[static_cast<size_t>(r)].message();
}

TEST_F(BootstrapTest, InitTimeoutNamesTheMissingRank) {
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  const int nranks = 4;
  // Ranks 0..2 arrive; rank 3 never does.
  std::vector<Status> results = runRanks(3, [&](int rank) -> Status {
    return Bootstrap::init(id.value(), rank, nranks, quickOptions(1)).status();
  });
  for (const Status& s : results) {
    EXPECT_EQ(s.code(), Code::kRemoteError) << s.message();
    EXPECT_TRUE(contains(s.message(), "rank 3 of 4 never joined"));
    EXPECT_TRUE(contains(s.message(), SocketAddress(id.value().rootAddr).toString()));
  }
  EXPECT_TRUE(rootsEnd(10));
}

TEST_F(BootstrapTest, InconsistentRanksAreReported) {
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  // Both threads claim rank 0.
  std::vector<Status> dup = runRanks(2, [&](int) -> Status {
    return Bootstrap::init(id.value(), 0, 2, quickOptions(2)).status();
  });
  for (const Status& s : dup) {
    EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.message();
    EXPECT_TRUE(contains(s.message(), "twice"));
  }

  id = createUniqueId();
  ASSERT_TRUE(id.isOk());
  std::vector<Status> mismatch = runRanks(2, [&](int rank) -> Status {
    return Bootstrap::init(id.value(), rank, 2 + rank, quickOptions(2)).status();
  });
  for (const Status& s : mismatch) {
    EXPECT_EQ(s.code(), Code::kInvalidUsage) << s.message();
    EXPECT_TRUE(contains(s.message(), "same nranks"));
  }

  EXPECT_EQ(Bootstrap::init(id.value(), 3, 2, quickOptions()).status().code(),
            Code::kInvalidArgument);
  // Roots of failed rendezvous linger to answer late ranks, then end.
  EXPECT_TRUE(rootsEnd(10));
}

TEST_F(BootstrapTest, UnreachableRootIsNamed) {
  UniqueIdInfo id = loopbackId(freeLoopbackPort());
  Result<std::unique_ptr<Bootstrap>> b = Bootstrap::init(id, 1, 2, quickOptions(0.5));
  ASSERT_FALSE(b.isOk());
  EXPECT_EQ(b.status().code(), Code::kRemoteError) << b.status().message();
  EXPECT_TRUE(contains(b.status().message(), SocketAddress(id.rootAddr).toString()));
  EXPECT_TRUE(contains(b.status().message(), "could not reach the rendezvous root"));
}

// A communicator made from another: the rank that made its id gives up before joining, and
// abandons the root it hosts. The rank already waiting there gets the reason at once (not at
// its init timeout), and a rank arriving later, knowing that the root was listening before the
// id was handed out (rootListening), fails at once on the refused connection.
TEST_F(BootstrapTest, AnAbandonedRootFailsItsRanksAtOnce) {
  Result<UniqueIdInfo> id = createFreshUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  BootstrapOptions o = quickOptions(60);
  o.rootListening = true;
  const auto start = std::chrono::steady_clock::now();
  std::vector<Status> early = runRanks(1, [&](int) -> Status {
    std::thread giveUp([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      abandonRendezvousRoot(id.value(), remoteError("rank 0 gave up: its peer died"));
    });
    Status s = Bootstrap::init(id.value(), 1, 3, o).status();
    giveUp.join();
    return s;
  });
  EXPECT_EQ(early[0].code(), Code::kRemoteError) << early[0].message();
  EXPECT_TRUE(contains(early[0].message(), "rank 0 gave up: its peer died")) << early[0].message();
  ASSERT_TRUE(rootsEnd(10));
  Status late = Bootstrap::init(id.value(), 2, 3, o).status();
  EXPECT_EQ(late.code(), Code::kRemoteError) << late.message();
  EXPECT_TRUE(contains(late.message(), "is gone")) << late.message();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
  // Abandoning a root that is not here, or no longer, does nothing.
  abandonRendezvousRoot(id.value(), remoteError("again"));
  abandonRendezvousRoot(loopbackId(1), remoteError("elsewhere"));
}

TEST_F(BootstrapTest, CommIdFromEnvironment) {
  const int port = freeLoopbackPort();
  ASSERT_NE(port, 0);
  const std::string commId = "127.0.0.1:" + std::to_string(port);
  setenv("CHORUS_COMM_ID", commId.c_str(), 1);
  ASSERT_TRUE(commIdFromEnvironment());
  Result<UniqueIdInfo> fromCreate = createUniqueId();
  ASSERT_TRUE(fromCreate.isOk()) << fromCreate.status().message();
  EXPECT_EQ(SocketAddress(fromCreate.value().rootAddr).toString(), commId);

  // Twice: rank 0 must be able to host the next rendezvous at the same address.
  const int nranks = 3;
  for (int round = 0; round < 2; ++round) {
    std::vector<Status> results = runRanks(nranks, [&](int rank) -> Status {
      Result<UniqueIdInfo> id = uniqueIdFromEnvironment();
      if (!id.isOk()) return id.status();
      if (id.value().secret != fromCreate.value().secret ||
          id.value().magic != fromCreate.value().magic)
        return internalError("ids derived from the environment differ");
      auto b = Bootstrap::init(id.value(), rank, nranks, quickOptions());
      if (!b.isOk()) return b.status();
      return exercise(*b.value(), 2);
    });
    for (int r = 0; r < nranks; ++r)
      EXPECT_TRUE(results[static_cast<size_t>(r)].isOk())
          << "round " << round << " rank " << r << ": "
          << results[static_cast<size_t>(r)].message();
  }

  setenv("CHORUS_COMM_ID", "no-port-here", 1);
  Result<UniqueIdInfo> bad = uniqueIdFromEnvironment();
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(bad.status().message(), "CHORUS_COMM_ID"));
  unsetenv("CHORUS_COMM_ID");
  EXPECT_TRUE(rootsEnd(10));
}

TEST_F(BootstrapTest, AbortEndsAWaitingRecv) {
  Result<UniqueIdInfo> id = createUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().message();
  AbortFlag abort;
  std::atomic<bool> waiting{false};
  std::atomic<bool> rank0Done{false};
  double elapsed = -1;
  std::vector<Status> results = runRanks(2, [&](int rank) -> Status {
    BootstrapOptions o = quickOptions(20, 60);
    o.abort = &abort;
    auto b = Bootstrap::init(id.value(), rank, 2, o);
    if (!b.isOk()) return b.status();
    if (rank == 0) {
      int value = 0;
      waiting.store(true);
      Status st = b.value()->recv(1, 77, &value, sizeof(value));  // never sent
      rank0Done.store(true);
      return st;
    }
    while (!waiting.load()) std::this_thread::yield();
    auto start = std::chrono::steady_clock::now();
    abort.raise();
    while (!rank0Done.load()) std::this_thread::yield();
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Status::ok();
  });
  EXPECT_FALSE(results[0].isOk());
  EXPECT_TRUE(contains(results[0].message(), "aborted"));
  EXPECT_TRUE(contains(results[0].message(), "rank 1"));
  EXPECT_TRUE(results[1].isOk()) << results[1].message();
  EXPECT_LT(elapsed, 2.0);
}

TEST_F(BootstrapTest, InterfaceFilterMatchingNothingIsAnError) {
  setenv("CHORUS_SOCKET_IFNAME", "nosuchif", 1);
  Result<std::vector<InterfaceAddress>> found = findInterfaces();
  EXPECT_EQ(found.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(found.status().message(), "CHORUS_SOCKET_IFNAME=\"nosuchif\""));
  EXPECT_TRUE(contains(found.status().message(), "lo"));

  setenv("CHORUS_SOCKET_IFNAME", "=lo", 1);
  found = findInterfaces();
  ASSERT_TRUE(found.isOk()) << found.status().message();
  EXPECT_EQ(found.value().front().name, "lo");
}

InterfaceAddress fakeInterface(const char* name, const char* address, bool loopback = false) {
  InterfaceAddress n;
  n.name = name;
  Result<SocketAddress> a = SocketAddress::parse(address);
  EXPECT_TRUE(a.isOk()) << address;
  n.addr = a.value().storage();
  n.netmask = n.addr;
  n.family = a.value().family();
  n.loopback = loopback;
  return n;
}

TEST(InterfaceSelection, Rules) {
  std::vector<InterfaceAddress> all = {
      fakeInterface("lo", "127.0.0.1:0", true), fakeInterface("docker0", "172.17.0.1:0"),
      fakeInterface("eth0", "[fd00::2]:0"),     fakeInterface("eth0", "10.0.0.2:0"),
      fakeInterface("ib0", "[fd01::2]:0"),      fakeInterface("eth1", "10.1.0.2:0"),
  };
  auto names = [](const Result<std::vector<InterfaceAddress>>& r) {
    std::string out;
    for (const InterfaceAddress& n : r.value()) out += n.name + (n.family == AF_INET ? "4 " : "6 ");
    return out;
  };
  auto sel = [&](const char* ifname, const char* family) {
    return selectInterfaces(all, ifname, "CHORUS_SOCKET_IFNAME", family, "CHORUS_SOCKET_FAMILY");
  };
  EXPECT_EQ(names(sel("", "")), "eth04 eth14 ib06 ");
  EXPECT_EQ(names(sel("", "AF_INET6")), "eth06 ib06 ");
  EXPECT_EQ(names(sel("eth", "")), "eth04 eth14 ");
  EXPECT_EQ(names(sel("=eth0", "")), "eth04 ");
  EXPECT_EQ(names(sel("^eth,docker", "")), "ib06 lo4 ");
  EXPECT_EQ(names(sel("^=eth0", "")), "docker04 eth14 ib06 lo4 ");
  EXPECT_EQ(sel("=eth", "").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(sel("", "AF_UNIX").status().code(), Code::kInvalidArgument);

  std::vector<InterfaceAddress> onlyLo = {fakeInterface("lo", "127.0.0.1:0", true)};
  Result<std::vector<InterfaceAddress>> fallback = selectInterfaces(onlyLo, "", "X", "", "Y");
  ASSERT_TRUE(fallback.isOk());
  EXPECT_EQ(fallback.value().front().name, "lo");
}

TEST(SocketAddressTest, ParseAndPrint) {
  Result<SocketAddress> a = SocketAddress::parse("1.2.3.4:5678");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(a.value().toString(), "1.2.3.4:5678");
  EXPECT_EQ(a.value().port(), 5678);
  a.value().setPort(1);
  EXPECT_EQ(a.value().toString(), "1.2.3.4:1");
  Result<SocketAddress> b = SocketAddress::parse("[::1]:5678");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b.value().toString(), "[::1]:5678");
  EXPECT_TRUE(b.value().isLoopback());
  Result<SocketAddress> c = SocketAddress::parse("localhost:80");
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(c.value().isLoopback());
  EXPECT_NE(SocketAddress::parse("1.2.3.4:5678").value(),
            SocketAddress::parse("1.2.3.4:5679").value());
  for (const char* bad : {"1.2.3.4", "1.2.3.4:", "::1:80", ":80", "1.2.3.4:99999", "[::1]80"})
    EXPECT_EQ(SocketAddress::parse(bad).status().code(), Code::kInvalidArgument) << bad;
}

}  // namespace
}  // namespace chorus
