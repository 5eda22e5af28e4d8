// Connector: a one-way FIFO of slots in memory both ends can reach. The sender waits until a
// slot is free, fills it, and publishes tail+1 (release); the receiver waits for tail > head,
// consumes the slot and publishes head+1. Counters only grow, so a stale value is never taken
// for a fresh one. For a network peer the proxy thread is the far end of a local FIFO.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "common/wait.h"

namespace chorus {

constexpr int kMaxFifoSlots = 64;

// The link between local FIFOs and the proxy thread at their far end (network transports).
// Threads that post to or wait on such a FIFO drive the proxy's progress themselves when it is
// free, so a message does not wait for the proxy thread to be scheduled; the proxy sleeps when
// idle and is woken through the doorbell. Only FIFOs in local memory point to one.
class ProxyLink {
 public:
  virtual ~ProxyLink() = default;
  // One non-blocking pass over the proxy's connections, if no other thread is in one.
  virtual void tryProgress() = 0;
  // The same pass; false when it left nothing that a sleeping proxy does not already watch
  // (no unsent data, no socket missing from its poll set), so that it need not be woken.
  virtual bool progressNeedsProxy() = 0;
  // Called after a counter changed: lets the proxy act on it (now, or by waking it).
  void kick() {
    if (!progressNeedsProxy()) return;
    // Orders the counter store (and this pass) before the sleeping flag load, pairing with the
    // proxy's flag store before its last look at the FIFOs.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_relaxed) != 0) ring();
  }
  void ring();

  std::atomic<uint32_t> sleeping{0};
  int doorbellFd = -1;  // eventfd the sleeping proxy polls
};
constexpr size_t kCacheLine = 64;

// Shared layout at the start of the FIFO memory; slot data follows at dataOffset().
struct FifoHeader {
  alignas(kCacheLine) std::atomic<uint64_t> tail;  // slots published by the sender
  std::atomic<uint32_t> tailSleepers;              // receivers asleep waiting for tail
  alignas(kCacheLine) std::atomic<uint64_t> head;  // slots released by the receiver
  std::atomic<uint32_t> headSleepers;              // senders asleep waiting for head
  alignas(kCacheLine) uint32_t nslots;
  uint32_t slotBytes;
  uint64_t magic;
  // Set by a proxy when the sending peer closed its connection cleanly: nothing more will come.
  std::atomic<uint32_t> peerClosed;
  // The proxy at the far end of a local FIFO, or null.
  ProxyLink* proxy;
  // Bytes held by each slot, written before tail is published.
  uint64_t slotSize[kMaxFifoSlots];
};
static_assert(sizeof(std::atomic<uint64_t>) == 8, "lock-free 64-bit counters required");

struct FifoGeometry {
  uint32_t nslots;
  uint32_t slotBytes;
  static size_t dataOffset() { return (sizeof(FifoHeader) + 4095) & ~size_t(4095); }
  size_t totalBytes() const { return dataOffset() + size_t(nslots) * slotBytes; }
};

// Validates and clamps requested sizes (BUFFSIZE/STEPS) into a geometry both ends accept.
Result<FifoGeometry> fifoGeometry(int64_t buffBytes, int64_t nslots);

// Writes a fresh header into memory of at least geometry.totalBytes() bytes.
void fifoInit(void* memory, const FifoGeometry& geometry);
// Checks a header mapped from another rank.
Status fifoCheck(const void* memory, size_t mappedBytes);

// The sending end.
class SendConnector {
 public:
  SendConnector() = default;
  explicit SendConnector(void* memory);
  bool valid() const { return header_ != nullptr; }
  size_t slotBytes() const { return slotBytes_; }

  // Waits for a free slot; returns its address, or nullptr with *failure set.
  void* acquire(Waiter& waiter, Code* failure) {
    while (tail_ - cachedHead_ >= nslots_) {
      cachedHead_ = header_->head.load(std::memory_order_acquire);
      if (tail_ - cachedHead_ < nslots_) break;
      if (proxy_ != nullptr) proxy_->tryProgress();
      Code c = waiter.pause(header_->head, cachedHead_, header_->headSleepers);
      if (c != Code::kInProgress) {
        *failure = c;
        return nullptr;
      }
    }
    return data_ + (tail_ % nslots_) * slotBytes_;
  }
  // A free slot if there is one now, else nullptr (for loops that drive several FIFOs).
  void* tryAcquire() {
    if (tail_ - cachedHead_ >= nslots_) {
      cachedHead_ = header_->head.load(std::memory_order_acquire);
      if (tail_ - cachedHead_ >= nslots_) {
        if (proxy_ != nullptr) proxy_->tryProgress();
        return nullptr;
      }
    }
    return data_ + (tail_ % nslots_) * slotBytes_;
  }
  // Publishes the slot returned by acquire holding `bytes` bytes.
  void post(size_t bytes) {
    header_->slotSize[tail_ % nslots_] = bytes;
    ++tail_;
    header_->tail.store(tail_, std::memory_order_release);
    wakeSleepers(header_->tail, header_->tailSleepers);
    if (proxy_ != nullptr) proxy_->kick();
  }

 private:
  FifoHeader* header_ = nullptr;
  ProxyLink* proxy_ = nullptr;
  char* data_ = nullptr;
  uint64_t tail_ = 0;
  uint64_t cachedHead_ = 0;
  uint32_t nslots_ = 0;
  size_t slotBytes_ = 0;
};

// The receiving end.
class RecvConnector {
 public:
  RecvConnector() = default;
  explicit RecvConnector(void* memory);
  bool valid() const { return header_ != nullptr; }
  size_t slotBytes() const { return slotBytes_; }

  // Waits for a filled slot; returns its address and size, or nullptr with *failure set
  // (kRemoteError also when the peer closed the connection: see peerClosed()).
  const void* wait(Waiter& waiter, size_t* bytes, Code* failure) {
    while (cachedTail_ <= head_) {
      cachedTail_ = header_->tail.load(std::memory_order_acquire);
      if (cachedTail_ > head_) break;
      if (header_->peerClosed.load(std::memory_order_acquire) != 0) {
        cachedTail_ = header_->tail.load(std::memory_order_acquire);
        if (cachedTail_ > head_) break;
        *failure = Code::kRemoteError;
        return nullptr;
      }
      if (proxy_ != nullptr) proxy_->tryProgress();
      Code c = waiter.pause(header_->tail, cachedTail_, header_->tailSleepers);
      if (c != Code::kInProgress) {
        *failure = c;
        return nullptr;
      }
    }
    *bytes = header_->slotSize[head_ % nslots_];
    return data_ + (head_ % nslots_) * slotBytes_;
  }
  // A filled slot if there is one now, else nullptr (for loops that drive several FIFOs).
  const void* tryWait(size_t* bytes) {
    if (cachedTail_ <= head_) {
      cachedTail_ = header_->tail.load(std::memory_order_acquire);
      if (cachedTail_ <= head_) {
        if (proxy_ != nullptr) proxy_->tryProgress();
        return nullptr;
      }
    }
    *bytes = header_->slotSize[head_ % nslots_];
    return data_ + (head_ % nslots_) * slotBytes_;
  }
  bool peerClosed() const { return header_->peerClosed.load(std::memory_order_acquire) != 0; }
  // Releases the slot returned by wait.
  void release() {
    ++head_;
    header_->head.store(head_, std::memory_order_release);
    wakeSleepers(header_->head, header_->headSleepers);
    if (proxy_ != nullptr) proxy_->kick();
  }

 private:
  FifoHeader* header_ = nullptr;
  ProxyLink* proxy_ = nullptr;
  const char* data_ = nullptr;
  uint64_t head_ = 0;
  uint64_t cachedTail_ = 0;
  uint32_t nslots_ = 0;
  size_t slotBytes_ = 0;
};

}  // namespace chorus
