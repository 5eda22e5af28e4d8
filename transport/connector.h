// Connector: a one-way FIFO of slots in memory both ends can reach. The sender waits until a
// slot is free, fills it, and publishes tail+1 (release); the receiver waits for tail > head,
// consumes the slot and publishes head+1. Counters only grow, so a stale value is never taken
// for a fresh one. For a network peer the proxy thread is the far end of a local FIFO.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "common/status.h"
#include "common/wait.h"

namespace chorus {

constexpr int kMaxFifoSlots = 64;
constexpr size_t kPeerErrorBytes = 256;
// CallTag::what of a failure notice: the message a failed or aborted communicator sends on
// each network connection before closing it, holding why (text, at most kPeerErrorBytes - 1
// bytes), which the receiver keeps for its error message instead of a slot. Above every real
// tag.
constexpr uint32_t kFailNoticeKind = 0xfa110000u;

// Memory of the party at one end of a connector (a device FIFO's slots) that a network
// transport may send from or receive into in place of its own FIFO data (placeSlots): the
// party then moves only counters and sizes, not bytes.
struct SlotMemory {
  char* data = nullptr;  // slot i at data + i * slotBytes
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
  bool device = false;  // GPU memory (registered as NCCL_PTR_CUDA) rather than host memory
  int dmabufFd = -1;    // a dma-buf holding it, registered as such where the network takes them
  uint64_t dmabufOffset = 0;  // of data within that dma-buf
};

// The link between local FIFOs and the proxy thread at their far end (network transports).
// Threads that post to or wait on such a FIFO drive the proxy's progress themselves when it is
// free, so a message does not wait for the proxy thread to be scheduled; the proxy sleeps when
// idle and is woken through the doorbell. Only FIFOs in local memory point to one.
class ProxyLink {
 public:
  virtual ~ProxyLink() = default;
  // One non-blocking pass, if no other thread is in one, over the sending FIFOs with unsent
  // data and the receiving FIFO recvFifo (the one the caller waits on; null: none). Other
  // receiving FIFOs are filled by those who wait on them, or by the proxy.
  virtual void tryProgress(const void* recvFifo) = 0;
  // The same over every FIFO: for a sender waiting for a free slot, whose peer may in turn wait
  // for this rank to read what it sent (a cycle that the proxy would otherwise break only at
  // its next look).
  virtual void tryProgressAll() = 0;
  // A pass over the sending FIFOs; false when it left nothing that a sleeping proxy does not
  // already watch (no unsent data, no socket missing from its poll set), so that it need not
  // be woken.
  virtual bool progressNeedsProxy() = 0;
  // Called after a FIFO counter changed: lets the proxy act on it (now, or by waking it).
  void kick() {
    if (!progressNeedsProxy()) return;
    // Orders the counter store (and this pass) before the sleeping flag load, pairing with the
    // proxy's flag store before its last look at the FIFOs.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_relaxed) != kAwake) ring();
  }
  void ring();
  // Puts the data of the connection whose local FIFO is `fifo` in `mem` instead of the FIFO's
  // own, before anything moved on it: true when the transport took it, false when it keeps
  // its own data (a transport that does not place, memory its network cannot reach, or mem
  // null: then only the receives held for a placement are let go, see holdReceives).
  virtual Result<bool> placeSlots(const void* fifo, const SlotMemory* mem) {
    (void)fifo;
    (void)mem;
    return false;
  }

  // The memory placed for `fifo`'s connection goes away: the transport stops using it (its
  // receives posted into it end with the connection). Only when nothing more moves on it.
  virtual void retireSlots(const void* fifo) { (void)fifo; }

  // Drives. A thread that polls the proxy's FIFOs in a wait loop moves the data itself; while
  // one does (or did since the proxy last slept), the proxy sleeps without watching the
  // receiving sockets, so that an arriving message wakes nobody (a wake-up costs more than the
  // message). It looks again within a short timeout, and a driver that is about to sleep in
  // the kernel hands the sockets back to it at once (stopDriving(true)).
  void startDriving() {
    drivers.fetch_add(1, std::memory_order_seq_cst);
    driveEpoch.fetch_add(1, std::memory_order_relaxed);
  }
  void stopDriving(bool willSleep) {
    if (willSleep) watchRequests.fetch_add(1, std::memory_order_seq_cst);
    drivers.fetch_sub(1, std::memory_order_seq_cst);
    if (willSleep && sleeping.load(std::memory_order_seq_cst) == kAsleepDriven) ring();
  }

  static constexpr uint32_t kAwake = 0;
  static constexpr uint32_t kAsleep = 1;        // watching every socket that can move data
  static constexpr uint32_t kAsleepDriven = 2;  // receiving sockets left to the drivers
  std::atomic<uint32_t> sleeping{kAwake};
  std::atomic<uint32_t> drivers{0};
  std::atomic<uint32_t> driveEpoch{0};     // drives started so far
  std::atomic<uint32_t> watchRequests{0};  // drivers that went to sleep so far
  int doorbellFd = -1;                     // eventfd the sleeping proxy polls

  // How long the proxy sleeps with the receiving connections left to driving threads before it
  // looks whether they still drive. Only data nobody waits for waits this long (a driver about
  // to sleep wakes the proxy); each look is a wake-up that takes a core from the drivers (8 B
  // all-reduce over TCP, same-run A/B: 1.5-3 us less per call with 10 ms than with 1 ms).
  static constexpr int kDrivenSleepMs = 20;

  // Once per sleep of the proxy, after it raised kAsleepDriven and found nothing to move:
  // whether it leaves the receiving connections to the drivers, as it does while a thread
  // drives or did since its last sleep (collectives called back to back), unless a driver went
  // to sleep since.
  bool receivesLeftToDrivers() {
    const uint32_t epoch = driveEpoch.load(std::memory_order_seq_cst);
    const uint32_t requests = watchRequests.load(std::memory_order_seq_cst);
    const bool left = requests == lastRequests_ &&
                      (drivers.load(std::memory_order_seq_cst) > 0 || epoch != lastEpoch_);
    lastEpoch_ = epoch;
    lastRequests_ = requests;
    return left;
  }

 private:
  uint32_t lastEpoch_ = 0;  // the drive and watch-request counts at the proxy's last sleep
  uint32_t lastRequests_ = 0;
};

// A wait loop's drive of the proxy at the far end of the FIFOs it polls: taken by hold (at the
// first poll that finds nothing; again is a no-op), let go when the wait ends, or just before
// the waiter given to hold sleeps in the kernel.
class ProxyDrive {
 public:
  ProxyDrive() = default;
  ProxyDrive(const ProxyDrive&) = delete;
  ProxyDrive& operator=(const ProxyDrive&) = delete;
  ~ProxyDrive() {
    if (proxy_ == nullptr) return;
    if (waiter_ != nullptr) waiter_->setBeforeSleep(nullptr, nullptr);
    proxy_->stopDriving(false);
  }
  void hold(ProxyLink* proxy, Waiter* waiter) {
    if (proxy_ != nullptr || released_) return;
    proxy_ = proxy;
    waiter_ = waiter;
    proxy->startDriving();
    if (waiter != nullptr) waiter->setBeforeSleep(&ProxyDrive::beforeSleep, this);
  }

 private:
  static void beforeSleep(void* self) {
    auto* d = static_cast<ProxyDrive*>(self);
    d->proxy_->stopDriving(true);
    d->proxy_ = nullptr;
    d->released_ = true;
  }
  ProxyLink* proxy_ = nullptr;
  Waiter* waiter_ = nullptr;
  bool released_ = false;
};
constexpr size_t kCacheLine = 64;

// The call a slot belongs to, written by the sender beside the slot's size and compared by the
// receiver with its own call, so that ranks which make different calls fail with both calls
// named instead of hanging or mixing data. `what` 0 means untagged (a sender that does not say).
struct CallTag {
  uint64_t seq = 0;    // collectives: the communicator's call number; send/recv: the pair's
  uint64_t count = 0;  // elements (send/recv: bytes)
  uint32_t what = 0;   // kind | type << 8 | operation << 16, from the executor (call_tag.h)
  int32_t root = -1;   // broadcast, reduce, gather, scatter (else -1)
  bool operator==(const CallTag& o) const {
    return seq == o.seq && count == o.count && what == o.what && root == o.root;
  }
  bool operator!=(const CallTag& o) const { return !(*this == o); }
};
static_assert(sizeof(CallTag) == 24, "a tag is three words on the wire");

// What the sender writes about a slot before publishing it; network transports carry it in the
// message header.
struct SlotInfo {
  uint64_t bytes;
  CallTag tag;
};
static_assert(sizeof(SlotInfo) == 32, "a slot's info is four words on the wire");

// Shared layout at the start of the FIFO memory; slot data follows at dataOffset().
struct FifoHeader {
  // Each counter and each sleepers flag on a line of its own: the writer of a counter looks at
  // its flag after every store, which on the line the other end polls costs a miss.
  alignas(kCacheLine) std::atomic<uint64_t> tail;          // slots published by the sender
  alignas(kCacheLine) std::atomic<uint32_t> tailSleepers;  // receivers asleep waiting for tail
  alignas(kCacheLine) std::atomic<uint64_t> head;          // slots released by the receiver
  alignas(kCacheLine) std::atomic<uint32_t> headSleepers;  // senders asleep waiting for head
  alignas(kCacheLine) uint32_t nslots;
  uint32_t slotBytes;
  uint64_t magic;
  // Set by a proxy when the sending peer closed its connection cleanly: nothing more will come.
  std::atomic<uint32_t> peerClosed;
  // Written before peerClosed when the peer said why it closed (its communicator failed):
  // NUL-terminated text, empty otherwise.
  char peerError[kPeerErrorBytes];
  // The proxy at the far end of a local FIFO, or null.
  ProxyLink* proxy;
  // Each slot's size and call, written before tail is published.
  SlotInfo slots[kMaxFifoSlots];
};
static_assert(sizeof(std::atomic<uint64_t>) == 8, "lock-free 64-bit counters required");

// A network transport's receiving FIFO whose far end is gone: why (a peer's failure notice, the
// network's error; empty: it just left) is kept for the waiters' errors, and they wake.
inline void closeFromPeer(FifoHeader* fifo, const std::string& why) {
  snprintf(fifo->peerError, kPeerErrorBytes, "%s", why.c_str());
  fifo->peerClosed.store(1, std::memory_order_release);
  wakeSleepers(fifo->tail, fifo->tailSleepers);
}

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

// A FIFO in this process's memory whose far end is a proxy (network transports): page-aligned,
// initialised, with proxy set; *header and *data point into it. Throws std::bad_alloc.
struct FifoMemoryFree {
  void operator()(void* p) const { free(p); }
};
using FifoMemory = std::unique_ptr<void, FifoMemoryFree>;
FifoMemory allocLocalFifo(const FifoGeometry& geometry, ProxyLink* proxy, FifoHeader** header,
                          char** data);
// Checks a header mapped from another rank.
Status fifoCheck(const void* memory, size_t mappedBytes);

// The sending end.
class SendConnector {
 public:
  SendConnector() = default;
  explicit SendConnector(void* memory);
  bool valid() const { return header_ != nullptr; }
  size_t slotBytes() const { return slotBytes_; }
  ProxyLink* proxy() const { return proxy_; }

  // Waits for a free slot; returns its address, or nullptr with *failure set.
  void* acquire(Waiter& waiter, Code* failure) {
    ProxyDrive drive;
    while (tail_ - cachedHead_ >= nslots_) {
      cachedHead_ = header_->head.load(std::memory_order_acquire);
      if (tail_ - cachedHead_ < nslots_) break;
      if (proxy_ != nullptr) {
        drive.hold(proxy_, &waiter);
        proxy_->tryProgressAll();
      }
      Code c = waiter.pause(header_->head, cachedHead_, header_->headSleepers);
      if (c != Code::kInProgress) {
        *failure = c;
        return nullptr;
      }
    }
    return data_ + (tail_ % nslots_) * slotBytes_;
  }
  // Whether acquire would return at once (one look at the counter, no progress driven).
  bool hasRoom() {
    if (tail_ - cachedHead_ < nslots_) return true;
    cachedHead_ = header_->head.load(std::memory_order_acquire);
    return tail_ - cachedHead_ < nslots_;
  }
  // A free slot if there is one now, else nullptr (for loops that drive several FIFOs).
  void* tryAcquire() {
    if (tail_ - cachedHead_ >= nslots_) {
      cachedHead_ = header_->head.load(std::memory_order_acquire);
      if (tail_ - cachedHead_ >= nslots_) {
        if (proxy_ != nullptr) proxy_->tryProgressAll();
        return nullptr;
      }
    }
    return data_ + (tail_ % nslots_) * slotBytes_;
  }
  // For a party whose slots were placed (ProxyLink::placeSlots): the header, slots posted so
  // far and slots the far end has sent (each slot's memory is the party's again after that).
  const void* fifo() const { return header_; }
  uint32_t nslots() const { return nslots_; }
  uint64_t posted() const { return tail_; }
  uint64_t sent() const { return header_->head.load(std::memory_order_acquire); }
  // Whether the transport stopped sending (its send failed): no more slots will be sent.
  bool stopped() const { return header_->peerClosed.load(std::memory_order_acquire) != 0; }
  // Publishes the slot returned by acquire holding `bytes` bytes of the call `tag`.
  void post(size_t bytes, const CallTag& tag = CallTag{}) {
    SlotInfo& info = header_->slots[tail_ % nslots_];
    info.bytes = bytes;
    info.tag = tag;
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
  ProxyLink* proxy() const { return proxy_; }

  // Waits for a filled slot; returns its address and size, or nullptr with *failure set
  // (kRemoteError also when the peer closed the connection: see peerClosed()).
  const void* wait(Waiter& waiter, size_t* bytes, Code* failure) {
    ProxyDrive drive;
    uint32_t polls = 0;
    while (cachedTail_ <= head_) {
      cachedTail_ = header_->tail.load(std::memory_order_acquire);
      if (cachedTail_ > head_) break;
      if (header_->peerClosed.load(std::memory_order_acquire) != 0) {
        cachedTail_ = header_->tail.load(std::memory_order_acquire);
        if (cachedTail_ > head_) break;
        *failure = Code::kRemoteError;
        return nullptr;
      }
      if (proxy_ != nullptr) {
        drive.hold(proxy_, &waiter);
        // Mostly this FIFO's socket; now and then every one, so that a peer blocked on sending
        // to this rank on another FIFO moves on while this wait goes on.
        if ((++polls & 63) != 0)
          proxy_->tryProgress(header_);
        else
          proxy_->tryProgressAll();
      }
      Code c = waiter.pause(header_->tail, cachedTail_, header_->tailSleepers);
      if (c != Code::kInProgress) {
        *failure = c;
        return nullptr;
      }
    }
    *bytes = header_->slots[head_ % nslots_].bytes;
    return data_ + (head_ % nslots_) * slotBytes_;
  }
  // The call of the slot returned by wait or tryWait (until it is released).
  const CallTag& tag() const { return header_->slots[head_ % nslots_].tag; }
  // Whether wait would return at once (one look at the counter, no progress driven).
  bool ready() {
    if (cachedTail_ > head_) return true;
    cachedTail_ = header_->tail.load(std::memory_order_acquire);
    return cachedTail_ > head_;
  }
  // A filled slot if there is one now, else nullptr (for loops that drive several FIFOs).
  const void* tryWait(size_t* bytes) {
    if (cachedTail_ <= head_) {
      cachedTail_ = header_->tail.load(std::memory_order_acquire);
      if (cachedTail_ <= head_) {
        if (proxy_ != nullptr) proxy_->tryProgress(header_);
        return nullptr;
      }
    }
    *bytes = header_->slots[head_ % nslots_].bytes;
    return data_ + (head_ % nslots_) * slotBytes_;
  }
  // For a party whose slots were placed: the header, slots that arrived so far (driving the
  // proxy when none is new), the size of slot `index` among them, and slots released so far.
  // Such a party reads ahead of what it released.
  const void* fifo() const { return header_; }
  uint32_t nslots() const { return nslots_; }
  uint64_t arrived() {
    const uint64_t t = header_->tail.load(std::memory_order_acquire);
    if (t == cachedTail_ && proxy_ != nullptr) proxy_->tryProgress(header_);
    cachedTail_ = t;
    return t;
  }
  size_t bytesAt(uint64_t index) const { return header_->slots[index % nslots_].bytes; }
  uint64_t released() const { return head_; }
  bool peerClosed() const { return header_->peerClosed.load(std::memory_order_acquire) != 0; }
  // Why the peer closed, when it said (see FifoHeader::peerError); "" otherwise.
  const char* peerError() const { return peerClosed() ? header_->peerError : ""; }
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
