// Collective-mismatch detection: every slot a rank sends carries the tag of the call it
// belongs to (connector.h), and the receiving rank compares it with its own call before it
// uses the data. Ranks that disagree on the collective, count, type, operation or root, or on
// how many calls they made, then both fail with ncclInvalidUsage naming both calls, instead of
// hanging or mixing data of different calls. Costs a few stores per slot
// (CHORUS_CHECK_CALLS=0 leaves out the comparison).
#pragma once

#include <cstdint>
#include <string>

#include "algorithms/algorithm.h"
#include "common/status.h"
#include "exec/reduce.h"
#include "transport/connector.h"

namespace chorus {

struct CollArgs;
struct ExecContext;

// CallTag::what of a sent point-to-point message (collectives use their Collective + 1).
constexpr uint32_t kSendKind = 0x40;

// The tag of call number seq of a collective (args.count, type, op and, where it matters,
// root).
CallTag collectiveTag(Collective coll, const CollArgs& args, uint64_t seq);
// The tag of the seq-th send of `bytes` bytes from one rank to another (counted per pair).
CallTag sendTag(uint64_t seq, size_t bytes);

// "ncclAllReduce #12 (1024 x float32, sum)" or "ncclSend #3 (4096 bytes)".
std::string describeCall(const CallTag& tag);

// ok when theirs (a received slot's tag, from peer) matches mine, when the sender did not tag
// it, or when ctx does not check; otherwise ncclInvalidUsage naming both calls.
Status checkCall(const ExecContext& ctx, const CallTag& mine, const CallTag& theirs, int peer);

// Logs a mismatch found by the caller and tells ctx.errors (every wait of the communicator
// stops); returns it.
Status reportMismatch(const ExecContext& ctx, const Status& mismatch);

// A 32-bit digest of a tag (never 0), for places with room for one word only.
uint32_t tagDigest(const CallTag& tag);

}  // namespace chorus
