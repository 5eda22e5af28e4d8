// The connector FIFO: ordering, back-pressure when all slots are full, sizes carried per slot,
// counters that keep growing across wrap-around, and bounded waits (timeout and abort).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace chorus
