// The tree all-reduce's primitives (algorithms/tree_allreduce.h) for device kernels: one block
// drives one tree channel of both trees, through the links of its own to this rank's parent and
// children in each (Comm::peers, links p2pParts + 2 channel + tree of each pair). A step waits
// for every link it uses (Simple: the counters; LL: the flags inside the lines), then one fused
// pass combines the children's partials with the local input and writes the sum (or the
// result) to the parent, the children and the output. Written over a Block type as RingPrims
// is (dev_prims.h), so that the CPU runs the same code in tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/dev_prims.h"

namespace chorus {
namespace dev {

// The link of `channel` and `tree` between this rank and peer (null FIFOs where none exists).
CHORUS_HD inline const Channel& treeLink(const Comm& comm, int peer, int channel, int tree) {
  return comm.peers[peer * comm.peerLinks + comm.p2pParts + 2 * channel + tree];
}

template <class F, RedKind K, Proto P, class Block>
class TreePrims {
  using S = typename F::Store;
  using C = typename F::Compute;
  // A second child's partial already holds its scaled inputs: it is added, not scaled again.
  static constexpr RedKind kSecond = K == RedKind::kPreMulSum ? RedKind::kSum : K;

  // One end of a FIFO this block uses, and where that end stands.
  struct End {
    const Fifo* fifo = nullptr;
    uint64_t step = 0;
  };
  // What a step does: partials up (to the parent), the result at the root, the result down.
  enum class Mode { kUp, kRoot, kDown };

 public:
  CHORUS_HD TreePrims(const Comm& comm, int channel, const char* input, char* output, C scalar,
                      Block& block)
      : comm_(comm), input_(input), output_(output), scalar_(scalar), block_(block) {
    constexpr int p = static_cast<int>(P);
    for (int t = 0; t < kDevTrees; ++t) {
      const DevTreeNode& node = comm.trees[t];
      Links& l = links_[t];
      l.nchildren = node.nchildren;
      if (node.parent >= 0) {
        const Channel& link = treeLink(comm, node.parent, channel, t);
        l.up = open(&link.send[p]);
        l.down = open(&link.recv[p]);
      }
      for (int c = 0; c < node.nchildren; ++c) {
        const Channel& link = treeLink(comm, node.children[c], channel, t);
        l.fromChild[c] = open(&link.recv[p]);
        l.toChild[c] = open(&link.send[p]);
      }
    }
  }

  // Elements one slot holds, and the slots of every FIFO (all tree links share one layout).
  CHORUS_HD size_t chunkElems() const {
    const Fifo* f = anyFifo();
    if (f == nullptr) return 0;
    const size_t bytes = P == Proto::kLl ? f->slotBytes / sizeof(LlLine) * kLlDataBytes
                                         : static_cast<size_t>(f->slotBytes);
    return bytes / sizeof(S);
  }
  CHORUS_HD int fifoSlots() const {
    const Fifo* f = anyFifo();
    return f != nullptr ? static_cast<int>(f->nslots) : 0;
  }

  CHORUS_HD bool recvReduceSend(int tree, size_t in, size_t n) {
    Links& l = links_[tree];
    End* recvs[2] = {&l.fromChild[0], &l.fromChild[1]};
    End* sends[1] = {&l.up};
    return step<Mode::kUp>(recvs, l.nchildren, sends, 1, in, 0, n);
  }
  CHORUS_HD bool recvReduceCopySend(int tree, size_t in, size_t out, size_t n) {
    Links& l = links_[tree];
    End* recvs[2] = {&l.fromChild[0], &l.fromChild[1]};
    End* sends[2] = {&l.toChild[0], &l.toChild[1]};
    return step<Mode::kRoot>(recvs, l.nchildren, sends, l.nchildren, in, out, n);
  }
  CHORUS_HD bool recvCopySend(int tree, size_t out, size_t n) {
    Links& l = links_[tree];
    End* recvs[1] = {&l.down};
    End* sends[2] = {&l.toChild[0], &l.toChild[1]};
    return step<Mode::kDown>(recvs, 1, sends, l.nchildren, 0, out, n);
  }

  // Stores every end's step for the next kernel; every thread of the block calls it.
  CHORUS_HD void finish() {
    if (block_.tid == 0) {
      for (Links& l : links_) {
        End* ends[6] = {&l.up,           &l.down,       &l.fromChild[0],
                        &l.fromChild[1], &l.toChild[0], &l.toChild[1]};
        for (End* e : ends)
          if (e->fifo != nullptr && e->fifo->step != nullptr)
            *static_cast<volatile uint64_t*>(e->fifo->step) = e->step;
      }
    }
    block_.sync();
  }

 private:
  struct Links {
    int nchildren = 0;
    End up, down;
    End fromChild[2], toChild[2];
  };

  static CHORUS_HD End open(const Fifo* f) {
    End e;
    if (f->slots == nullptr) return e;  // no link: a step that needs it fails (chunkElems 0)
    e.fifo = f;
    e.step = f->step != nullptr ? *static_cast<volatile uint64_t*>(f->step) : 0;
    return e;
  }

  CHORUS_HD const Fifo* anyFifo() const {
    for (const Links& l : links_) {
      if (l.up.fifo != nullptr) return l.up.fifo;
      if (l.nchildren > 0 && l.fromChild[0].fifo != nullptr) return l.fromChild[0].fifo;
    }
    return nullptr;
  }

  static CHORUS_HD char* slotOf(const End& e) {
    return e.fifo->slots + (e.step % e.fifo->nslots) * e.fifo->slotBytes;
  }

  template <Step kStep>
  CHORUS_HD S apply(S peer, S local) const {
    return applyOrCopy<F, kStep>(peer, local, scalar_, comm_.nranks);
  }

  // The value a step writes from the first and second received elements and the local one.
  template <Mode M>
  CHORUS_HD S combine(S r0, S r1, S local, int nrecv) const {
    if constexpr (M == Mode::kDown) {
      return r0;
    } else {
      constexpr unsigned kFin = M == Mode::kRoot ? kFinal : 0u;
      if (nrecv == 0) return apply<stepFor<K, kLocal | kFin>()>(local, local);
      if (nrecv == 1) return apply<stepFor<K, kLocal | kRecv | kFin>()>(r0, local);
      const S x = apply<stepFor<K, kLocal | kRecv>()>(r0, local);
      return apply<stepFor<kSecond, kLocal | kRecv | kFin>()>(r1, x);
    }
  }

  template <Mode M>
  CHORUS_HD bool step(End* const* recvs, int nrecv, End* const* sends, int nsend, size_t in,
                      size_t out, size_t n) {
    for (int i = 0; i < nrecv; ++i)
      if (recvs[i]->fifo == nullptr) return false;
    for (int i = 0; i < nsend; ++i)
      if (sends[i]->fifo == nullptr) return false;
    bool stop = false;
    if (block_.tid == 0) {
      // Free slots to write (at most nslots - 1 earlier ones unreleased), and Simple data.
      for (int i = 0; i < nsend && !stop; ++i) {
        const End& e = *sends[i];
        if (e.step >= e.fifo->nslots)
          stop = !waitCounterAtLeast(comm_, block_, e.fifo->head, e.step + 1 - e.fifo->nslots);
      }
      for (int i = 0; i < nrecv && !stop && P == Proto::kSimple; ++i)
        stop = !waitCounterAtLeast(comm_, block_, recvs[i]->fifo->tail, recvs[i]->step + 1);
    }
    if (block_.syncOr(stop)) return false;

    const char* from[2] = {nullptr, nullptr};
    char* to[2] = {nullptr, nullptr};
    for (int i = 0; i < nrecv; ++i) from[i] = slotOf(*recvs[i]);
    for (int i = 0; i < nsend; ++i) to[i] = slotOf(*sends[i]);
    const char* local = M != Mode::kDown ? input_ + in * sizeof(S) : nullptr;
    char* output = M != Mode::kUp ? output_ + out * sizeof(S) : nullptr;
    bool lost = false;
    if (P == Proto::kSimple) {
      moveSimple<M>(from, nrecv, local, to, nsend, output, n);
    } else {
      uint32_t recvFlags[2] = {0, 0}, sendFlags[2] = {0, 0};
      for (int i = 0; i < nrecv; ++i) recvFlags[i] = llFlag(recvs[i]->step);
      for (int i = 0; i < nsend; ++i) sendFlags[i] = llFlag(sends[i]->step);
      lost = !moveLl<M>(from, recvFlags, nrecv, local, to, sendFlags, nsend, output, n);
    }
    if (block_.syncOr(lost)) return false;
    if (block_.tid == 0) {
      // As RingPrims: the barrier ordered the block's stores before this thread's fence, the
      // fence orders them before the counters. Proxied FIFOs learn each slot's size.
      bool publish = false;
      for (int i = 0; i < nsend; ++i) {
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
      for (int i = 0; i < nsend; ++i)
        if (P == Proto::kSimple || sends[i]->fifo->sizes != nullptr)
          storeRelease(sends[i]->fifo->tail, sends[i]->step + 1);
      for (int i = 0; i < nrecv; ++i) storeRelease(recvs[i]->fifo->head, recvs[i]->step + 1);
    }
    for (int i = 0; i < nsend; ++i) ++sends[i]->step;
    for (int i = 0; i < nrecv; ++i) ++recvs[i]->step;
    return true;
  }

  // Simple: 16-byte packs when the local input and the output allow (slots always do), then
  // single elements.
  template <Mode M>
  CHORUS_HD void moveSimple(const char* const* from, int nrecv, const char* local, char* const* to,
                            int nsend, char* output, size_t n) {
    constexpr size_t kLanes = 16 / sizeof(S);
    const size_t threads = static_cast<size_t>(block_.nthreads);
    size_t begin = 0;
    if ((local == nullptr || aligned16(local)) && (output == nullptr || aligned16(output))) {
      const size_t packs = n / kLanes;
      for (size_t i = static_cast<size_t>(block_.tid); i < packs; i += threads) {
        Pack16<S> a, b, l, r;
        a.words[0] = a.words[1] = b.words[0] = b.words[1] = 0;
        l = a;
        if (nrecv > 0) loadPeer16(from[0] + i * 16, a.words);
        if (nrecv > 1) loadPeer16(from[1] + i * 16, b.words);
        if (local != nullptr) load16(local + i * 16, l.words);
        for (size_t j = 0; j < kLanes; ++j)
          r.lanes[j] = combine<M>(a.lanes[j], b.lanes[j], l.lanes[j], nrecv);
        for (int s = 0; s < nsend; ++s) store16(to[s] + i * 16, r.words);
        if (output != nullptr) store16(output + i * 16, r.words);
      }
      begin = packs * kLanes;
    }
    for (size_t i = begin + static_cast<size_t>(block_.tid); i < n; i += threads) {
      const S zero{};
      const S a = nrecv > 0 ? loadPeerElement(reinterpret_cast<const S*>(from[0]) + i) : zero;
      const S b = nrecv > 1 ? loadPeerElement(reinterpret_cast<const S*>(from[1]) + i) : zero;
      const S l = local != nullptr ? reinterpret_cast<const S*>(local)[i] : zero;
      const S r = combine<M>(a, b, l, nrecv);
      for (int s = 0; s < nsend; ++s) reinterpret_cast<S*>(to[s])[i] = r;
      if (output != nullptr) reinterpret_cast<S*>(output)[i] = r;
    }
  }

  // LL: each thread takes whole lines (8 bytes of the chunk each). False when the
  // communicator was aborted while this thread waited for a line.
  template <Mode M>
  CHORUS_HD bool moveLl(const char* const* from, const uint32_t* recvFlags, int nrecv,
                        const char* local, char* const* to, const uint32_t* sendFlags, int nsend,
                        char* output, size_t n) {
    constexpr uint32_t kLanes = kLlDataBytes / sizeof(S);
    const size_t bytes = n * sizeof(S);
    const size_t lines = (bytes + kLlDataBytes - 1) / kLlDataBytes;
    for (size_t i = static_cast<size_t>(block_.tid); i < lines;
         i += static_cast<size_t>(block_.nthreads)) {
      const size_t off = i * kLlDataBytes;
      const uint32_t valid = llValidBytes(bytes, off);
      Pack8<S> a, b, l, r;
      a.word = b.word = l.word = r.word = 0;
      if (nrecv > 0 && !waitLlLine(comm_, block_, reinterpret_cast<const LlLine*>(from[0]) + i,
                                   recvFlags[0], &a.word))
        return false;
      if (nrecv > 1 && !waitLlLine(comm_, block_, reinterpret_cast<const LlLine*>(from[1]) + i,
                                   recvFlags[1], &b.word))
        return false;
      if (local != nullptr) l.word = loadBytes8(local + off, valid);
      const uint32_t lanes = valid / static_cast<uint32_t>(sizeof(S));
      for (uint32_t j = 0; j < kLanes; ++j)
        if (j < lanes) r.lanes[j] = combine<M>(a.lanes[j], b.lanes[j], l.lanes[j], nrecv);
      for (int s = 0; s < nsend; ++s)
        llStore(reinterpret_cast<LlLine*>(to[s]) + i, r.word, sendFlags[s]);
      if (output != nullptr) storeBytes8(output + off, r.word, valid);
    }
    return true;
  }

  const Comm& comm_;
  const char* input_;
  char* output_;
  C scalar_;
  Block& block_;
  Links links_[kDevTrees];
};

}  // namespace dev
}  // namespace chorus
