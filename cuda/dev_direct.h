// The direct all-reduce's primitives (algorithms/direct_allreduce.h) for device kernels: every
// rank stages its chunk in its own direct region (dev_work.h: Direct), and reads the peers'
// staged chunks, or their finished two-shot shares, in place from their regions. One block per
// channel, each channel with a part of every region and a sequence of its own. Written over a
// Block type (dev_prims.h) so the CPU runs the same code in tests.
//
// Simple publishes each staged chunk or finished share with a counter after a system-scope
// fence; a reader waits for the counter, then reads. LL (one-shot only) stages 16-byte lines of
// 8 data bytes and the sequence's flag, and each reader thread polls its own lines: no fence and
// no counter on the way. The algorithm takes the peers' operands one primitive at a time, in
// rank order; these primitives only wait on each peer until the last one and then reduce all of
// them in one pass over the data (the same operands in the same order: each element is
// computed alike on every rank, so the results are bitwise identical).
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/direct_allreduce.h"
#include "cuda/dev_prims.h"

namespace chorus {
namespace dev {

template <class F, RedKind K, Proto P, class Block>
class DirectPrims {
  using S = typename F::Store;
  using C = typename F::Compute;
  static constexpr int kStaged = 0;   // counter: the last sequence this rank staged
  static constexpr int kReduced = 1;  // counter: the last sequence whose share is finished

 public:
  // input/output: this channel's slice of the user's buffers.
  CHORUS_HD DirectPrims(const Comm& comm, int channel, const char* input, char* output, C scalar,
                        Block& block)
      : comm_(comm), input_(input), output_(output), scalar_(scalar), block_(block) {
    nranks_ = comm.directRanks;
    rank_ = comm.rank;
    const uint64_t at = comm.direct.channelBytes * static_cast<uint64_t>(channel);
    for (int r = 0; r < nranks_; ++r) part_[r] = comm.direct.regions[r] + at;
    // The sequence goes on from the last this rank staged on this channel.
    seq_ = loadAcquire(counter(rank_, kStaged));
  }

  // Elements one sequence moves.
  CHORUS_HD size_t chunkElems() const {
    const size_t bytes = P == Proto::kLl ? comm_.direct.bufferBytes / sizeof(LlLine) * kLlDataBytes
                                         : comm_.direct.bufferBytes;
    return bytes / sizeof(S);
  }

  CHORUS_HD bool stage(size_t in, size_t n, size_t skip, size_t skipLen) {
    // Every thread is done with the earlier sequences' buffers before any writes this one's
    // (a peer that sees one of its lines or its counter may reuse what this rank read).
    block_.sync();
    ++seq_;
    const char* src = input_ + in * sizeof(S);
    if (P == Proto::kLl) {
      auto* lines = reinterpret_cast<LlLine*>(buffer(rank_, DirectBuffer::kLlStaging));
      const uint32_t flag = llFlag(seq_);
      const size_t bytes = n * sizeof(S);
      const size_t nlines = (bytes + kLlDataBytes - 1) / kLlDataBytes;
      for (size_t i = static_cast<size_t>(block_.tid); i < nlines;
           i += static_cast<size_t>(block_.nthreads)) {
        const size_t off = i * kLlDataBytes;
        const uint32_t valid = llValidBytes(bytes, off);
        llStore(lines + i, loadBytes8(src + off, valid), flag);
      }
      // Peers read LL lines, not the counter, but the release still orders this block's reads
      // of the earlier sequences before it (see below).
      if (block_.tid == 0) {
        storeRelease(counter(rank_, kStaged), seq_);
        *lastLl() = seq_;
      }
      return true;
    }
    // Reading LL lines acquires nothing: after an LL sequence, this rank acquires the peers'
    // counters of it before it rewrites a Simple buffer they read two sequences ago.
    bool stop = false;
    if (block_.tid == 0 && *lastLl() == seq_ - 1)
      for (int q = 0; q < nranks_ && !stop; ++q)
        if (q != rank_) stop = !waitCounterAtLeast(comm_, block_, counter(q, kStaged), seq_ - 1);
    if (block_.syncOr(stop)) return false;
    char* dst = buffer(rank_, DirectBuffer::kStaging);
    const size_t skipEnd = skip + skipLen < n ? skip + skipLen : n;
    blockCopy<false>(block_, dst, src, (skip < n ? skip : n) * sizeof(S));
    blockCopy<false>(block_, dst + skipEnd * sizeof(S), src + skipEnd * sizeof(S),
                     (n - skipEnd) * sizeof(S));
    return publish(kStaged);
  }

  CHORUS_HD bool reduceToOutput(int peer, size_t from, size_t out, size_t n, bool first,
                                bool last) {
    return reduceStep<false>(peer, from, out, n, first, last);
  }
  CHORUS_HD bool reduceToResult(int peer, size_t from, size_t out, size_t n, bool first,
                                bool last) {
    return reduceStep<true>(peer, from, out, n, first, last);
  }

  CHORUS_HD bool publishResult() { return publish(kReduced); }

  CHORUS_HD bool copyResult(int peer, size_t from, size_t out, size_t n) {
    bool stop = false;
    if (block_.tid == 0) stop = !waitCounterAtLeast(comm_, block_, counter(peer, kReduced), seq_);
    if (block_.syncOr(stop)) return false;
    blockCopy<true>(block_, output_ + out * sizeof(S),
                    buffer(peer, DirectBuffer::kResult) + from * sizeof(S), n * sizeof(S));
    return true;
  }

  CHORUS_HD bool finish() { return true; }

 private:
  CHORUS_HD uint64_t* counter(int r, int which) const {
    return reinterpret_cast<uint64_t*>(part_[r] + which * 128);
  }
  // The last sequence this rank staged with LL (beside its staged counter; only it reads it).
  CHORUS_HD uint64_t* lastLl() const { return counter(rank_, kStaged) + 1; }
  // Rank r's buffer of kind b for the current sequence's parity.
  CHORUS_HD char* buffer(int r, DirectBuffer b) const {
    const uint64_t index = static_cast<uint64_t>(static_cast<int>(b)) + (seq_ & 1u);
    return part_[r] + kDirectHeaderBytes + index * comm_.direct.bufferBytes;
  }

  // Publishes the block's writes of the current sequence under counter `which`.
  CHORUS_HD bool publish(int which) {
    block_.sync();
    if (block_.tid == 0) {
      fenceSystem();
      storeRelease(counter(rank_, which), seq_);
    }
    return true;
  }

  // Operand q (in rank order) of a step: q's staged chunk, or this rank's own input.
  template <Step kStep>
  CHORUS_HD S combineWith(S acc, S x) const {
    if constexpr (kStep == Step::kCopy) {
      return x;
    } else {
      return applyStep<F, kStep>(acc, x, scalar_, comm_.nranks);
    }
  }

  // The running value after operand q of nranks_: the first is taken alone (PreMulSum scales
  // it), the middle ones combined, the last one finalises (Avg divides).
  CHORUS_HD S fold(S acc, S x, int q) const {
    constexpr Step kFirst = stepFor<K, kLocal>();
    constexpr Step kMiddle = stepFor<K, kLocal | kRecv>();
    constexpr Step kLast = stepFor<K, kLocal | kRecv | kFinal>();
    if (q == 0) return combineWith<kFirst>(x, x);
    return q == nranks_ - 1 ? combineWith<kLast>(acc, x) : combineWith<kMiddle>(acc, x);
  }

  template <bool kToResult>
  CHORUS_HD bool reduceStep(int peer, size_t from, size_t out, size_t n, bool, bool last) {
    if (P == Proto::kSimple && peer != rank_ && block_.tid == 0 && !stop_)
      stop_ = !waitCounterAtLeast(comm_, block_, counter(peer, kStaged), seq_);
    if (!last) return true;
    const bool stopped = stop_;
    stop_ = false;
    if (block_.syncOr(stopped)) return false;
    bool lost = false;
    if (P == Proto::kLl) {
      lost = !reduceLines(from, out, n);
    } else {
      reducePacks<kToResult>(from, out, n);
    }
    return !block_.syncOr(lost);
  }

  // Simple: every operand of each element in one pass, 16 bytes at a time where all allow.
  template <bool kToResult>
  CHORUS_HD void reducePacks(size_t from, size_t out, size_t n) {
    constexpr size_t kLanes = 16 / sizeof(S);
    const char* own = input_ + out * sizeof(S);
    char* dst = output_ + out * sizeof(S);
    char* result = kToResult ? buffer(rank_, DirectBuffer::kResult) + from * sizeof(S) : nullptr;
    const char* src[kMaxDirectRanks];
    bool packed = aligned16(own) && aligned16(dst) && (!kToResult || aligned16(result));
    for (int q = 0; q < nranks_; ++q) {
      src[q] = q == rank_ ? own : buffer(q, DirectBuffer::kStaging) + from * sizeof(S);
      packed = packed && aligned16(src[q]);
    }
    size_t begin = 0;
    if (packed) {
      const size_t packs = n / kLanes;
      for (size_t i = static_cast<size_t>(block_.tid); i < packs;
           i += static_cast<size_t>(block_.nthreads)) {
        Pack16<S> acc, x;
        acc.words[0] = acc.words[1] = 0;
        for (int q = 0; q < nranks_; ++q) {
          if (q == rank_) {
            load16(src[q] + i * 16, x.words);
          } else {
            loadPeer16(src[q] + i * 16, x.words);
          }
          for (size_t j = 0; j < kLanes; ++j) acc.lanes[j] = fold(acc.lanes[j], x.lanes[j], q);
        }
        store16(dst + i * 16, acc.words);
        if (kToResult) store16(result + i * 16, acc.words);
      }
      begin = packs * kLanes;
    }
    for (size_t i = begin + static_cast<size_t>(block_.tid); i < n;
         i += static_cast<size_t>(block_.nthreads)) {
      S acc{};
      for (int q = 0; q < nranks_; ++q) {
        const S* p = reinterpret_cast<const S*>(src[q]) + i;
        acc = fold(acc, q == rank_ ? *p : loadPeerElement(p), q);
      }
      reinterpret_cast<S*>(dst)[i] = acc;
      if (kToResult) reinterpret_cast<S*>(result)[i] = acc;
    }
  }

  // LL (one-shot): each thread waits for its own lines of every peer. False on abort.
  CHORUS_HD bool reduceLines(size_t from, size_t out, size_t n) {
    constexpr uint32_t kLanes = kLlDataBytes / sizeof(S);
    const char* own = input_ + out * sizeof(S);
    char* dst = output_ + out * sizeof(S);
    const uint32_t flag = llFlag(seq_);
    const size_t bytes = n * sizeof(S);
    const size_t nlines = (bytes + kLlDataBytes - 1) / kLlDataBytes;
    const size_t firstLine = from * sizeof(S) / kLlDataBytes;
    for (size_t i = static_cast<size_t>(block_.tid); i < nlines;
         i += static_cast<size_t>(block_.nthreads)) {
      const size_t off = i * kLlDataBytes;
      const uint32_t valid = llValidBytes(bytes, off);
      const uint32_t lanes = valid / static_cast<uint32_t>(sizeof(S));
      Pack8<S> acc, x;
      acc.word = 0;
      for (int q = 0; q < nranks_; ++q) {
        if (q == rank_) {
          x.word = loadBytes8(own + off, valid);
        } else {
          const auto* line =
              reinterpret_cast<const LlLine*>(buffer(q, DirectBuffer::kLlStaging)) + firstLine + i;
          if (!waitLlLine(comm_, block_, line, flag, &x.word)) return false;
        }
        for (uint32_t j = 0; j < kLanes; ++j)
          if (j < lanes) acc.lanes[j] = fold(acc.lanes[j], x.lanes[j], q);
      }
      storeBytes8(dst + off, acc.word, valid);
    }
    return true;
  }

  const Comm& comm_;
  const char* input_;
  char* output_;
  C scalar_;
  Block& block_;
  int nranks_ = 0;
  int rank_ = 0;
  uint64_t seq_ = 0;
  bool stop_ = false;  // thread 0: a wait for a peer's counter gave up on abort
  char* part_[kMaxDirectRanks] = {};
};

}  // namespace dev
}  // namespace chorus
