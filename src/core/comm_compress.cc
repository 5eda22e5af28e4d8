// The compressed all-reduce: float32 and float64 sum and average all-reduces of a host
// communicator whose compression is on (CHORUS_COMPRESS, chorusCommSetCompression) send their
// values in a lower precision (exec/compress.h: bfloat16, or fp8 e4m3 with a scale per chunk).
//
// The buffer is cut into nranks blocks, block r owned by rank r. Every rank encodes its input
// plus what its last encodings of this buffer lost (error feedback) and sends each owner its
// block; each owner decodes and sums the nranks blocks in rank order, in the values' own type,
// encodes the sum (with an error feedback of its own) and sends that to every rank; every rank,
// the owner too, decodes the owners' blocks into its output. Every output value thus comes
// from the same bytes on every rank: all ranks end with the same bits. Per rank, 2 (n-1)/n of
// the buffer crosses the wire, as in a ring all-reduce, in the compressed size.
//
// The exchanges are point-to-point transfers between every pair of ranks (connected on the
// first call): meant for the tens of ranks whose slow links make compression worth it.
#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "core/comm.h"
#include "exec/compress.h"

namespace chorus {

namespace {

constexpr size_t kMaxFeedback = 64;

}  // namespace

bool Communicator::compresses(const HostWork& w) const {
  return compression_.load(std::memory_order_relaxed) != 0 && !device_ && nranks_ > 1 &&
         w.coll == Collective::kAllReduce && w.args.count > 0 && compressible(w.args.type) &&
         (w.args.op.kind == RedKind::kSum || w.args.op.kind == RedKind::kAvg);
}

Status Communicator::runCompressed(const HostWork& w) {
  const CollArgs& args = w.args;
  const Compression mode = static_cast<Compression>(compression_.load());
  const size_t elt = dataTypeSize(args.type);
  const int n = nranks_;
  const size_t block = (args.count + n - 1) / n;
  auto first = [&](int r) { return std::min(args.count, block * r); };
  auto length = [&](int r) { return std::min(args.count, block * (r + 1)) - first(r); };
  const size_t mine = length(rank_);

  // This buffer's error feedback (zero the first time, or after the mode changed).
  Feedback* fb = nullptr;
  for (Feedback& f : feedback_)
    if (f.buff == args.sendbuff && f.count == args.count && f.type == args.type &&
        f.mode == static_cast<int>(mode))
      fb = &f;
  if (fb == nullptr) {
    if (feedback_.size() < kMaxFeedback) {
      feedback_.emplace_back();
      fb = &feedback_.back();
    } else {
      fb = &*std::min_element(
          feedback_.begin(), feedback_.end(),
          [](const Feedback& a, const Feedback& b) { return a.lastUse < b.lastUse; });
    }
    fb->buff = args.sendbuff;
    fb->count = args.count;
    fb->type = args.type;
    fb->mode = static_cast<int>(mode);
    fb->input.assign(args.count * elt, 0);  // zero bits are 0.0 in both types
    fb->block.assign(mine * elt, 0);
  }
  fb->lastUse = ++feedbackClock_;

  // Staging: the encoded blocks this rank sends, those it receives for its block, its reduced
  // block, and the owners' encoded blocks.
  // at[r]: where block r starts in sendEnc and owners; every received block is this rank's.
  std::vector<size_t> at(n + 1, 0);
  for (int r = 0; r < n; ++r) at[r + 1] = at[r] + compressedBytes(mode, length(r));
  const size_t mineEnc = compressedBytes(mode, mine);
  const size_t sumBytes = mine * elt;
  compressStage_.resize(at[n] + n * mineEnc + sumBytes + at[n]);
  char* sendEnc = compressStage_.data();
  char* recvEnc = sendEnc + at[n];
  char* sum = recvEnc + n * mineEnc;
  char* owners = sum + sumBytes;

  const char* in = static_cast<const char*>(args.sendbuff);
  for (int r = 0; r < n; ++r)
    compressValues(mode, args.type, in + first(r) * elt, fb->input.data() + first(r) * elt,
                   length(r), sendEnc + at[r]);
  // Every owner gets its block from every rank.
  std::vector<P2pOp> ops;
  auto exchange = [&](const std::vector<P2pOp>& list) -> Status {
    CHORUS_TRY(connectP2p(list));
    return runP2p(list);
  };
  // Both ends of a pair compute the same sizes, so both leave out an empty transfer.
  auto add = [&ops](bool isSend, int peer, char* buff, size_t bytes) {
    if (bytes == 0) return;
    P2pOp op;
    op.isSend = isSend;
    op.peer = peer;
    if (isSend)
      op.sendbuff = buff;
    else
      op.recvbuff = buff;
    op.bytes = bytes;
    ops.push_back(op);
  };
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    add(true, r, sendEnc + at[r], at[r + 1] - at[r]);
    add(false, r, recvEnc + r * mineEnc, mineEnc);
  }
  CHORUS_TRY(exchange(ops).withContext(
      formatString("rank %d: compressed ncclAllReduce (%s), sending the blocks to their owners",
                   rank_, compressionName(mode))));
  // The owner's sum, in rank order, in the values' own type.
  memset(sum, 0, sumBytes);
  for (int r = 0; r < n; ++r)
    decompressValues(mode, args.type, r == rank_ ? sendEnc + at[rank_] : recvEnc + r * mineEnc,
                     mine, sum, true);
  if (args.op.kind == RedKind::kAvg) {
    // The reduction kernels' own division by the communicator's size.
    ReduceCopyArgs a;
    a.local = sum;
    a.dst0 = sum;
    a.count = mine;
    a.type = args.type;
    a.op = &args.op;
    a.finalize = true;
    reduceCopy(a);
  }
  compressValues(mode, args.type, sum, fb->block.data(), mine, owners + at[rank_]);
  // Every rank gets every owner's block.
  ops.clear();
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    add(true, r, owners + at[rank_], at[rank_ + 1] - at[rank_]);
    add(false, r, owners + at[r], at[r + 1] - at[r]);
  }
  CHORUS_TRY(exchange(ops).withContext(
      formatString("rank %d: compressed ncclAllReduce (%s), sending the reduced blocks", rank_,
                   compressionName(mode))));
  char* out = static_cast<char*>(args.recvbuff);
  for (int r = 0; r < n; ++r)
    decompressValues(mode, args.type, owners + at[r], length(r), out + first(r) * elt, false);

  // Sent: every block but this rank's own, then its reduced block to every peer.
  uint64_t wire = 0, raw = 0;
  for (int r = 0; r < n; ++r) {
    if (r == rank_) continue;
    wire += (at[r + 1] - at[r]) + (at[rank_ + 1] - at[rank_]);
    raw += (length(r) + mine) * elt;
  }
  compressRaw_.fetch_add(raw);
  compressWire_.fetch_add(wire);
  int sizeClass = 0;
  while (sizeClass < 63 && (size_t{2} << sizeClass) <= args.count * elt) ++sizeClass;
  if (!(compressLogged_ & (uint64_t{1} << sizeClass))) {
    compressLogged_ |= uint64_t{1} << sizeClass;
    if (rank_ == 0)
      LOG_INFO(kSubsysTuning,
               "AllReduce of %zu x %s compressed to %s: %llu bytes sent for %llu uncompressed",
               args.count, dataTypeName(args.type), compressionName(mode),
               static_cast<unsigned long long>(wire), static_cast<unsigned long long>(raw));
  }
  return Status::ok();
}

}  // namespace chorus
