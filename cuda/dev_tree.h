// The tree all-reduce's primitives (algorithms/tree_allreduce.h) for device kernels: one block
// drives one tree channel of both trees, through the links of its own to this rank's parent and
// children in each (Comm::peers, links p2pParts + 2 channel + tree of each pair). A step
// (dev_links.h) waits for every link it uses, then one fused pass combines the children's
// partials with the local input and writes the sum (or the result) to the parent, the children
// and the output. Written over a Block type as RingPrims is (dev_prims.h), so that the CPU runs
// the same code in tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/dev_links.h"

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
  // What a step combines: partials up (to the parent), or the result at the root (the result
  // goes down as it is received: TakeReceived).
  enum class Mode { kUp, kRoot };

  // The value a step writes from the first and second received elements and the local one.
  template <Mode M>
  struct Combine {
    C scalar;
    int nranks;
    int nrecv;
    CHORUS_HD S operator()(S r0, S r1, S local) const {
      constexpr unsigned kFin = M == Mode::kRoot ? kFinal : 0u;
      if (nrecv == 0)
        return applyOrCopy<F, stepFor<K, kLocal | kFin>()>(local, local, scalar, nranks);
      if (nrecv == 1)
        return applyOrCopy<F, stepFor<K, kLocal | kRecv | kFin>()>(r0, local, scalar, nranks);
      const S x = applyOrCopy<F, stepFor<K, kLocal | kRecv>()>(r0, local, scalar, nranks);
      return applyOrCopy<F, stepFor<kSecond, kLocal | kRecv | kFin>()>(r1, x, scalar, nranks);
    }
  };

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
        l.up = openEnd(link.send[p]);
        l.down = openEnd(link.recv[p]);
      }
      for (int c = 0; c < node.nchildren; ++c) {
        const Channel& link = treeLink(comm, node.children[c], channel, t);
        l.fromChild[c] = openEnd(link.recv[p]);
        l.toChild[c] = openEnd(link.send[p]);
      }
    }
  }

  // Elements one slot holds, and the slots of every FIFO (all tree links share one layout).
  CHORUS_HD size_t chunkElems() const { return slotElems<S, P>(anyEnd()); }
  CHORUS_HD int fifoSlots() const {
    const FifoEnd& e = anyEnd();
    return e.fifo != nullptr ? static_cast<int>(e.fifo->nslots) : 0;
  }

  CHORUS_HD bool recvReduceSend(int tree, size_t in, size_t n) {
    Links& l = links_[tree];
    FifoEnd* recvs[kMaxLinkEnds] = {&l.fromChild[0], &l.fromChild[1]};
    FifoEnd* sends[kMaxLinkEnds] = {&l.up, nullptr};
    return linkStep<S, P>(comm_, block_, recvs, l.nchildren, input_ + in * sizeof(S), sends, 1,
                          nullptr, n, combine<Mode::kUp>(l.nchildren));
  }
  CHORUS_HD bool recvReduceCopySend(int tree, size_t in, size_t out, size_t n) {
    Links& l = links_[tree];
    FifoEnd* recvs[kMaxLinkEnds] = {&l.fromChild[0], &l.fromChild[1]};
    FifoEnd* sends[kMaxLinkEnds] = {&l.toChild[0], &l.toChild[1]};
    return linkStep<S, P>(comm_, block_, recvs, l.nchildren, input_ + in * sizeof(S), sends,
                          l.nchildren, output_ + out * sizeof(S), n,
                          combine<Mode::kRoot>(l.nchildren));
  }
  CHORUS_HD bool recvCopySend(int tree, size_t out, size_t n) {
    Links& l = links_[tree];
    FifoEnd* recvs[kMaxLinkEnds] = {&l.down, nullptr};
    FifoEnd* sends[kMaxLinkEnds] = {&l.toChild[0], &l.toChild[1]};
    return linkStep<S, P>(comm_, block_, recvs, 1, nullptr, sends, l.nchildren,
                          output_ + out * sizeof(S), n, TakeReceived<S>{});
  }

  // Stores every end's step for the next kernel; every thread of the block calls it.
  CHORUS_HD void finish() {
    if (block_.tid == 0)
      for (const Links& l : links_) {
        closeEnd(l.up);
        closeEnd(l.down);
        for (int c = 0; c < 2; ++c) {
          closeEnd(l.fromChild[c]);
          closeEnd(l.toChild[c]);
        }
      }
    block_.sync();
  }

 private:
  struct Links {
    int nchildren = 0;
    FifoEnd up, down;
    FifoEnd fromChild[2], toChild[2];
  };

  template <Mode M>
  CHORUS_HD Combine<M> combine(int nrecv) const {
    return Combine<M>{scalar_, comm_.nranks, nrecv};
  }

  CHORUS_HD const FifoEnd& anyEnd() const {
    for (const Links& l : links_) {
      if (l.up.fifo != nullptr) return l.up;
      if (l.nchildren > 0 && l.fromChild[0].fifo != nullptr) return l.fromChild[0];
    }
    return links_[0].up;  // none: no FIFO
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
