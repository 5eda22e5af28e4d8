// Recursive doubling's primitives (algorithms/rd_allreduce.h) for device kernels: one block
// drives one channel's slice, exchanging it with a partner per step through the links of its
// own between partners (Comm::peers, link p2pParts + 2 treeChannels + channel of each pair).
// The output buffer holds the running partial: init() writes this rank's input there (scaled
// for PreMulSum), each exchange sends it and folds the partner's in, the lower group's partial
// first on both sides, so that both partners compute the same bits. Each step is one
// linkStep (dev_links.h) over a partner's ends opened for that step and stored back after it:
// no table of partners stays in every thread's stack. Written over a Block type, so that the
// CPU runs it in tests.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/rd_allreduce.h"
#include "cuda/dev_links.h"

namespace chorus {
namespace dev {

// The link of `channel` between this rank and an exchange partner.
CHORUS_HD inline const Channel& rdLink(const Comm& comm, int peer, int channel) {
  return comm.peers[peer * comm.peerLinks + comm.p2pParts + 2 * comm.treeChannels + channel];
}

template <class F, RedKind K, Proto P, class Block>
class RdPrims {
  using S = typename F::Store;
  using C = typename F::Compute;
  // Partials already hold their scaled inputs: they are added, not scaled again.
  static constexpr RedKind kFold = K == RedKind::kPreMulSum ? RedKind::kSum : K;

  // This rank's input, scaled (init).
  struct Scale {
    C scalar;
    int nranks;
    CHORUS_HD S operator()(S, S, S local) const {
      return applyOrCopy<F, stepFor<K, kLocal>()>(local, local, scalar, nranks);
    }
  };
  // Received and local partial folded, this rank's first when mineFirst; finalised when last.
  template <bool kLast>
  struct Fold {
    C scalar;
    int nranks;
    bool mineFirst;
    CHORUS_HD S operator()(S r0, S, S local) const {
      constexpr Step kStep = stepFor<kFold, kLocal | kRecv | (kLast ? kFinal : 0u)>();
      return mineFirst ? applyOrCopy<F, kStep>(local, r0, scalar, nranks)
                       : applyOrCopy<F, kStep>(r0, local, scalar, nranks);
    }
  };

 public:
  // input/output: this channel's slice of the user's buffers (count elements).
  CHORUS_HD RdPrims(const Comm& comm, int channel, const char* input, char* output, size_t count,
                    C scalar, Block& block)
      : comm_(comm),
        channel_(channel),
        input_(input),
        output_(output),
        count_(count),
        scalar_(scalar),
        block_(block) {}

  // Elements one slot holds (every partner link has the same layout; 0: no link).
  CHORUS_HD size_t chunkElems() const {
    // The first partner: rank ^ 1 below the largest power of two, else the rank folded into.
    const int pw = rdPowerOfTwo(comm_.nranks);
    return slotElems<S, P>(endsOf(comm_.rank < pw ? comm_.rank ^ 1 : comm_.rank - pw).send);
  }

  CHORUS_HD bool init() {
    moveLinksSimple<S>(block_, nullptr, 0, input_, nullptr, 0, output_, count_,
                       Scale{scalar_, comm_.nranks});
    block_.sync();  // the sends that follow read what every thread wrote
    return true;
  }
  CHORUS_HD bool send(int peer, size_t off, size_t n) {
    Ends e = endsOf(peer);
    FifoEnd* sends[kMaxLinkEnds] = {&e.send, nullptr};
    return stored(e.send, linkStep<S, P>(comm_, block_, nullptr, 0, output_ + off * sizeof(S),
                                         sends, 1, nullptr, n, TakeLocal<S>{}));
  }
  CHORUS_HD bool recvReduce(int peer, size_t off, size_t n, bool mineFirst, bool last) {
    Ends e = endsOf(peer);
    FifoEnd* recvs[kMaxLinkEnds] = {&e.recv, nullptr};
    char* at = output_ + off * sizeof(S);
    const bool ok = last ? linkStep<S, P>(comm_, block_, recvs, 1, at, nullptr, 0, at, n,
                                          Fold<true>{scalar_, comm_.nranks, mineFirst})
                         : linkStep<S, P>(comm_, block_, recvs, 1, at, nullptr, 0, at, n,
                                          Fold<false>{scalar_, comm_.nranks, mineFirst});
    return stored(e.recv, ok);
  }
  CHORUS_HD bool recvCopy(int peer, size_t off, size_t n) {
    Ends e = endsOf(peer);
    FifoEnd* recvs[kMaxLinkEnds] = {&e.recv, nullptr};
    return stored(e.recv, linkStep<S, P>(comm_, block_, recvs, 1, nullptr, nullptr, 0,
                                         output_ + off * sizeof(S), n, TakeReceived<S>{}));
  }

 private:
  struct Ends {
    FifoEnd send, recv;
  };

  // The ends of peer's link where its memory says they stand (ends without FIFOs, which fail
  // the step, where the link or its position is missing).
  CHORUS_HD Ends endsOf(int peer) const {
    Ends e;
    if (peer < 0 || peer >= comm_.nranks) return e;
    const Channel& link = rdLink(comm_, peer, channel_);
    if (link.send[static_cast<int>(P)].step != nullptr)
      e.send = openEnd(link.send[static_cast<int>(P)]);
    if (link.recv[static_cast<int>(P)].step != nullptr)
      e.recv = openEnd(link.recv[static_cast<int>(P)]);
    return e;
  }
  // Stores where the end stands after a step, before the block opens an end again; ok as it is.
  CHORUS_HD bool stored(const FifoEnd& e, bool ok) {
    if (block_.tid == 0) closeEnd(e);
    block_.sync();
    return ok;
  }

  const Comm& comm_;
  int channel_;
  const char* input_;
  char* output_;
  size_t count_;
  C scalar_;
  Block& block_;
};

}  // namespace dev
}  // namespace chorus
