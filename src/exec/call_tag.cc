#include "exec/call_tag.h"

#include "common/log.h"
#include "exec/host_executor.h"

namespace chorus {

namespace {

constexpr uint32_t kNoOp = 0xff;

bool reduces(Collective coll) {
  return coll == Collective::kAllReduce || coll == Collective::kReduceScatter ||
         coll == Collective::kReduce;
}

}  // namespace

CallTag collectiveTag(Collective coll, const CollArgs& args, uint64_t seq) {
  CallTag t;
  t.seq = seq;
  t.count = args.count;
  const uint32_t op = reduces(coll) ? static_cast<uint32_t>(args.op.kind) : kNoOp;
  t.what = (static_cast<uint32_t>(coll) + 1) | static_cast<uint32_t>(args.type) << 8 | op << 16;
  t.root = coll == Collective::kBroadcast || coll == Collective::kReduce ? args.root : -1;
  return t;
}

CallTag sendTag(uint64_t seq, size_t bytes) {
  CallTag t;
  t.seq = seq;
  t.count = bytes;
  t.what = kSendKind;
  return t;
}

std::string describeCall(const CallTag& t) {
  const uint32_t kind = t.what & 0xff;
  const unsigned long long seq = static_cast<unsigned long long>(t.seq);
  const unsigned long long count = static_cast<unsigned long long>(t.count);
  if (kind == kSendKind) return formatString("ncclSend #%llu (%llu bytes)", seq, count);
  if (kind == 0) return "an untagged call";
  if (kind > static_cast<uint32_t>(Collective::kCount))
    return formatString("an unknown call (kind %u)", kind);
  const auto coll = static_cast<Collective>(kind - 1);
  std::string s = formatString("nccl%s #%llu (%llu x %s", collectiveName(coll), seq, count,
                               dataTypeName(static_cast<DataType>((t.what >> 8) & 0xff)));
  const uint32_t op = (t.what >> 16) & 0xff;
  if (op != kNoOp) s += formatString(", %s", redKindName(static_cast<RedKind>(op)));
  if (t.root >= 0) s += formatString(", root %d", t.root);
  return s + ")";
}

namespace {

Status mismatch(const ExecContext& ctx, const CallTag& mine, const CallTag& theirs, int peer) {
  if ((mine.what & 0xff) == kSendKind) {
    // The receiving side of a send/recv pair: the k-th receive from a peer takes its k-th send.
    return invalidUsage(
        "rank %d: ncclRecv #%llu from rank %d expects %llu bytes, but the matching call of "
        "rank %d is %s; a receive must post the size of its send (sends and receives between "
        "two ranks match in the order they were posted; CHORUS_CHECK_CALLS=0 turns this check "
        "off)",
        ctx.rank, static_cast<unsigned long long>(mine.seq), peer,
        static_cast<unsigned long long>(mine.count), peer, describeCall(theirs).c_str());
  }
  return invalidUsage(
      "rank %d: %s does not match rank %d's call at this point, %s; every rank must make the "
      "same collective calls in the same order, with the same count, type, operation and root "
      "(CHORUS_CHECK_CALLS=0 turns this check off)",
      ctx.rank, describeCall(mine).c_str(), peer, describeCall(theirs).c_str());
}

}  // namespace

Status checkCall(const ExecContext& ctx, const CallTag& mine, const CallTag& theirs, int peer) {
  if (!ctx.checkCalls || theirs.what == 0 || theirs == mine) return Status::ok();
  return reportMismatch(ctx, mismatch(ctx, mine, theirs, peer));
}

Status reportMismatch(const ExecContext& ctx, const Status& s) {
  LOG_WARN(kSubsysColl, "%s", s.message().c_str());
  // The other channels of this call, and any later call, would wait for data that never comes.
  if (ctx.errors != nullptr) ctx.errors->reportAsyncError(s);
  return s;
}

WaitNote& spareWaitNote() {
  static WaitNote note;
  return note;
}

const char* waitForName(WaitFor w) {
  static const char* const kNames[] = {"nothing", "data", "room", "staged", "reduced", "done"};
  const auto i = static_cast<size_t>(w);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

uint32_t tagDigest(const CallTag& t) {
  // Independent multiplies (no chain through a running hash): a few cycles on every direct
  // all-reduce.
  const uint64_t h =
      t.seq * 0x9e3779b97f4a7c15ull ^ t.count * 0xc2b2ae3d27d4eb4full ^
      (uint64_t{t.what} | uint64_t{static_cast<uint32_t>(t.root)} << 32) * 0x165667b19e3779f9ull;
  const uint32_t d = static_cast<uint32_t>(h >> 32) ^ static_cast<uint32_t>(h);
  return d == 0 ? 1 : d;
}

}  // namespace chorus
