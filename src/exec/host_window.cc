#include "exec/host_window.h"

#include <cstring>

#include "algorithms/direct_allreduce.h"
#include "exec/call_tag.h"
#include "exec/stream_copy.h"
#include "transport/shm/direct_region.h"

namespace chorus {

namespace {

constexpr uint32_t kNoWindow = kMaxWindowId;
constexpr uint32_t kInPlaceFlag = 0x80000000u;  // in WindowPlace::sendId: the call is in place

// What a rank publishes in its staged counter's inline data for a window call.
struct WindowPlace {
  // The windows' ids; sendId also carries kInPlaceFlag.
  uint32_t sendId;
  uint32_t recvId;
  uint64_t sendOffset;
  uint64_t recvOffset;
};
static_assert(sizeof(WindowPlace) <= kDirectInlineBytes, "a place fits in the counter's line");

// The call as every rank must make it; never 0 (0 marks the direct all-reduce).
uint32_t describe(Collective coll, const CollArgs& args) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  };
  mix(static_cast<uint64_t>(coll));
  mix(args.count);
  mix(static_cast<uint64_t>(args.type));
  mix(static_cast<uint64_t>(args.op.kind));
  mix(coll == Collective::kBroadcast ? static_cast<uint64_t>(args.root) : 0);
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1u;
}

class WindowCall {
 public:
  WindowCall(const ExecContext& ctx, Collective coll, const CollArgs& args,
             const HostWindowList& windows, DirectRegion& region)
      : ctx_(ctx), coll_(coll), args_(args), windows_(windows), region_(region) {}

  // Publishes this rank's places and waits for every peer's.
  // Also learns whether any rank makes the call in place.
  bool arrive(const WindowRef& send, const WindowRef& recv) {
    at_.algo = "window";
    at_.launch = ctx_.launch;
    ++at_.step;
    sequence_ = region_.nextSequence();
    slot_ = static_cast<int>(sequence_ % 2);
    // With calls checked, the whole tag (call_tag.h), so that a rank that made another number
    // of calls before this one fails too.
    desc_ = ctx_.checkCalls ? tagDigest(args_.tag) | 1u : describe(coll_, args_);
    DirectCounter& own = region_.counter(ctx_.rank, DirectCounterKind::kStaged);
    const bool inPlace = args_.sendbuff == args_.recvbuff;
    anyInPlace_ = inPlace;
    WindowPlace place{(send.window ? send.window->id : kNoWindow) | (inPlace ? kInPlaceFlag : 0),
                      recv.window ? recv.window->id : kNoWindow, send.offset, recv.offset};
    std::memcpy(own.inlineData[slot_], &place, sizeof(place));
    region_.call(ctx_.rank, slot_) = args_.tag;
    own.how[slot_].store(desc_, std::memory_order_relaxed);
    own.publish(sequence_);
    for (int q = 0; q < ctx_.nranks; ++q) {
      if (q == ctx_.rank) continue;
      if (!wait(q, DirectCounterKind::kStaged, "arrive")) return false;
      const uint32_t how =
          region_.counter(q, DirectCounterKind::kStaged).how[slot_].load(std::memory_order_relaxed);
      if (how != desc_) {
        status_ = reportMismatch(
            ctx_, invalidUsage("rank %d: %s on window buffers does not match rank %d's call at "
                               "this point, %s %s; every rank must make the same calls (same "
                               "collective, count, type, operation and root, in the same "
                               "order), all of them with buffers of windows registered together",
                               ctx_.rank, describeCall(args_.tag).c_str(), q,
                               describeCall(region_.call(q, slot_)).c_str(),
                               (how & 1) == 0 ? "on other buffers" : "on window buffers"));
        return false;
      }
      anyInPlace_ = anyInPlace_ || (placeOf(q).sendId & kInPlaceFlag) != 0;
    }
    return true;
  }
  bool anyInPlace() const { return anyInPlace_; }

  // The reduction operands at element byte `offset` of every rank's input (`bytes` each, this
  // rank's being `input`), this rank's first, then the next ranks'; false if one is missing.
  bool operands(const char* input, size_t bytes, size_t offset, const char** srcs) {
    for (int j = 0; j < ctx_.nranks; ++j) {
      const int q = (ctx_.rank + j) % ctx_.nranks;
      const char* src = q == ctx_.rank ? input : peerBuffer(q, true, bytes);
      if (src == nullptr) return false;
      srcs[j] = src + offset;
    }
    return true;
  }

  WindowPlace placeOf(int q) const {
    WindowPlace p;
    std::memcpy(&p, region_.counter(q, DirectCounterKind::kStaged).inlineData[slot_], sizeof(p));
    return p;
  }

  // Rank q's send or receive buffer as published, checked to hold `bytes` of its window.
  const char* peerBuffer(int q, bool sendSide, size_t bytes) {
    const WindowPlace p = placeOf(q);
    const uint32_t id = sendSide ? p.sendId & ~kInPlaceFlag : p.recvId;
    const uint64_t offset = sendSide ? p.sendOffset : p.recvOffset;
    const HostWindow* w = nullptr;
    for (const auto& candidate : windows_)
      if (candidate->id == id) w = candidate.get();
    const size_t have = w == nullptr ? 0 : w->rankBytes[static_cast<size_t>(q)];
    if (w == nullptr || !w->shared || offset > have || bytes > have - offset) {
      status_ = invalidUsage(
          "rank %d: nccl%s on window buffers: rank %d's %s buffer is not %zu bytes inside a window "
          "this rank can read (window %u, offset %llu); every rank must pass buffers of windows "
          "registered together",
          ctx_.rank, collectiveName(coll_), q, sendSide ? "send" : "receive", bytes, id,
          static_cast<unsigned long long>(offset));
      return nullptr;
    }
    return w->rankBase[static_cast<size_t>(q)] + offset;
  }

  bool wait(int q, DirectCounterKind kind, const char* what) {
    return waitFor(q, kind, sequence_, what);
  }
  bool waitFor(int q, DirectCounterKind kind, uint64_t target, const char* what) {
    const std::atomic<uint64_t>& value = region_.counter(q, kind).value;
    for (int i = 0; i < kPollsBeforeWait; ++i)
      if (value.load(std::memory_order_acquire) >= target) return true;
    noteOf(ctx_, 0).waiting(at_, q,
                            kind == DirectCounterKind::kStaged    ? WaitFor::kStaged
                            : kind == DirectCounterKind::kReduced ? WaitFor::kReduced
                                                                  : WaitFor::kDone);
    Waiter w = ctx_.waiter();
    Code c = region_.waitAtLeast(q, kind, target, w);
    if (c == Code::kSuccess) return true;
    const std::string where = describeWait(ctx_, args_.tag, at_, q);
    if (c == Code::kRemoteError) {
      status_ = remoteError(
          "%s on window buffers: timed out after %.0f s waiting for it to %s; the peer is "
          "stuck, dead or did not make the same call (raise CHORUS_TIMEOUT if it is slow; "
          "CHORUS_DUMP=<dir> makes every rank write its pending operations for "
          "tools/chorus-waitfor)",
          where.c_str(), ctx_.timeoutSeconds, what);
    } else {
      status_ = invalidUsage("%s on window buffers: interrupted, the communicator was aborted",
                             where.c_str());
    }
    return false;
  }

  void publish(DirectCounterKind kind) { region_.counter(ctx_.rank, kind).publish(sequence_); }
  // Marks this rank done with its peers' buffers, and waits until the peers that read this
  // rank's buffers (every rank, or none) are done with them.
  bool leave(bool waitForPeers) {
    publish(DirectCounterKind::kDone);
    if (!waitForPeers) return true;
    for (int q = 0; q < ctx_.nranks; ++q)
      if (q != ctx_.rank && !wait(q, DirectCounterKind::kDone, "finish reading")) return false;
    return true;
  }

  const Status& status() const { return status_; }

 private:
  static constexpr int kPollsBeforeWait = 64;
  const ExecContext& ctx_;
  Collective coll_;
  const CollArgs& args_;
  const HostWindowList& windows_;
  DirectRegion& region_;
  uint64_t sequence_ = 0;
  int slot_ = 0;
  uint32_t desc_ = 0;
  WaitPlace at_;
  bool anyInPlace_ = false;
  Status status_;
};

// The output copy: streamed past the caches when the output is large (as the ring's).
void copyOut(char* dst, const char* src, size_t bytes, bool stream) {
  if (bytes == 0) return;
  if (stream)
    streamCopy(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

// dst[0, count) = op over srcs[0..n) (n >= 2) at the same elements, in that order,
// finalised; dst may be srcs[0].
void reduceShare(char* dst, const char* const* srcs, int n, size_t count, const CollArgs& args) {
  ReduceCopyArgs a;
  a.dst0 = dst;
  a.count = count;
  a.type = args.type;
  a.op = &args.op;
  for (int k = 1; k < n; ++k) {
    a.peer = k == 1 ? srcs[0] : dst;
    a.local = srcs[k];
    a.finalize = k == n - 1;
    reduceCopy(a);
  }
}

// Whether an output of `bytes` is written past the caches (from CHORUS_STREAM_BYTES, as the
// ring's outputs).
bool streamed(const ExecContext& ctx, size_t bytes) {
  return ctx.streamBytes > 0 && bytes >= static_cast<size_t>(ctx.streamBytes);
}

}  // namespace

Status hostWindowCollective(const ExecContext& ctx, Collective coll, const CollArgs& args,
                            const WindowRef& send, const WindowRef& recv,
                            const HostWindowList& windows, DirectRegion& region, bool* runUsual) {
  *runUsual = false;
  if (args.count == 0) return Status::ok();
  if (region.broken())
    return invalidUsage(
        "rank %d: nccl%s on window buffers: an earlier collective of this communicator through "
        "shared memory failed, so its ranks are out of step; destroy the communicator and "
        "create a new one",
        ctx.rank, collectiveName(coll));
  if (args.op.kind == RedKind::kPreMulSum || ctx.nranks < 2 || ctx.nranks > kMaxWindowRanks)
    return internalError("rank %d: nccl%s cannot run on window buffers", ctx.rank,
                         collectiveName(coll));
  const int n = ctx.nranks, me = ctx.rank;
  const size_t elt = dataTypeSize(args.type);
  const size_t block = args.count * elt;
  const char* input = static_cast<const char*>(args.sendbuff);
  char* output = static_cast<char*>(args.recvbuff);
  WindowCall call(ctx, coll, args, windows, region);
  bool ok = call.arrive(send, recv);
  bool readers = true;                // the peers read this rank's buffers
  const char* srcs[kMaxWindowRanks];  // a reduction's operands, in the order combined
  switch (coll) {
    case Collective::kAllReduce: {
      if (ok && call.anyInPlace() && block < ctx.windowInPlaceBytes) {
        // In place, a rank writes the lines its peers read from it in the same call and in the
        // next one; below this size the usual algorithms, whose peers read staged copies,
        // measured faster. Every rank saw the same flags, so all of them go there.
        *runUsual = true;
        return Status::ok();
      }
      if (ok && !call.anyInPlace() && block * static_cast<size_t>(n) <= ctx.windowOneShotBytes) {
        // Nobody writes an input during the call: every rank reduces all of them itself.
        ok = call.operands(input, block, 0, srcs);
        if (ok) reduceShare(output, srcs, n, args.count, args);
        break;
      }
      // Two-shot: rank r reduces share r of every input (its own operand first, then the
      // next ranks') into its output, then copies the other shares from the peers' outputs.
      const size_t align = kCacheLine / elt > 0 ? kCacheLine / elt : 1;
      const size_t b = directShareBegin(args.count, n, align, me);
      const size_t e = directShareBegin(args.count, n, align, me + 1);
      if (ok && e > b) ok = call.operands(input, block, b * elt, srcs);
      if (ok && e > b) reduceShare(output + b * elt, srcs, n, e - b, args);
      if (ok) call.publish(DirectCounterKind::kReduced);
      const bool stream = input != output && streamed(ctx, block);
      for (int j = 1; ok && j < n; ++j) {
        const int q = (me + j) % n;
        const size_t qb = directShareBegin(args.count, n, align, q);
        const size_t qe = directShareBegin(args.count, n, align, q + 1);
        if (qe == qb) continue;
        const char* peerOut = call.peerBuffer(q, false, block);
        ok = peerOut != nullptr && call.wait(q, DirectCounterKind::kReduced, "reduce its share");
        if (ok) copyOut(output + qb * elt, peerOut + qb * elt, (qe - qb) * elt, stream);
      }
      break;
    }
    case Collective::kAllGather: {
      const bool stream = streamed(ctx, block * static_cast<size_t>(n));
      if (ok && input != output + me * block) copyOut(output + me * block, input, block, stream);
      for (int j = 1; ok && j < n; ++j) {
        const int q = (me + j) % n;
        const char* peerIn = call.peerBuffer(q, true, block);
        ok = peerIn != nullptr;
        if (ok) copyOut(output + q * block, peerIn, block, stream);
      }
      break;
    }
    case Collective::kReduceScatter: {
      ok = ok && call.operands(input, block * static_cast<size_t>(n), me * block, srcs);
      if (ok) reduceShare(output, srcs, n, args.count, args);
      break;
    }
    case Collective::kBroadcast: {
      readers = me == args.root;
      const bool stream = streamed(ctx, block);
      if (ok && me == args.root) {
        if (input != output) copyOut(output, input, block, stream);
      } else if (ok) {
        const char* rootIn = call.peerBuffer(args.root, true, block);
        ok = rootIn != nullptr;
        if (ok) copyOut(output, rootIn, block, stream);
      }
      break;
    }
    default:
      region.markBroken();
      return internalError("rank %d: nccl%s cannot run on window buffers", me,
                           collectiveName(coll));
  }
  if (ok) ok = call.leave(readers);
  if (!ok) {
    region.markBroken();
    return call.status();
  }
  return Status::ok();
}

}  // namespace chorus
