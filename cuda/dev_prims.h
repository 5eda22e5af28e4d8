// The ring primitives (algorithms/ring_prims.h) for device kernels: one block of threads drives
// one channel, waits on the channel's FIFO counters (Simple) or on the flags inside the lines
// (LL), and moves each slot with one fused reduce-copy pass of the element code
// (element_ops.h). Written over a Block type so the CPU runs the same code in tests:
//   int tid, nthreads;  void sync();  bool syncOr(bool);  BlockShared* shared;
// sync() is a barrier of the block's threads; syncOr(v) one that returns whether any thread
// passed true (__syncthreads_or), so that every decision to stop is the whole block's; shared
// points to memory they all see.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/dev_memory.h"
#include "cuda/dev_work.h"
#include "cuda/element_ops.h"
#include "cuda/hd.h"
#include "exec/reduce.h"

namespace chorus {
namespace dev {

struct BlockShared {
  int aborted;
};

// The element step a primitive applies, from the reduction and what the primitive combines.
enum PrimFlags : unsigned { kLocal = 1, kRecv = 2, kSend = 4, kOut = 8, kFinal = 16 };

template <RedKind K, unsigned Flags>
CHORUS_HD constexpr Step stepFor() {
  constexpr bool local = (Flags & kLocal) != 0, recv = (Flags & kRecv) != 0;
  constexpr bool final = (Flags & kFinal) != 0;
  if constexpr (local && recv) {
    if constexpr (K == RedKind::kSum) return Step::kSum;
    if constexpr (K == RedKind::kProd) return Step::kProd;
    if constexpr (K == RedKind::kMax) return Step::kMax;
    if constexpr (K == RedKind::kMin) return Step::kMin;
    if constexpr (K == RedKind::kAvg) return final ? Step::kAvgFinal : Step::kSum;
    return Step::kPreMulSum;
  } else if constexpr (local && K == RedKind::kPreMulSum) {
    return Step::kScale;
  } else if constexpr (local && K == RedKind::kAvg && final) {
    return Step::kDivide;
  } else {
    return Step::kCopy;
  }
}

// One element step of a primitive: kCopy passes the peer's element on untouched (no decode).
template <class F, Step kStep>
CHORUS_HD typename F::Store applyOrCopy(typename F::Store peer, typename F::Store local,
                                        typename F::Compute scalar, int nranks) {
  if constexpr (kStep == Step::kCopy) {
    return peer;
  } else {
    return applyStep<F, kStep>(peer, local, scalar, nranks);
  }
}

// ---- Loads and stores of the data path. ----

// 16 bytes as lanes of the storage type.
template <class S>
union Pack16 {
  uint64_t words[2];
  S lanes[16 / sizeof(S)];
};

template <class S>
union Pack8 {
  uint64_t word;
  S lanes[8 / sizeof(S)];
};

// A peer wrote it: read past the (non-coherent) L1 cache on the device.
CHORUS_HD inline void loadPeer16(const void* p, uint64_t* w) {
#ifdef __CUDA_ARCH__
  uint64_t a, b;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
  w[0] = a;
  w[1] = b;
#else
  const auto* q = static_cast<const uint64_t*>(p);
  w[0] = q[0];
  w[1] = q[1];
#endif
}

CHORUS_HD inline void load16(const void* p, uint64_t* w) {
  const auto* q = static_cast<const uint64_t*>(p);
  w[0] = q[0];
  w[1] = q[1];
}

CHORUS_HD inline void store16(void* p, const uint64_t* w) {
  auto* q = static_cast<uint64_t*>(p);
  q[0] = w[0];
  q[1] = w[1];
}

template <class S>
CHORUS_HD inline S loadPeerElement(const S* p) {
#ifdef __CUDA_ARCH__
  return *static_cast<const volatile S*>(p);
#else
  return *p;
#endif
}

// Up to 8 bytes from an element-aligned address; the rest of the word is zero.
CHORUS_HD inline uint64_t loadBytes8(const char* p, uint32_t bytes) {
  if (bytes == 8 && (reinterpret_cast<uintptr_t>(p) & 7u) == 0)
    return *reinterpret_cast<const uint64_t*>(p);
  uint64_t w = 0;
  for (uint32_t i = 0; i < bytes; ++i)
    w |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return w;
}

CHORUS_HD inline void storeBytes8(char* p, uint64_t w, uint32_t bytes) {
  if (bytes == 8 && (reinterpret_cast<uintptr_t>(p) & 7u) == 0) {
    *reinterpret_cast<uint64_t*>(p) = w;
    return;
  }
  for (uint32_t i = 0; i < bytes; ++i) p[i] = static_cast<char>((w >> (8 * i)) & 0xffu);
}

CHORUS_HD inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Bytes of the LL line at byte offset off of a chunk of `bytes` bytes that carry data.
CHORUS_HD inline uint32_t llValidBytes(size_t bytes, size_t off) {
  return bytes - off < kLlDataBytes ? static_cast<uint32_t>(bytes - off) : kLlDataBytes;
}

// Bytes from src to dst by the threads of a block, 16 at a time where both allow; kFromPeer:
// src is a peer's memory (read past the L1 cache).
template <bool kFromPeer, class Block>
CHORUS_HD void blockCopy(Block& b, char* dst, const char* src, size_t bytes) {
  size_t begin = 0;
  if (aligned16(src) && aligned16(dst)) {
    for (size_t i = static_cast<size_t>(b.tid); i < bytes / 16;
         i += static_cast<size_t>(b.nthreads)) {
      uint64_t w[2];
      if (kFromPeer) {
        loadPeer16(src + i * 16, w);
      } else {
        load16(src + i * 16, w);
      }
      store16(dst + i * 16, w);
    }
    begin = bytes / 16 * 16;
  }
  for (size_t i = begin + static_cast<size_t>(b.tid); i < bytes;
       i += static_cast<size_t>(b.nthreads))
    dst[i] = kFromPeer ? loadPeerElement(src + i) : src[i];
}

// ---- Waiting for peers. ----

CHORUS_HD inline bool commAborting(const Comm& comm) {
  return comm.abortFlag != nullptr && *comm.abortFlag != 0;
}

// Tells the host that a kernel gave up (abort, or a link the host should not have planned
// over): the call fails instead of the host waiting for it.
CHORUS_HD inline void flagKernelError(const Comm& comm) {
  if (comm.errorFlag != nullptr) *static_cast<volatile uint32_t*>(comm.errorFlag) = 1;
}

// Tells the block's other threads (and the host) that this one gave up on abort.
template <class Block>
CHORUS_HD void markBlockAborted(const Comm& comm, Block& block) {
#ifdef __CUDA_ARCH__
  *static_cast<volatile int*>(&block.shared->aborted) = 1;
#else
  __atomic_store_n(&block.shared->aborted, 1, __ATOMIC_RELAXED);
#endif
  flagKernelError(comm);
}

template <class Block>
CHORUS_HD bool blockAbortedSeen(const Block& block) {
#ifdef __CUDA_ARCH__
  return *static_cast<volatile int*>(&block.shared->aborted) != 0;
#else
  return __atomic_load_n(&block.shared->aborted, __ATOMIC_RELAXED) != 0;
#endif
}

// Waits until the counter at p reaches `target`; false when the communicator was aborted first.
template <class Block>
CHORUS_HD bool waitCounterAtLeast(const Comm& comm, Block& block, const uint64_t* p,
                                  uint64_t target) {
  uint32_t spins = 0;
  while (loadAcquire(p) < target) {
    if ((++spins & 63u) == 0 && commAborting(comm)) {
      markBlockAborted(comm, block);
      return false;
    }
    pollPause();
  }
  return true;
}

// One thread waits for an LL line of `flag` and takes its data; false when the block or the
// communicator gave up first.
template <class Block>
CHORUS_HD bool waitLlLine(const Comm& comm, Block& block, const LlLine* line, uint32_t flag,
                          uint64_t* data) {
  uint32_t spins = 0;
  while (!llTryLoad(line, flag, data)) {
    if ((++spins & 63u) == 0 && (blockAbortedSeen(block) || commAborting(comm))) {
      markBlockAborted(comm, block);
      return false;
    }
    pollPause();
  }
  return true;
}

// ---- The primitives. ----

template <class F, RedKind K, Proto P, class Block>
class RingPrims {
  using S = typename F::Store;
  using C = typename F::Compute;
  static constexpr int kUnroll = 4;  // 16-byte packs each thread has in flight (Simple)

 public:
  // input/output: this channel's slice of the user's buffers. The step counters are read from
  // the FIFOs' own memory; finish() writes them back.
  CHORUS_HD RingPrims(const Comm& comm, const Channel& ch, const char* input, char* output,
                      C scalar, Block& block)
      : comm_(comm),
        send_(ch.send[static_cast<int>(P)]),
        recv_(ch.recv[static_cast<int>(P)]),
        input_(input),
        output_(output),
        scalar_(scalar),
        block_(block) {
    sendStep_ = send_.step != nullptr ? *static_cast<volatile uint64_t*>(send_.step) : 0;
    recvStep_ = recv_.step != nullptr ? *static_cast<volatile uint64_t*>(recv_.step) : 0;
  }

  // Elements one slot holds.
  CHORUS_HD size_t chunkElems() const {
    // A point-to-point transfer has only one of the two ends.
    const uint32_t slot = send_.slotBytes != 0 ? send_.slotBytes : recv_.slotBytes;
    size_t bytes = P == Proto::kLl ? slot / sizeof(LlLine) * kLlDataBytes : slot;
    return bytes / sizeof(S);
  }

  CHORUS_HD bool send(size_t in, size_t n) { return step<kLocal | kSend>(in, 0, n); }
  CHORUS_HD bool copySend(size_t in, size_t out, size_t n) {
    return step<kLocal | kSend | kOut>(in, out, n);
  }
  CHORUS_HD bool recvReduceSend(size_t in, size_t n) {
    return step<kLocal | kRecv | kSend>(in, 0, n);
  }
  CHORUS_HD bool recvReduceCopySend(size_t in, size_t out, size_t n) {
    return step<kLocal | kRecv | kSend | kOut | kFinal>(in, out, n);
  }
  CHORUS_HD bool recvReduceCopy(size_t in, size_t out, size_t n) {
    return step<kLocal | kRecv | kOut | kFinal>(in, out, n);
  }
  CHORUS_HD bool recvCopySend(size_t out, size_t n) {
    return step<kRecv | kSend | kOut>(0, out, n);
  }
  CHORUS_HD bool recv(size_t out, size_t n) { return step<kRecv | kOut>(0, out, n); }

  // Stores the step counters for the next kernel; every thread of the block calls it.
  CHORUS_HD void finish() {
    if (block_.tid == 0) {
      if (send_.step != nullptr) *static_cast<volatile uint64_t*>(send_.step) = sendStep_;
      if (recv_.step != nullptr) *static_cast<volatile uint64_t*>(recv_.step) = recvStep_;
    }
    block_.sync();
  }

 private:
  CHORUS_HD bool waitCounter(const uint64_t* p, uint64_t target) {
    return waitCounterAtLeast(comm_, block_, p, target);
  }

  template <unsigned Flags>
  CHORUS_HD bool step(size_t in, size_t out, size_t n) {
    constexpr bool useRecv = (Flags & kRecv) != 0, useSend = (Flags & kSend) != 0;
    constexpr bool useLocal = (Flags & kLocal) != 0, useOut = (Flags & kOut) != 0;
    constexpr Step kStep = stepFor<K, Flags>();
    const char* recvSlot =
        useRecv ? recv_.slots + (recvStep_ % recv_.nslots) * recv_.slotBytes : nullptr;
    char* sendSlot = useSend ? send_.slots + (sendStep_ % send_.nslots) * send_.slotBytes : nullptr;
    const char* local = useLocal ? input_ + in * sizeof(S) : nullptr;
    char* output = useOut ? output_ + out * sizeof(S) : nullptr;

    bool stop = false;
    if (block_.tid == 0) {
      // A free slot: at most nslots - 1 of the earlier ones still unreleased.
      if (useSend && sendStep_ >= send_.nslots)
        stop = !waitCounter(send_.head, sendStep_ + 1 - send_.nslots);
      if (!stop && P == Proto::kSimple && useRecv) stop = !waitCounter(recv_.tail, recvStep_ + 1);
    }
    if (block_.syncOr(stop)) return false;

    bool lost = false;
    if (P == Proto::kSimple) {
      moveSimple<kStep, useLocal, useRecv, useSend, useOut>(recvSlot, local, sendSlot, output, n);
    } else {
      lost =
          !moveLl<kStep, useLocal, useRecv, useSend, useOut>(recvSlot, local, sendSlot, output, n);
    }
    if (block_.syncOr(lost)) return false;
    if (block_.tid == 0) {
      // The barrier above ordered the block's slot stores before this thread's fence, which
      // orders them before the counter for the receiver, wherever it runs. A proxy forwarding
      // the slot learns its size here (LL: whole lines, flags included).
      if (useSend && send_.sizes != nullptr) {
        const size_t bytes =
            P == Proto::kLl ? (n * sizeof(S) + kLlDataBytes - 1) / kLlDataBytes * sizeof(LlLine)
                            : n * sizeof(S);
        *static_cast<volatile uint32_t*>(send_.sizes + sendStep_ % send_.nslots) =
            static_cast<uint32_t>(bytes);
      }
      if (useSend && (P == Proto::kSimple || send_.sizes != nullptr)) {
        fenceSystem();
        storeRelease(send_.tail, sendStep_ + 1);
      }
      if (useRecv) storeRelease(recv_.head, recvStep_ + 1);
    }
    if (useSend) ++sendStep_;
    if (useRecv) ++recvStep_;
    return true;
  }

  template <Step kStep>
  CHORUS_HD S apply(S peer, S local) const {
    return applyOrCopy<F, kStep>(peer, local, scalar_, comm_.nranks);
  }

  // Simple: 16-byte packs when every pointer allows, then single elements. Each thread loads
  // kUnroll packs (kUnroll * nthreads apart, so a warp's accesses stay contiguous) before it
  // stores any, so that several loads are in flight.
  template <Step kStep, bool useLocal, bool useRecv, bool useSend, bool useOut>
  CHORUS_HD void movePacks(const char* recvSlot, const char* local, char* sendSlot, char* output,
                           size_t first, size_t stride) {
    constexpr size_t kLanes = 16 / sizeof(S);
    Pack16<S> a[kUnroll], b[kUnroll];
    for (int u = 0; u < kUnroll; ++u) {
      const size_t at = (first + static_cast<size_t>(u) * stride) * 16;
      // The first operand is the peer's when there is one, else the local input.
      if (useRecv) {
        loadPeer16(recvSlot + at, a[u].words);
      } else {
        load16(local + at, a[u].words);
      }
      if (useRecv && useLocal) load16(local + at, b[u].words);
    }
    for (int u = 0; u < kUnroll; ++u) {
      const size_t at = (first + static_cast<size_t>(u) * stride) * 16;
      Pack16<S> r;
      for (size_t j = 0; j < kLanes; ++j)
        r.lanes[j] =
            apply<kStep>(a[u].lanes[j], useRecv && useLocal ? b[u].lanes[j] : a[u].lanes[j]);
      if (useSend) store16(sendSlot + at, r.words);
      if (useOut) store16(output + at, r.words);
    }
  }

  template <Step kStep, bool useLocal, bool useRecv, bool useSend, bool useOut>
  CHORUS_HD void moveSimple(const char* recvSlot, const char* local, char* sendSlot, char* output,
                            size_t n) {
    constexpr size_t kLanes = 16 / sizeof(S);
    const int tid = block_.tid, nthreads = block_.nthreads;
    const size_t threads = static_cast<size_t>(nthreads);
    size_t begin = 0;
    const bool packed = (!useLocal || aligned16(local)) && (!useOut || aligned16(output));
    if (packed) {
      const size_t packs = n / kLanes;
      // Whole rounds of kUnroll packs per thread, then one pack per thread.
      const size_t rounds = packs / (threads * kUnroll);
      for (size_t r = 0; r < rounds; ++r)
        movePacks<kStep, useLocal, useRecv, useSend, useOut>(
            recvSlot, local, sendSlot, output, r * threads * kUnroll + static_cast<size_t>(tid),
            threads);
      for (size_t i = rounds * threads * kUnroll + static_cast<size_t>(tid); i < packs;
           i += threads) {
        Pack16<S> a, b, r;
        if (useRecv) {
          loadPeer16(recvSlot + i * 16, a.words);
        } else {
          load16(local + i * 16, a.words);
        }
        if (useRecv && useLocal) {
          load16(local + i * 16, b.words);
        } else {
          b = a;
        }
        for (size_t j = 0; j < kLanes; ++j) r.lanes[j] = apply<kStep>(a.lanes[j], b.lanes[j]);
        if (useSend) store16(sendSlot + i * 16, r.words);
        if (useOut) store16(output + i * 16, r.words);
      }
      begin = packs * kLanes;
    }
    const S* peerElts = reinterpret_cast<const S*>(recvSlot);
    const S* localElts = reinterpret_cast<const S*>(local);
    for (size_t i = begin + static_cast<size_t>(tid); i < n; i += static_cast<size_t>(nthreads)) {
      S a = useRecv ? loadPeerElement(peerElts + i) : localElts[i];
      S b = useRecv && useLocal ? localElts[i] : a;
      S r = apply<kStep>(a, b);
      if (useSend) reinterpret_cast<S*>(sendSlot)[i] = r;
      if (useOut) reinterpret_cast<S*>(output)[i] = r;
    }
  }

  // LL: each thread takes whole lines; a line carries 8 bytes of the chunk. False when the
  // communicator was aborted while this thread waited for a line.
  template <Step kStep, bool useLocal, bool useRecv, bool useSend, bool useOut>
  CHORUS_HD bool moveLl(const char* recvSlot, const char* local, char* sendSlot, char* output,
                        size_t n) {
    constexpr uint32_t kLanes = kLlDataBytes / sizeof(S);
    const size_t bytes = n * sizeof(S);
    const size_t lines = (bytes + kLlDataBytes - 1) / kLlDataBytes;
    const uint32_t sendFlag = llFlag(sendStep_);
    const uint32_t recvFlag = llFlag(recvStep_);
    const auto* recvLines = reinterpret_cast<const LlLine*>(recvSlot);
    auto* sendLines = reinterpret_cast<LlLine*>(sendSlot);
    for (size_t i = static_cast<size_t>(block_.tid); i < lines;
         i += static_cast<size_t>(block_.nthreads)) {
      const size_t off = i * kLlDataBytes;
      const uint32_t valid = llValidBytes(bytes, off);
      Pack8<S> a, b, r;
      a.word = 0;
      if (useRecv) {
        if (!waitLlLine(comm_, block_, recvLines + i, recvFlag, &a.word)) return false;
      } else {
        a.word = loadBytes8(local + off, valid);
      }
      b.word = useRecv && useLocal ? loadBytes8(local + off, valid) : a.word;
      r.word = 0;
      const uint32_t lanes = valid / static_cast<uint32_t>(sizeof(S));
      for (uint32_t j = 0; j < kLanes; ++j)
        if (j < lanes) r.lanes[j] = apply<kStep>(a.lanes[j], b.lanes[j]);
      if (useSend) llStore(sendLines + i, r.word, sendFlag);
      if (useOut) storeBytes8(output + off, r.word, valid);
    }
    return true;
  }

  const Comm& comm_;
  const Fifo& send_;
  const Fifo& recv_;
  const char* input_;
  char* output_;
  C scalar_;
  Block& block_;
  uint64_t sendStep_ = 0;
  uint64_t recvStep_ = 0;
};

}  // namespace dev
}  // namespace chorus
