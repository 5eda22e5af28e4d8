#include "exec/host_executor.h"

#include <algorithm>
#include <cstring>

#include "algorithms/ring_allgather.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/ring_broadcast.h"
#include "algorithms/ring_reduce.h"
#include "algorithms/ring_reduce_scatter.h"
#include "algorithms/selector.h"
#include "exec/call_tag.h"
#include "exec/stream_copy.h"

namespace chorus {

namespace {

// Host primitives for one ring channel: each step waits on the connectors (bounded by the
// timeout and the abort flag) and runs one fused reduce-copy pass.
class HostRingPrims {
 public:
  HostRingPrims(const ExecContext& ctx, HostChannel& ch, const char* input, char* output,
                DataType type, const RedOp& op, const CallTag& tag, WaitNote& note, WaitPlace at,
                bool streamOutput)
      : streamOutput_(streamOutput),
        ctx_(ctx),
        ch_(ch),
        input_(input),
        output_(output),
        eltSize_(dataTypeSize(type)),
        type_(type),
        op_(op),
        tag_(tag),
        note_(note),
        at_(at) {}

  bool send(size_t in, size_t n) { return step(in, 0, n, kLocal | kSend); }
  bool copySend(size_t in, size_t out, size_t n) { return step(in, out, n, kLocal | kSend | kOut); }
  bool recvReduceSend(size_t in, size_t n) { return step(in, 0, n, kLocal | kRecv | kSend); }
  bool recvReduceCopySend(size_t in, size_t out, size_t n) {
    return step(in, out, n, kLocal | kRecv | kSend | kOut | kFinal);
  }
  bool recvReduceCopy(size_t in, size_t out, size_t n) {
    return step(in, out, n, kLocal | kRecv | kOut | kFinal);
  }
  bool recvCopySend(size_t out, size_t n) { return step(0, out, n, kRecv | kSend | kOut); }
  bool recv(size_t out, size_t n) { return step(0, out, n, kRecv | kOut); }

  const Status& status() const { return status_; }

 private:
  enum StepFlags : unsigned { kLocal = 1, kRecv = 2, kSend = 4, kOut = 8, kFinal = 16 };

  // One step: optionally take a slot from prev, optionally combine it with local input, write
  // the result to the output and/or the next send slot.
  bool step(size_t in, size_t out, size_t n, unsigned flags) {
    const bool useLocal = flags & kLocal, useRecv = flags & kRecv, useSend = flags & kSend;
    const bool writeOutput = flags & kOut;
    size_t bytes = n * eltSize_;
    const void* recvSlot = nullptr;
    void* sendSlot = nullptr;
    Code failure = Code::kSuccess;
    ++at_.step;
    if (useRecv) {
      Waiter w = ctx_.waiter();
      size_t got = 0;
      if (!ch_.recv.ready()) note_.waiting(at_, ch_.prevRank, WaitFor::kData);
      recvSlot = ch_.recv.wait(w, &got, &failure);
      if (recvSlot == nullptr) return fail(failure, ch_.prevRank, ch_.recvTransport, true);
      status_ = checkCall(ctx_, tag_, ch_.recv.tag(), ch_.prevRank);
      if (!status_.isOk()) return false;
      if (got != bytes) {
        status_ = internalError("rank %d: %s expected %zu bytes from rank %d but got %zu",
                                ctx_.rank, describeCall(tag_).c_str(), bytes, ch_.prevRank, got);
        return false;
      }
      at_.bytesDone += got;
    }
    if (useSend) {
      Waiter w = ctx_.waiter();
      if (!ch_.send.hasRoom()) note_.waiting(at_, ch_.nextRank, WaitFor::kRoom);
      sendSlot = ch_.send.acquire(w, &failure);
      if (sendSlot == nullptr) return fail(failure, ch_.nextRank, ch_.sendTransport, false);
    }
    char* output = writeOutput ? output_ + out * eltSize_ : nullptr;
    // Steps that fill a send slot pick and measure the kind of store (see slot_stream.h). Only
    // for a peer's core reading the slot from shared memory: a network FIFO's slots are read
    // by this process's own send calls, so they stay cached unless streaming is forced.
    const int kind = (useLocal ? 1 : 0) | (useRecv ? 2 : 0) | (writeOutput ? 4 : 0);
    const SlotStreamMode mode =
        ch_.send.proxy() != nullptr && ctx_.slotStream == SlotStreamMode::kAdaptive
            ? SlotStreamMode::kNever
            : ctx_.slotStream;
    const bool streamSlot = useSend && ch_.sendStream.streamNext(mode, kind, bytes);
    const bool timed = useSend && SlotStreamPolicy::measured(mode, bytes);
    const uint64_t start = timed ? slotStreamTicks() : 0;
    const bool finalize = (flags & kFinal) != 0;
    const char* local = useLocal ? input_ + in * eltSize_ : nullptr;
    const bool scales = op_.kind == RedKind::kPreMulSum || (finalize && op_.kind == RedKind::kAvg);
    if (n > 0 && streamSlot && !useRecv && output == nullptr && !scales) {
      // A plain copy of the input into a streamed slot.
      streamCopy(sendSlot, local, bytes);
    } else if (n > 0 && output != nullptr && streamOutput_ && !useLocal && !useSend) {
      // A received final chunk: straight to the output, past the caches.
      streamCopy(output, recvSlot, bytes);
    } else if (n > 0) {
      // One pass computes the result into cached memory (and a second cached destination);
      // whatever is written with streaming stores is copied from there afterwards.
      void* dst0 = nullptr;
      void* dst1 = nullptr;
      void* streamed[2] = {nullptr, nullptr};
      if (streamSlot) {
        // The output when it is cached, else the channel's scratch.
        dst0 = output != nullptr && !streamOutput_ ? static_cast<void*>(output) : scratch(bytes);
        streamed[0] = sendSlot;
        if (output != nullptr && streamOutput_) streamed[1] = output;
      } else if (output != nullptr && streamOutput_ && useSend) {
        // A streaming output is reduced into the send slot (it stays cached for the peer).
        dst0 = sendSlot;
        streamed[0] = output;
      } else {
        dst0 = output != nullptr ? static_cast<void*>(output) : sendSlot;
        dst1 = output != nullptr ? sendSlot : nullptr;
      }
      ReduceCopyArgs a;
      a.peer = recvSlot;
      a.local = local;
      a.dst0 = dst0;
      a.dst1 = dst1;
      a.count = n;
      a.type = type_;
      a.op = &op_;
      a.finalize = finalize;
      reduceCopy(a);
      for (void* d : streamed)
        if (d != nullptr) streamCopy(d, dst0, bytes);
    }
    if (timed)
      ch_.sendStream.record(kind, streamSlot, bytes,
                            static_cast<int64_t>(slotStreamTicks() - start));
    if (useSend) ch_.send.post(bytes, tag_);
    if (useRecv) ch_.recv.release();
    return true;
  }

  // A slot's worth of the channel's scratch memory (made when first needed).
  void* scratch(size_t bytes) {
    if (ch_.scratch.size() < bytes) ch_.scratch.resize(std::max(bytes, ch_.send.slotBytes()));
    return ch_.scratch.data();
  }

  bool fail(Code code, int peer, const char* transport, bool receiving) {
    status_ = connectorFailure(ctx_, tag_, at_, code, peer, transport, receiving,
                               receiving && ch_.recv.peerClosed(), ch_.recv.peerError());
    return false;
  }

  bool streamOutput_;  // write the output with non-temporal stores (large calls)
  const ExecContext& ctx_;
  HostChannel& ch_;
  const char* input_;
  char* output_;
  size_t eltSize_;
  DataType type_;
  const RedOp& op_;
  const CallTag& tag_;
  WaitNote& note_;
  WaitPlace at_;
  Status status_;
};

}  // namespace

std::string describeWait(const ExecContext& ctx, const CallTag& tag, const WaitPlace& at,
                         int peer) {
  return formatString("rank %d waits for rank %d at %s step %u of %s", ctx.rank, peer, at.algo,
                      at.step, describeCall(tag).c_str());
}

Status connectorFailure(const ExecContext& ctx, const CallTag& tag, const WaitPlace& at, Code code,
                        int peer, const char* transport, bool receiving, bool peerClosed,
                        const char* peerError) {
  const std::string where = describeWait(ctx, tag, at, peer);
  if (code == Code::kRemoteError && receiving && peerClosed && peerError[0] != '\0')
    return remoteError("%s, but that rank closed its %s connection: its communicator failed (%s)",
                       where.c_str(), transport, peerError);
  if (code == Code::kRemoteError && receiving && peerClosed)
    return remoteError(
        "%s, but that rank closed its %s connection: it exited or destroyed its communicator "
        "before finishing the same collective",
        where.c_str(), transport);
  if (code == Code::kRemoteError)
    return remoteError(
        "%s: timed out after %.0f s waiting for %s over %s (%llu of about %llu bytes received "
        "on this channel); the peer is stuck, dead or made another call (raise CHORUS_TIMEOUT if "
        "it is slow; CHORUS_DUMP=<dir> makes every rank write its pending operations for "
        "tools/chorus-waitfor)",
        where.c_str(), ctx.timeoutSeconds, receiving ? "its data" : "room to send to it", transport,
        static_cast<unsigned long long>(at.bytesDone),
        static_cast<unsigned long long>(at.bytesTotal));
  return invalidUsage("%s: interrupted, the communicator was aborted", where.c_str());
}

namespace {

// The one-rank case of every collective: out = finalize(op(in)) or a plain copy.
void localCopy(const CollArgs& args, bool reduce) {
  if (args.count == 0 || args.recvbuff == nullptr) return;
  if (!reduce) {
    if (args.sendbuff != args.recvbuff)
      memcpy(args.recvbuff, args.sendbuff, args.count * dataTypeSize(args.type));
    return;
  }
  ReduceCopyArgs a;
  a.local = args.sendbuff;
  a.dst0 = args.recvbuff;
  a.count = args.count;
  a.type = args.type;
  a.op = &args.op;
  a.finalize = true;
  reduceCopy(a);
}

template <class Shape>
void setBlockStride(Shape*, size_t) {}
void setBlockStride(RingBlockedShape* s, size_t stride) {
  s->blockStride = stride;
}

// The elements [begin, end) of count that channel c of nchannels moves: equal contiguous
// slices, each starting on a 64-byte multiple of elements so the kernels stay aligned.
void channelSlice(size_t count, size_t eltSize, int c, int nchannels, size_t* begin, size_t* end) {
  size_t align = eltSize >= 64 ? 1 : 64 / eltSize;
  size_t per = (count + nchannels - 1) / nchannels;
  per = (per + align - 1) / align * align;
  size_t b = per * static_cast<size_t>(c);
  *begin = b < count ? b : count;
  *end = b + per < count ? b + per : count;
}

// Runs channel c's share of a ring algorithm with host primitives over the user's buffers.
// With args.nchannels channels, each moves the same slice of every rank block (blocked: the
// all-gather output and reduce-scatter input, whose blocks are `count` apart) or of the buffer.
template <class Shape, class Algo>
// recvShare: the bytes this rank receives on a channel over the call, per byte of the
// channel's slice (for the wait notes: all-reduce 2(n-1)/n, all-gather and reduce-scatter n-1,
// broadcast and reduce 1, or 0 where the rank only sends).
Status runRingChannel(const ExecContext& ctx, const CollArgs& args, int c, double recvShare,
                      Shape shape, bool blocked, Algo algo) {
  const size_t elt = dataTypeSize(args.type);
  size_t begin = 0, end = args.count;
  if (args.nchannels > 1) channelSlice(args.count, elt, c, args.nchannels, &begin, &end);
  if (begin == end) return Status::ok();
  HostChannel& ch = (*ctx.channels)[c];
  // Outputs much larger than the caches are not read back soon: stream them, unless the call
  // is in place (the output lines are then the input's, already fetched, and streaming them
  // measured slower).
  const size_t outputBytes = args.count * elt * (blocked ? static_cast<size_t>(ctx.nranks) : 1);
  const bool stream = ctx.streamBytes > 0 && args.sendbuff != args.recvbuff &&
                      outputBytes >= static_cast<size_t>(ctx.streamBytes);
  WaitPlace at;
  at.algo = "ring";
  at.launch = ctx.launch;
  at.bytesTotal = static_cast<uint64_t>(recvShare * static_cast<double>((end - begin) * elt));
  HostRingPrims prims(ctx, ch, static_cast<const char*>(args.sendbuff) + begin * elt,
                      static_cast<char*>(args.recvbuff) + begin * elt, args.type, args.op, args.tag,
                      noteOf(ctx, c), at, stream);
  shape.count = end - begin;
  shape.chunkElems = ch.send.slotBytes() / elt;
  shape.nranks = ctx.nranks;
  shape.ringIndex = ctx.ringIndex;
  if (blocked) setBlockStride(&shape, args.count);
  if (!algo(prims, shape)) return prims.status();
  return Status::ok();
}

int ringPosition(const ExecContext& ctx, int rank) {
  for (int i = 0; i < ctx.nranks; ++i)
    if (ctx.ringRanks[i] == rank) return i;
  return 0;
}

}  // namespace

void hostLocal(Collective coll, const CollArgs& args) {
  localCopy(args, coll == Collective::kAllReduce || coll == Collective::kReduceScatter ||
                      coll == Collective::kReduce);
}

Status hostRingChannel(const ExecContext& ctx, Collective coll, const CollArgs& args, int channel) {
  if (args.count == 0) return Status::ok();
  CollArgs copy = args;
  switch (coll) {
    case Collective::kAllReduce:
      return runRingChannel(
          ctx, args, channel, 2.0 * (ctx.nranks - 1) / ctx.nranks, RingAllReduceShape{}, false,
          [](HostRingPrims& p, const RingAllReduceShape& s) { return ringAllReduce(p, s); });
    case Collective::kAllGather: {
      RingAllGatherShape shape{};
      shape.ringRanks = ctx.ringRanks;
      copy.op = RedOp();  // blocks are copied, never scaled
      return runRingChannel(
          ctx, copy, channel, ctx.nranks - 1, shape, true,
          [](HostRingPrims& p, const RingAllGatherShape& s) { return ringAllGather(p, s); });
    }
    case Collective::kReduceScatter: {
      RingReduceScatterShape shape{};
      shape.ringRanks = ctx.ringRanks;
      return runRingChannel(ctx, args, channel, ctx.nranks - 1, shape, true,
                            [](HostRingPrims& p, const RingReduceScatterShape& s) {
                              return ringReduceScatter(p, s);
                            });
    }
    case Collective::kBroadcast: {
      RingBroadcastShape shape{};
      shape.rootIndex = ringPosition(ctx, args.root);
      shape.rootInPlace = args.sendbuff == args.recvbuff;
      copy.op = RedOp();
      return runRingChannel(
          ctx, copy, channel, args.root == ctx.rank ? 0.0 : 1.0, shape, false,
          [](HostRingPrims& p, const RingBroadcastShape& s) { return ringBroadcast(p, s); });
    }
    case Collective::kReduce: {
      RingReduceShape shape{};
      shape.rootIndex = ringPosition(ctx, args.root);
      // The rank after the root on the ring starts the chain: it only sends.
      const bool first = ctx.ringIndex == (shape.rootIndex + 1) % ctx.nranks;
      return runRingChannel(
          ctx, args, channel, first ? 0.0 : 1.0, shape, false,
          [](HostRingPrims& p, const RingReduceShape& s) { return ringReduce(p, s); });
    }
    default:
      return internalError("collective %d has no ring algorithm", static_cast<int>(coll));
  }
}

}  // namespace chorus
