// Device primitives over several links at once, for the algorithms whose steps use links of
// their own rather than a ring channel (the tree: parent and children, cuda/dev_tree.h;
// recursive doubling: one partner per exchange, cuda/dev_rd.h). One step of a block waits for
// every link it uses (free slots to write; Simple: the data to read, LL: the flags inside the
// lines), moves the chunk in one fused pass that reads up to two received slots and a local
// buffer and writes up to two send slots and an output, then publishes and releases the
// slots as RingPrims does (dev_prims.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/dev_prims.h"

namespace chorus {
namespace dev {

// Receive ends and send ends one step uses at most (a tree node's two children). Loops over
// them run to this bound, so that the compiler keeps the ends' pointers in registers.
constexpr int kMaxLinkEnds = 2;

// One end of a FIFO a block uses, and where that end stands.
struct FifoEnd {
  const Fifo* fifo = nullptr;
  uint64_t step = 0;
};

// The end of f, at the step its own memory holds (no FIFO where f has no slots).
CHORUS_HD inline FifoEnd openEnd(const Fifo& f) {
  FifoEnd e;
  if (f.slots == nullptr) return e;
  e.fifo = &f;
  e.step = f.step != nullptr ? *static_cast<volatile uint64_t*>(f.step) : 0;
  return e;
}

// Stores where the end stands for the next kernel (one thread of the block).
CHORUS_HD inline void closeEnd(const FifoEnd& e) {
  if (e.fifo != nullptr && e.fifo->step != nullptr)
    *static_cast<volatile uint64_t*>(e.fifo->step) = e.step;
}

CHORUS_HD inline char* slotOf(const FifoEnd& e) {
  return e.fifo->slots + (e.step % e.fifo->nslots) * e.fifo->slotBytes;
}

// Elements of S one slot of e holds with protocol P.
template <class S, Proto P>
CHORUS_HD size_t slotElems(const FifoEnd& e) {
  if (e.fifo == nullptr) return 0;
  const size_t bytes = P == Proto::kLl ? e.fifo->slotBytes / sizeof(LlLine) * kLlDataBytes
                                       : static_cast<size_t>(e.fifo->slotBytes);
  return bytes / sizeof(S);
}

// The plain copies a step may make, the same for every reduction (one linkStep of each per
// element type and protocol): the first received element, or the local one.
template <class S>
struct TakeReceived {
  CHORUS_HD S operator()(S r0, S, S) const { return r0; }
};
template <class S>
struct TakeLocal {
  CHORUS_HD S operator()(S, S, S local) const { return local; }
};

// Simple: 16-byte packs when the local buffer and the output allow (slots always do), then
// single elements. fn(r0, r1, l): the value of an element from the first and second received
// slot and the local buffer (zero where absent).
template <class S, class Fn, class Block>
CHORUS_HD void moveLinksSimple(Block& block, const char* const* from, int nrecv, const char* local,
                               char* const* to, int nsend, char* output, size_t n, const Fn& fn) {
  constexpr size_t kLanes = 16 / sizeof(S);
  const size_t threads = static_cast<size_t>(block.nthreads);
  size_t begin = 0;
  if ((local == nullptr || aligned16(local)) && (output == nullptr || aligned16(output))) {
    const size_t packs = n / kLanes;
    for (size_t i = static_cast<size_t>(block.tid); i < packs; i += threads) {
      Pack16<S> a, b, l, r;
      a.words[0] = a.words[1] = 0;
      b = l = a;
      if (nrecv > 0) loadPeer16(from[0] + i * 16, a.words);
      if (nrecv > 1) loadPeer16(from[1] + i * 16, b.words);
      if (local != nullptr) load16(local + i * 16, l.words);
      for (size_t j = 0; j < kLanes; ++j) r.lanes[j] = fn(a.lanes[j], b.lanes[j], l.lanes[j]);
      for (int s = 0; s < kMaxLinkEnds; ++s)
        if (s < nsend) store16(to[s] + i * 16, r.words);
      if (output != nullptr) store16(output + i * 16, r.words);
    }
    begin = packs * kLanes;
  }
  for (size_t i = begin + static_cast<size_t>(block.tid); i < n; i += threads) {
    const S zero{};
    const S a = nrecv > 0 ? loadPeerElement(reinterpret_cast<const S*>(from[0]) + i) : zero;
    const S b = nrecv > 1 ? loadPeerElement(reinterpret_cast<const S*>(from[1]) + i) : zero;
    const S l = local != nullptr ? reinterpret_cast<const S*>(local)[i] : zero;
    const S r = fn(a, b, l);
    for (int s = 0; s < kMaxLinkEnds; ++s)
      if (s < nsend) reinterpret_cast<S*>(to[s])[i] = r;
    if (output != nullptr) reinterpret_cast<S*>(output)[i] = r;
  }
}

// LL: each thread takes whole lines (8 bytes of the chunk each); false when the communicator
// was aborted while this thread waited for a line.
template <class S, class Fn, class Block>
CHORUS_HD bool moveLinksLl(const Comm& comm, Block& block, const char* const* from,
                           const uint32_t* recvFlags, int nrecv, const char* local, char* const* to,
                           const uint32_t* sendFlags, int nsend, char* output, size_t n,
                           const Fn& fn) {
  constexpr uint32_t kLanes = kLlDataBytes / sizeof(S);
  const size_t bytes = n * sizeof(S);
  const size_t lines = (bytes + kLlDataBytes - 1) / kLlDataBytes;
  for (size_t i = static_cast<size_t>(block.tid); i < lines;
       i += static_cast<size_t>(block.nthreads)) {
    const size_t off = i * kLlDataBytes;
    const uint32_t valid = llValidBytes(bytes, off);
    Pack8<S> a, b, l, r;
    a.word = b.word = l.word = r.word = 0;
    if (nrecv > 0 && !waitLlLine(comm, block, reinterpret_cast<const LlLine*>(from[0]) + i,
                                 recvFlags[0], &a.word))
      return false;
    if (nrecv > 1 && !waitLlLine(comm, block, reinterpret_cast<const LlLine*>(from[1]) + i,
                                 recvFlags[1], &b.word))
      return false;
    if (local != nullptr) l.word = loadBytes8(local + off, valid);
    const uint32_t lanes = valid / static_cast<uint32_t>(sizeof(S));
    for (uint32_t j = 0; j < kLanes; ++j)
      if (j < lanes) r.lanes[j] = fn(a.lanes[j], b.lanes[j], l.lanes[j]);
    for (int s = 0; s < kMaxLinkEnds; ++s)
      if (s < nsend) llStore(reinterpret_cast<LlLine*>(to[s]) + i, r.word, sendFlags[s]);
    if (output != nullptr) storeBytes8(output + off, r.word, valid);
  }
  return true;
}

// One step over up to two receive ends and up to two send ends (arrays of kMaxLinkEnds): n
// elements of S, each fn(first received, second received, local) written to every send slot and
// to output (null: none); local null: no local operand. False (the whole block's verdict) when an
// end is missing (flagged as an error for the host) or the communicator was aborted while the block
// waited.
template <class S, Proto P, class Fn, class Block>
CHORUS_HD bool linkStep(const Comm& comm, Block& block, FifoEnd* const* recvs, int nrecv,
                        const char* local, FifoEnd* const* sends, int nsend, char* output, size_t n,
                        const Fn& fn) {
  bool missing = false;
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nrecv) missing = missing || recvs[i]->fifo == nullptr;
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nsend) missing = missing || sends[i]->fifo == nullptr;
  if (missing) {
    // The host plans these steps only where the links exist: report it rather than hang.
    if (block.tid == 0) flagKernelError(comm);
    return false;
  }
  bool stop = false;
  if (block.tid == 0) {
    // Free slots to write (at most nslots - 1 earlier ones unreleased), and Simple data.
    for (int i = 0; i < kMaxLinkEnds; ++i) {
      if (i >= nsend || stop) break;
      const FifoEnd& e = *sends[i];
      if (e.step >= e.fifo->nslots)
        stop = !waitCounterAtLeast(comm, block, e.fifo->head, e.step + 1 - e.fifo->nslots);
    }
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nrecv && !stop && P == Proto::kSimple)
        stop = !waitCounterAtLeast(comm, block, recvs[i]->fifo->tail, recvs[i]->step + 1);
  }
  if (block.syncOr(stop)) return false;

  const char* from[kMaxLinkEnds] = {nullptr, nullptr};
  char* to[kMaxLinkEnds] = {nullptr, nullptr};
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nrecv) from[i] = slotOf(*recvs[i]);
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nsend) to[i] = slotOf(*sends[i]);
  bool lost = false;
  if (P == Proto::kSimple) {
    moveLinksSimple<S>(block, from, nrecv, local, to, nsend, output, n, fn);
  } else {
    uint32_t recvFlags[kMaxLinkEnds] = {0, 0}, sendFlags[kMaxLinkEnds] = {0, 0};
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nrecv) recvFlags[i] = llFlag(recvs[i]->step);
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nsend) sendFlags[i] = llFlag(sends[i]->step);
    lost = !moveLinksLl<S>(comm, block, from, recvFlags, nrecv, local, to, sendFlags, nsend, output,
                           n, fn);
  }
  if (block.syncOr(lost)) return false;
  if (block.tid == 0) {
    // As RingPrims: the barrier ordered the block's stores before this thread's fence, the
    // fence orders them before the counters. Proxied FIFOs learn each slot's size.
    bool publish = false;
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nsend) {
        const Fifo& f = *sends[i]->fifo;
        if (f.sizes != nullptr) {
          const size_t bytes =
              P == Proto::kLl ? (n * sizeof(S) + kLlDataBytes - 1) / kLlDataBytes * sizeof(LlLine)
                              : n * sizeof(S);
          *static_cast<volatile uint32_t*>(f.sizes + sends[i]->step % f.nslots) =
              static_cast<uint32_t>(bytes);
        }
        publish = publish || P == Proto::kSimple || f.sizes != nullptr;
      }
    if (publish) fenceSystem();
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nsend && (P == Proto::kSimple || sends[i]->fifo->sizes != nullptr))
        storeRelease(sends[i]->fifo->tail, sends[i]->step + 1);
    for (int i = 0; i < kMaxLinkEnds; ++i)
      if (i < nrecv) storeRelease(recvs[i]->fifo->head, recvs[i]->step + 1);
  }
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nsend) ++sends[i]->step;
  for (int i = 0; i < kMaxLinkEnds; ++i)
    if (i < nrecv) ++recvs[i]->step;
  return true;
}

}  // namespace dev
}  // namespace chorus
