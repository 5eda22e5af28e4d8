#include "exec/host_direct.h"

#include <cstring>

#include "algorithms/direct_allreduce.h"
#include "exec/call_tag.h"
#include "exec/stream_copy.h"

namespace chorus {

namespace {

// Host primitives for the direct all-reduce (see direct_allreduce.h): waits on the region's
// counters (bounded by the timeout and the abort flag), moves data with memcpy and reduces with
// one reduce-copy pass per staged operand.
class HostDirectPrims {
 public:
  HostDirectPrims(const ExecContext& ctx, DirectRegion& region, const CollArgs& args,
                  SlotStreamPolicy& stores, WaitNote& note, WaitPlace at)
      : ctx_(ctx),
        region_(region),
        stores_(stores),
        input_(static_cast<const char*>(args.sendbuff)),
        output_(static_cast<char*>(args.recvbuff)),
        eltSize_(dataTypeSize(args.type)),
        type_(args.type),
        op_(args.op),
        combineOp_(args.op),
        tag_(args.tag),
        note_(note),
        at_(at) {
    // Even: a direct all-reduce (window calls publish odd descriptions); 0 when not checked.
    const uint32_t digest = tagDigest(tag_) & ~1u;
    if (ctx.checkCalls) how_ = digest == 0 ? 2u : digest;
    // Each rank scales its own input by its own PreMulSum scalar while staging it (ranks may
    // use different scalars); the staged values are then only added.
    if (combineOp_.kind == RedKind::kPreMulSum) combineOp_.kind = RedKind::kSum;
  }

  bool stage(size_t in, size_t n, size_t skip, size_t skipLen) {
    ++at_.step;
    at_.bytesDone = in * eltSize_;  // the chunks before
    sequence_ = region_.nextSequence();
    slot_ = static_cast<int>(sequence_ % 2);
    chunkBytes_ = n * eltSize_;  // the same on every rank: it picks inline or buffer staging
    chunkIn_ = in;
    // The buffers of sequence - 2 are free: see direct_region.h.
    char* staged = region_.staged(ctx_.rank, slot_, chunkBytes_);
    // Peers read the staged chunk: cached or streaming stores, as measured (slot_stream.h).
    // A PreMulSum chunk is scaled on the way, by the reduction kernel, which stores cached.
    // Small chunks from kWholeTimedBytes are timed whole, stage to finish (some of them: see
    // chooseWhole): their stores take little time next to the reader's wait for them. (Below, a
    // chunk is a few lines, which measured the same either way on a distant core and slower
    // streamed on a near one.)
    const bool scaled = op_.kind == RedKind::kPreMulSum;
    const bool small = !scaled && chunkBytes_ >= kWholeTimedBytes &&
                       chunkBytes_ < SlotStreamPolicy::kMinBytes &&
                       ctx_.slotStream == SlotStreamMode::kAdaptive;
    bool stream;
    wholeTimed_ = false;
    if (small) {
      smallKind_ = kSmallChunkStores + (63 - __builtin_clzll(chunkBytes_)) - kWholeTimedLog2;
      const SlotStreamPolicy::WholeChoice c = stores_.chooseWhole(ctx_.slotStream, smallKind_);
      stream = c.stream;
      wholeTimed_ = c.timed;
      if (wholeTimed_) wholeStart_ = slotStreamTicks();
    } else {
      stream = !scaled && stores_.streamNext(ctx_.slotStream, kStageStores, chunkBytes_);
    }
    smallChunk_ = small;
    chunkStreamed_ = stream;
    const bool timed = !scaled && SlotStreamPolicy::measured(ctx_.slotStream, chunkBytes_);
    const uint64_t start = timed ? slotStreamTicks() : 0;
    stageRange(staged, in, 0, skip < n ? skip : n, stream);
    if (skip + skipLen < n) stageRange(staged, in, skip + skipLen, n - skip - skipLen, stream);
    if (timed)
      stores_.record(kStageStores, stream, chunkBytes_,
                     static_cast<int64_t>(slotStreamTicks() - start));
    if (how_ != 0) region_.call(ctx_.rank, slot_) = tag_;
    // In the counter's line, which the store below writes anyway: this is a direct all-reduce,
    // and which.
    region_.counter(ctx_.rank, DirectCounterKind::kStaged)
        .how[slot_]
        .store(how_, std::memory_order_relaxed);
    storeCounter(DirectCounterKind::kStaged);
    return true;
  }

  bool reduceToOutput(int peer, size_t from, size_t out, size_t n, bool first, bool last) {
    // This rank's own operand comes from its input rather than its staged copy, which the
    // peers are reading at that moment (a second miss on a line in flight). Not in place
    // unless it is the first operand: the earlier passes write the output, which is the input.
    const bool own = peer == ctx_.rank && (first || input_ != output_);
    if (!own && !wait(peer, DirectCounterKind::kStaged, sequence_, "stage its input")) return false;
    const char* src = own ? input_ + (chunkIn_ + from) * eltSize_
                          : region_.staged(peer, slot_, chunkBytes_) + from * eltSize_;
    reduceInto(output_ + out * eltSize_, nullptr, src, n, first, last, own);
    return true;
  }

  bool reduceToResult(int peer, size_t from, size_t out, size_t n, bool first, bool last) {
    // This rank's own operand comes from its input (unscaled: the pass scales it).
    const bool own = peer == ctx_.rank;
    if (!own && !wait(peer, DirectCounterKind::kStaged, sequence_, "stage its input")) return false;
    const char* src = own ? input_ + (chunkIn_ + from) * eltSize_
                          : region_.staged(peer, slot_, chunkBytes_) + from * eltSize_;
    char* result = region_.result(ctx_.rank, slot_) + from * eltSize_;
    if (!last) {
      reduceInto(result, nullptr, src, n, first, last, own);
      return true;
    }
    // The finished share goes to the output and to the result buffer the peers copy from, the
    // latter with cached or streaming stores as measured; streamed, it is computed into the
    // output and streamed from there.
    const size_t bytes = n * eltSize_;
    const bool stream =
        smallChunk_ ? chunkStreamed_ : stores_.streamNext(ctx_.slotStream, kResultStores, bytes);
    const bool timed = SlotStreamPolicy::measured(ctx_.slotStream, bytes);
    const uint64_t start = timed ? slotStreamTicks() : 0;
    char* output = output_ + out * eltSize_;
    if (stream) {
      // The partial so far is in the result buffer (or deferred), never in the output.
      reduceInto(output, nullptr, src, n, first, last, own, result);
      streamCopy(result, output, bytes);
    } else {
      reduceInto(result, output, src, n, first, last, own);
    }
    if (timed)
      stores_.record(kResultStores, stream, bytes, static_cast<int64_t>(slotStreamTicks() - start));
    return true;
  }

  bool publishResult() {
    storeCounter(DirectCounterKind::kReduced);
    return true;
  }

  // Wakes whoever sleeps on a counter this rank stored without waking. Runs before this rank
  // waits for longer than a short spin and when the call ends, so a sleeping peer is woken
  // within microseconds of the store, and never later than the end of the call.
  void wakePending() {
    for (int k = 0; k < 2; ++k) {
      if (!unwoken_[k]) continue;
      region_.counter(ctx_.rank, static_cast<DirectCounterKind>(k)).wake();
      unwoken_[k] = false;
    }
  }

  bool copyResult(int peer, size_t from, size_t out, size_t n) {
    if (!wait(peer, DirectCounterKind::kReduced, sequence_, "publish its reduced share"))
      return false;
    if (n > 0)
      memcpy(output_ + out * eltSize_, region_.result(peer, slot_) + from * eltSize_, n * eltSize_);
    return true;
  }

  // Nothing to publish: a peer learns that this rank finished reading a chunk from its staging
  // of the next one.
  bool finish() {
    if (wholeTimed_)
      stores_.record(smallKind_, chunkStreamed_, chunkBytes_,
                     static_cast<int64_t>(slotStreamTicks() - wholeStart_));
    return true;
  }

  const Status& status() const { return status_; }

 private:
  // input[in+from, +n) -> staged[from, +n), scaled by this rank's PreMulSum scalar; a plain
  // copy with streaming stores when `stream`.
  void stageRange(char* staged, size_t in, size_t from, size_t n, bool stream) {
    if (n == 0) return;
    if (op_.kind == RedKind::kPreMulSum) {
      ReduceCopyArgs a;
      a.local = input_ + (in + from) * eltSize_;
      a.dst0 = staged + from * eltSize_;
      a.count = n;
      a.type = type_;
      a.op = &op_;
      reduceCopy(a);
    } else if (stream) {
      streamCopy(staged + from * eltSize_, input_ + (in + from) * eltSize_, n * eltSize_);
    } else {
      memcpy(staged + from * eltSize_, input_ + (in + from) * eltSize_, n * eltSize_);
    }
  }

  // dst = first ? op(src) : dst (op) src, finalised when last, also written to dst1 when given.
  // A deferred first operand becomes the `peer` of the next pass: same operands, same order,
  // same bits, one pass less. An unscaled operand (this rank's own input) takes the full op, so
  // PreMulSum scales it; it is never deferred, since a deferred operand is not scaled.
  // The running result is read from `partial` (default: dst) unless deferred.
  void reduceInto(char* dst, char* dst1, const char* src, size_t n, bool first, bool last,
                  bool unscaled, const char* partial = nullptr) {
    const bool scale = unscaled && op_.kind == RedKind::kPreMulSum;
    if (first && !last && !scale) {
      pending_ = src;
      return;
    }
    ReduceCopyArgs a;
    a.peer = first ? nullptr : (pending_ != nullptr ? pending_ : (partial ? partial : dst));
    a.local = src;
    a.dst0 = dst;
    a.dst1 = dst1;
    a.count = n;
    a.type = type_;
    a.op = scale ? &op_ : &combineOp_;
    a.finalize = last;
    reduceCopy(a);
    pending_ = nullptr;
  }

  void storeCounter(DirectCounterKind kind) {
    region_.counter(ctx_.rank, kind).store(sequence_);
    unwoken_[static_cast<int>(kind)] = true;
  }

  bool wait(int peer, DirectCounterKind kind, uint64_t target, const char* what) {
    // A peer running in step stores within a few dozen polls: look first, without waking
    // anyone and without the pause instruction (both delay the exchange; measured).
    const std::atomic<uint64_t>& value = region_.counter(peer, kind).value;
    for (int i = 0; i < kPollsBeforeWake; ++i) {
      if (value.load(std::memory_order_acquire) >= target) return sameKind(peer, kind);
    }
    wakePending();
    note_.waiting(at_, peer,
                  kind == DirectCounterKind::kStaged ? WaitFor::kStaged : WaitFor::kReduced);
    Waiter w = ctx_.waiter();
    Code c = region_.waitAtLeast(peer, kind, target, w);
    if (c == Code::kSuccess) return sameKind(peer, kind);
    const std::string where = describeWait(ctx_, tag_, at_, peer);
    if (c == Code::kRemoteError) {
      status_ = remoteError(
          "%s: timed out after %.0f s waiting for it to %s; the peer is stuck, dead or made "
          "another call (raise CHORUS_TIMEOUT if it is slow; CHORUS_DUMP=<dir> makes every rank "
          "write its pending operations for tools/chorus-waitfor)",
          where.c_str(), ctx_.timeoutSeconds, what);
    } else {
      status_ = invalidUsage("%s: interrupted, the communicator was aborted", where.c_str());
    }
    return false;
  }

  // A peer that staged this sequence for a window collective made another call than this one.
  // Otherwise, with calls checked, a peer whose call has another tag (call_tag.h) made another
  // call than this one.
  bool sameKind(int peer, DirectCounterKind kind) {
    if (kind != DirectCounterKind::kStaged) return true;
    const uint32_t how = region_.counter(peer, kind).how[slot_].load(std::memory_order_relaxed);
    return how == how_ || otherKind(peer, how);
  }

  // sameKind's rare case, out of the hot path: another call, or calls not checked.
  __attribute__((noinline, cold)) bool otherKind(int peer, uint32_t how) {
    if ((how & 1) == 0 && !ctx_.checkCalls) return true;
    if ((how & 1) == 0) {
      status_ = reportMismatch(
          ctx_, invalidUsage("rank %d: %s does not match rank %d's call at this point, %s; "
                             "every rank must make the same collective calls in the same order, "
                             "with the same count, type, operation and root "
                             "(CHORUS_CHECK_CALLS=0 turns this check off)",
                             ctx_.rank, describeCall(tag_).c_str(), peer,
                             describeCall(region_.call(peer, slot_)).c_str()));
      return false;
    }
    status_ = invalidUsage(
        "rank %d: ncclAllReduce (direct all-reduce): rank %d made a collective call on window "
        "buffers (ncclCommWindowRegister) where this rank made this all-reduce on other "
        "buffers; every rank must make the same calls, with buffers of windows registered "
        "together or with none",
        ctx_.rank, peer);
    return false;
  }

  // The kinds of write stores_ chooses for: large chunks' staging and results apart, by their
  // stores' time; small chunks' both at once, by the chunk's whole time, one kind for each
  // power of two of chunk bytes from kWholeTimedBytes to SlotStreamPolicy::kMinBytes.
  static constexpr int kStageStores = 0;
  static constexpr int kResultStores = 1;
  static constexpr int kSmallChunkStores = 2;
  static constexpr int kWholeTimedLog2 = 10;
  static constexpr size_t kWholeTimedBytes = size_t{1} << kWholeTimedLog2;
  static_assert(SlotStreamPolicy::kMinBytes <= (size_t{1} << 14) &&
                    kSmallChunkStores + 14 - kWholeTimedLog2 <= SlotStreamPolicy::kStepKinds,
                "a kind for every small chunk size class");

  const ExecContext& ctx_;
  DirectRegion& region_;
  SlotStreamPolicy& stores_;
  const char* input_;
  char* output_;
  size_t eltSize_;
  DataType type_;
  const RedOp& op_;
  RedOp combineOp_;  // op_ with PreMulSum turned into Sum: staged inputs are already scaled
  CallTag tag_;
  WaitNote& note_;
  WaitPlace at_;
  uint32_t how_ = 0;  // what this rank publishes beside each staged chunk (see stage)
  static constexpr int kPollsBeforeWake = 64;

  const char* pending_ = nullptr;
  bool unwoken_[2] = {false, false};  // per DirectCounterKind: stored, sleepers not yet woken
  uint64_t sequence_ = 0;
  int slot_ = 0;
  size_t chunkBytes_ = 0;
  size_t chunkIn_ = 0;          // input offset of the current chunk
  bool smallChunk_ = false;     // the current chunk's stores are chosen by chooseWhole
  bool wholeTimed_ = false;     // and it is timed, stage to finish
  int smallKind_ = 0;           // its size class's kind of write
  bool chunkStreamed_ = false;  // its writes (staging, result) use streaming stores
  uint64_t wholeStart_ = 0;
  Status status_;
};

}  // namespace

Status hostAllReduceDirect(const ExecContext& ctx, const CollArgs& args, DirectRegion& region,
                           bool twoShot, SlotStreamPolicy& stores) {
  if (args.count == 0) return Status::ok();
  if (ctx.nranks == 1) {
    hostLocal(Collective::kAllReduce, args);
    return Status::ok();
  }
  if (region.rank() != ctx.rank || region.nranks() != ctx.nranks)
    return internalError(
        "rank %d: ncclAllReduce (direct all-reduce) was given the region of rank %d of %d in a "
        "communicator of %d ranks",
        ctx.rank, region.rank(), region.nranks(), ctx.nranks);
  if (region.broken())
    return invalidUsage(
        "rank %d: ncclAllReduce (direct all-reduce): an earlier direct all-reduce of this "
        "communicator failed, so its ranks are out of step; destroy the communicator and create "
        "a new one",
        ctx.rank);
  const size_t eltSize = dataTypeSize(args.type);
  if (eltSize == 0)
    return invalidArgument("rank %d: ncclAllReduce (direct all-reduce): unknown data type %d",
                           ctx.rank, static_cast<int>(args.type));
  WaitPlace at;
  at.algo = twoShot ? "two-shot" : "one-shot";
  at.launch = ctx.launch;
  at.bytesTotal = args.count * eltSize;
  HostDirectPrims prims(ctx, region, args, stores, noteOf(ctx, 0), at);
  DirectAllReduceShape shape{};
  shape.count = args.count;
  shape.chunkElems = region.bufferBytes() / eltSize;
  shape.alignElems = kCacheLine / eltSize;
  shape.nranks = ctx.nranks;
  shape.rank = ctx.rank;
  shape.twoShot = twoShot;
  const bool ok = directAllReduce(prims, shape);
  prims.wakePending();
  if (!ok) {
    region.markBroken();
    return prims.status();
  }
  return Status::ok();
}

}  // namespace chorus
