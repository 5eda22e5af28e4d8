// DirectRegion: one shared-memory segment per rank of a communicator whose ranks all live on one
// host, every segment mapped by every rank, so that a collective can read its peers' staged data
// in place instead of passing it along a FIFO. Used by the direct (one-shot and two-shot)
// all-reduce.
//
// Each segment holds two counters of the sequence numbers its rank has reached, then two
// staging buffers and two result buffers. A rank numbers the chunks of its direct collectives
// 1, 2, 3, ... (the same numbers on every rank, since all ranks make the same calls) and uses
// buffer `sequence % 2`. A buffer of sequence s - 2 is free when sequence s starts without any
// wait of its own: chunk s - 1 made this rank wait, directly or through a two-shot share, for
// every peer to stage s - 1, which a peer does only after it finished reading s - 2. (The
// symbolic test of the algorithm checks this under many schedules.) So publishing costs one
// counter store per chunk and a step, and reading a peer's buffer one wait.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/shm.h"
#include "common/status.h"
#include "common/wait.h"
#include "transport/connector.h"
#include "transport/transport.h"

namespace chorus {

// A sequence counter in shared memory with the word Waiter::pause uses to sleep on it. Futexes
// on shared mappings work across processes, so a waiter in another process is woken too.
constexpr size_t kDirectInlineBytes = 24;

struct DirectCounter {
  alignas(kCacheLine) std::atomic<uint64_t> value;
  // Chunks this small travel in the counter's own cache line (one per sequence parity), so a
  // reader's one miss on the counter brings the data along.
  alignas(8) unsigned char inlineData[2][kDirectInlineBytes];
  // What the sequence of each parity is (kStaged counters): 0 for the direct all-reduce, else
  // a window collective's description (host_window.h), so that ranks which disagree on the
  // kind of call fail instead of reading each other's buffers wrongly. Written before the
  // value, read after it.
  std::atomic<uint32_t> how[2];
  // On a line of its own: the owner looks at it after every call, and on the line the peers
  // poll that look cost 0.03 us of a 0.25 us two-rank call (measured).
  alignas(kCacheLine) std::atomic<uint32_t> sleepers;

  // Stores a new value (release: everything written before is visible to whoever sees it) and
  // wakes sleepers.
  void publish(uint64_t v) {
    store(v);
    wake();
  }
  // The two halves of publish. A writer may store now and wake later (see HostDirectPrims): the
  // wake's fence waits for the store to reach the other cores, which a waiter on the critical
  // path should not, and sleepers only exist after a long wait.
  void store(uint64_t v) { value.store(v, std::memory_order_release); }
  void wake() { wakeSleepers(value, sleepers); }
};

static_assert(offsetof(DirectCounter, sleepers) == kCacheLine &&
                  sizeof(DirectCounter) == 2 * kCacheLine,
              "a counter and its inline data fill one line, the sleepers flag the next");
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "counters shared between processes must be lock-free");

enum class DirectCounterKind : int {
  kStaged = 0,   // the last sequence whose input chunk is in the staging buffer (a window
                 // collective: whose buffers are ready to read in place)
  kReduced = 1,  // the last sequence whose reduced share is in the result buffer (two-shot;
                 // a window all-reduce: in the output)
  kDone = 2,     // the last window collective that finished reading its peers' buffers
};
constexpr int kDirectCounterKinds = 3;

// The start of every segment; the buffers follow at kDirectDataOffset.
struct DirectHeader {
  DirectCounter counters[kDirectCounterKinds];  // indexed by DirectCounterKind
  // The call of each parity's staged sequence (call_tag.h), written before the counter: peers
  // read it only to name the call when its digest (DirectCounter::how) differs from theirs, so
  // it has a line of its own.
  alignas(kCacheLine) CallTag calls[2];
  alignas(kCacheLine) uint64_t magic;
  uint64_t bufferBytes;
  int32_t rank;
  int32_t nranks;
};
constexpr size_t kDirectDataOffset = (sizeof(DirectHeader) + 4095) & ~size_t(4095);

class DirectRegion {
 public:
  // The smallest accepted per-rank staging capacity.
  static constexpr size_t kMinBufferBytes = 64;

  // Collective over all ctx.nranks ranks (uses ctx.bootstrap): creates this rank's segment,
  // named after ctx.commTag and the rank, maps every peer's, and removes the names once all
  // are mapped. bufferBytes is the capacity of one staging buffer (the largest chunk); every
  // rank must pass the same value. Fails on every rank if any rank fails, or if ctx.peers
  // shows ranks on different hosts or with shared memory disabled.
  static Result<std::unique_ptr<DirectRegion>> create(const TransportContext& ctx,
                                                      size_t bufferBytes);

  DirectRegion(const DirectRegion&) = delete;
  DirectRegion& operator=(const DirectRegion&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  size_t bufferBytes() const { return bufferBytes_; }

  // Buffers of rank r's segment; slot is sequence % 2.
  char* staging(int r, int slot) const { return data_[r] + static_cast<size_t>(slot) * stride_; }
  // Where rank r's staged chunk of `bytes` bytes lives: inline in its counter when small.
  char* staged(int r, int slot, size_t bytes) const {
    return bytes <= kDirectInlineBytes
               ? reinterpret_cast<char*>(
                     headers_[r]
                         ->counters[static_cast<int>(DirectCounterKind::kStaged)]
                         .inlineData[slot])
               : staging(r, slot);
  }
  char* result(int r, int slot) const { return data_[r] + static_cast<size_t>(2 + slot) * stride_; }
  DirectCounter& counter(int r, DirectCounterKind kind) const {
    return headers_[r]->counters[static_cast<int>(kind)];
  }
  CallTag& call(int r, int slot) const { return headers_[r]->calls[slot]; }

  // Waits until rank r's counter reaches at least target. Returns kSuccess, or what the waiter
  // gave up with (kRemoteError: deadline, kInvalidUsage: abort).
  Code waitAtLeast(int r, DirectCounterKind kind, uint64_t target, Waiter& waiter) const;

  // The next sequence number of this rank (one per chunk, shared by every mode).
  uint64_t nextSequence() { return ++sequence_; }
  uint64_t sequence() const { return sequence_; }

  // A collective that failed halfway leaves the peers at other sequence numbers: the region
  // cannot be used again.
  void markBroken() { broken_ = true; }
  bool broken() const { return broken_; }

 private:
  DirectRegion() = default;

  int rank_ = 0;
  int nranks_ = 0;
  size_t bufferBytes_ = 0;
  size_t stride_ = 0;  // bytes between buffers: bufferBytes rounded up to a cache line
  uint64_t sequence_ = 0;
  bool broken_ = false;
  std::vector<ShmSegment> segments_;  // index = rank
  std::vector<DirectHeader*> headers_;
  std::vector<char*> data_;
};

}  // namespace chorus
