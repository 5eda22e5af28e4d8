// The connector FIFO: ordering, back-pressure when all slots are full, sizes carried per slot,
// counters that keep growing across wrap-around, bounded waits (timeout and abort), and the
// drive of a network FIFO's proxy by the threads that wait on it.
#include <gtest/gtest.h>

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "transport/connector.h"

namespace chorus {
namespace {

struct Fifo {
  explicit Fifo(FifoGeometry g) : geometry(g) {
    memory = aligned_alloc(4096, (g.totalBytes() + 4095) & ~size_t(4095));
    fifoInit(memory, g);
  }
  ~Fifo() { free(memory); }
  FifoGeometry geometry;
  void* memory;
};

TEST(Connector, GeometryValidatesItsInputs) {
  EXPECT_FALSE(fifoGeometry(1 << 20, 1).isOk());
  EXPECT_FALSE(fifoGeometry(1 << 20, kMaxFifoSlots + 1).isOk());
  EXPECT_FALSE(fifoGeometry(100, 4).isOk());
  Result<FifoGeometry> g = fifoGeometry(1 << 20, 8);
  ASSERT_TRUE(g.isOk());
  EXPECT_EQ(g.value().nslots, 8u);
  EXPECT_EQ(g.value().slotBytes, (1u << 20) / 8);
  EXPECT_EQ(g.value().slotBytes % 128, 0u);
}

TEST(Connector, CheckRejectsForeignMemory) {
  std::vector<char> junk(1 << 16, 0x5a);
  EXPECT_FALSE(fifoCheck(junk.data(), junk.size()).isOk());
  Fifo f(fifoGeometry(1 << 16, 4).value());
  EXPECT_TRUE(fifoCheck(f.memory, f.geometry.totalBytes()).isOk());
  EXPECT_FALSE(fifoCheck(f.memory, f.geometry.totalBytes() - 1).isOk());
}

TEST(Connector, FullFifoBlocksTheSenderUntilTimeout) {
  Fifo f(fifoGeometry(4 * 4096, 4).value());
  SendConnector send(f.memory);
  for (int i = 0; i < 4; ++i) {
    Waiter w(1, nullptr);
    Code failure = Code::kSuccess;
    ASSERT_NE(send.acquire(w, &failure), nullptr);
    send.post(8);
  }
  Waiter w(0.05, nullptr, 10);
  Code failure = Code::kSuccess;
  EXPECT_EQ(send.acquire(w, &failure), nullptr);
  EXPECT_EQ(failure, Code::kRemoteError);
}

TEST(Connector, EmptyFifoWaitEndsOnAbort) {
  Fifo f(fifoGeometry(4 * 4096, 4).value());
  RecvConnector recv(f.memory);
  AbortFlag abort;
  abort.raise();
  Waiter w(100, &abort, 10);
  size_t bytes = 0;
  Code failure = Code::kSuccess;
  EXPECT_EQ(recv.wait(w, &bytes, &failure), nullptr);
  EXPECT_EQ(failure, Code::kInvalidUsage);
}

// A producer thread streams many more messages than there are slots; the consumer sees every
// message once, in order, with its own size.
TEST(Connector, StreamsInOrderAcrossWrapAround) {
  Fifo f(fifoGeometry(4 * 4096, 4).value());
  const int kMessages = 5000;
  std::thread producer([&] {
    SendConnector send(f.memory);
    for (int m = 0; m < kMessages; ++m) {
      Waiter w(30, nullptr, 100);
      Code failure = Code::kSuccess;
      void* slot = send.acquire(w, &failure);
      ASSERT_NE(slot, nullptr);
      size_t n = 1 + m % 1000;
      memset(slot, m & 0xff, n);
      send.post(n);
    }
  });
  RecvConnector recv(f.memory);
  for (int m = 0; m < kMessages; ++m) {
    Waiter w(30, nullptr, 100);
    size_t bytes = 0;
    Code failure = Code::kSuccess;
    const auto* slot = static_cast<const unsigned char*>(recv.wait(w, &bytes, &failure));
    ASSERT_NE(slot, nullptr);
    ASSERT_EQ(bytes, size_t(1 + m % 1000));
    ASSERT_EQ(slot[0], m & 0xff);
    ASSERT_EQ(slot[bytes - 1], m & 0xff);
    recv.release();
  }
  producer.join();
  const auto* h = static_cast<const FifoHeader*>(f.memory);
  EXPECT_EQ(h->tail.load(), uint64_t(kMessages));
  EXPECT_EQ(h->head.load(), uint64_t(kMessages));
}

// A proxy that records what the connectors ask of it.
struct FakeProxy : ProxyLink {
  FakeProxy() { doorbellFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
  ~FakeProxy() override { close(doorbellFd); }
  void tryProgress(const void* fifo) override {
    ++focused;
    lastFifo = fifo;
    maxDrivers = std::max(maxDrivers.load(), drivers.load());
  }
  void tryProgressAll() override { ++everything; }
  bool progressNeedsProxy() override { return false; }
  uint64_t rings() {
    uint64_t n = 0;
    return read(doorbellFd, &n, sizeof(n)) == sizeof(n) ? n : 0;
  }
  std::atomic<int> focused{0}, everything{0};
  std::atomic<uint32_t> maxDrivers{0};
  const void* lastFifo = nullptr;
};

TEST(Connector, WaitersDriveTheProxyAndHandItBackBeforeSleeping) {
  Fifo f(fifoGeometry(4 * 4096, 4).value());
  FakeProxy proxy;
  static_cast<FifoHeader*>(f.memory)->proxy = &proxy;
  SendConnector send(f.memory);
  RecvConnector recv(f.memory);
  ASSERT_EQ(recv.proxy(), &proxy);

  // Data already there: no poll, no drive.
  send.post(8);
  {
    Waiter w(1, nullptr);
    size_t n = 0;
    Code failure = Code::kSuccess;
    ASSERT_NE(recv.wait(w, &n, &failure), nullptr);
    recv.release();
  }
  EXPECT_EQ(proxy.focused.load() + proxy.everything.load(), 0);
  EXPECT_EQ(proxy.driveEpoch.load(), 0u);

  // A wait that spins, yields and then sleeps: it drives while it polls (its own FIFO, every
  // 64th poll all of them), and before sleeping lets go and rings a proxy that sleeps leaving
  // the sockets to the drivers.
  proxy.sleeping.store(ProxyLink::kAsleepDriven);
  std::thread poster([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    send.post(16);
  });
  Waiter w(5, nullptr, 200);
  w.setYieldMicros(2000);
  size_t n = 0;
  Code failure = Code::kSuccess;
  ASSERT_NE(recv.wait(w, &n, &failure), nullptr);
  poster.join();
  EXPECT_EQ(n, 16u);
  recv.release();
  EXPECT_EQ(proxy.maxDrivers.load(), 1u);
  EXPECT_EQ(proxy.lastFifo, f.memory);
  EXPECT_GT(proxy.focused.load(), 0);
  EXPECT_GT(proxy.everything.load(), 0);
  EXPECT_EQ(proxy.driveEpoch.load(), 1u);
  EXPECT_EQ(proxy.watchRequests.load(), 1u);
  EXPECT_EQ(proxy.drivers.load(), 0u);
  EXPECT_EQ(proxy.rings(), 1u);

  // A sender waiting for a free slot reads every socket, and lets go when its wait fails.
  for (int i = 0; i < 4; ++i) {
    Waiter wa(1, nullptr);
    ASSERT_NE(send.acquire(wa, &failure), nullptr);
    send.post(8);
  }
  const int before = proxy.everything.load();
  Waiter full(0.02, nullptr, 10);
  EXPECT_EQ(send.acquire(full, &failure), nullptr);
  EXPECT_EQ(failure, Code::kRemoteError);
  EXPECT_GT(proxy.everything.load(), before);
  EXPECT_EQ(proxy.drivers.load(), 0u);
  EXPECT_EQ(proxy.driveEpoch.load(), 2u);
}

}  // namespace
}  // namespace chorus
