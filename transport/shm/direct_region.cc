#include "transport/shm/direct_region.h"

#include <new>
#include <string>

#include "common/log.h"

namespace chorus {

namespace {

constexpr uint64_t kDirectMagic = 0x4348524444495245ull;  // "CHRDDIRE"

std::string segmentName(const std::string& commTag, int rank) {
  return "/chorus-" + commTag + "-direct-" + std::to_string(rank);
}

// Every rank learns whether every rank succeeded; the exchange doubles as the barrier between
// the phases. Returns the first failed rank, or -1.
Result<int> firstFailedRank(Bootstrap& bootstrap, int rank, int nranks, bool ok) {
  std::vector<int32_t> flags(static_cast<size_t>(nranks), 0);
  flags[static_cast<size_t>(rank)] = ok ? 1 : 0;
  CHORUS_TRY(bootstrap.allGather(flags.data(), sizeof(int32_t)));
  for (int r = 0; r < nranks; ++r)
    if (flags[static_cast<size_t>(r)] == 0) return r;
  return -1;
}

Status checkHeader(const DirectHeader* h, int owner, int nranks, size_t bufferBytes) {
  if (h->magic != kDirectMagic || h->rank != owner || h->nranks != nranks)
    return internalError("the segment of rank %d does not hold its direct region header", owner);
  if (h->bufferBytes != bufferBytes)
    return invalidUsage(
        "rank %d made its direct region with %llu-byte buffers but this rank with %zu: every "
        "rank must use the same size",
        owner, static_cast<unsigned long long>(h->bufferBytes), bufferBytes);
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<DirectRegion>> DirectRegion::create(const TransportContext& ctx,
                                                           size_t bufferBytes) {
  const int rank = ctx.rank, nranks = ctx.nranks;
  if (ctx.bootstrap == nullptr || nranks < 1 || rank < 0 || rank >= nranks)
    return invalidArgument("direct region: rank %d of %d without a bootstrap", rank, nranks);
  if (bufferBytes < kMinBufferBytes || bufferBytes > (size_t(1) << 31))
    return invalidArgument("direct region: rank %d: buffer size %zu is out of range [%zu, 2 GiB]",
                           rank, bufferBytes, kMinBufferBytes);
  if (ctx.peers != nullptr) {
    for (int r = 0; r < nranks; ++r) {
      const PeerInfo& p = (*ctx.peers)[static_cast<size_t>(r)];
      if (!useShm((*ctx.peers)[static_cast<size_t>(rank)], p))
        return invalidUsage(
            "direct region: rank %d cannot share memory with rank %d (another host, or shared "
            "memory disabled)",
            rank, r);
    }
  }

  std::unique_ptr<DirectRegion> region(new DirectRegion());
  region->rank_ = rank;
  region->nranks_ = nranks;
  region->bufferBytes_ = bufferBytes;
  region->stride_ = (bufferBytes + kCacheLine - 1) & ~(kCacheLine - 1);
  region->segments_.resize(static_cast<size_t>(nranks));
  region->headers_.assign(static_cast<size_t>(nranks), nullptr);
  region->data_.assign(static_cast<size_t>(nranks), nullptr);
  const size_t segmentBytes = kDirectDataOffset + 4 * region->stride_;

  // Phase 1: every rank creates and initialises its own segment.
  Status created = Status::ok();
  {
    Result<ShmSegment> seg = ShmSegment::create(segmentName(ctx.commTag, rank), segmentBytes);
    if (seg.isOk()) {
      auto* h = new (seg.value().data()) DirectHeader();
      for (DirectCounter& c : h->counters) {
        c.value.store(0, std::memory_order_relaxed);
        c.how[0].store(0, std::memory_order_relaxed);
        c.how[1].store(0, std::memory_order_relaxed);
        c.sleepers.store(0, std::memory_order_relaxed);
      }
      h->magic = kDirectMagic;
      h->bufferBytes = bufferBytes;
      h->rank = rank;
      h->nranks = nranks;
      region->segments_[static_cast<size_t>(rank)] = seg.take();
    } else {
      created = seg.status();
    }
  }
  Result<int> failed = firstFailedRank(*ctx.bootstrap, rank, nranks, created.isOk());
  if (!failed.isOk())
    return failed.status().withContext("direct region: rank " + std::to_string(rank));
  if (!created.isOk()) return created.withContext(formatString("direct region: rank %d", rank));
  if (failed.value() >= 0)
    return remoteError(
        "direct region: rank %d: rank %d could not create its shared memory segment (its own "
        "error says why; /dev/shm may be full)",
        rank, failed.value());

  // Phase 2: every rank maps every peer's segment.
  Status opened = Status::ok();
  for (int r = 0; r < nranks && opened.isOk(); ++r) {
    if (r == rank) continue;
    Result<ShmSegment> seg = ShmSegment::open(segmentName(ctx.commTag, r), segmentBytes);
    if (!seg.isOk()) {
      opened = seg.status();
      break;
    }
    opened =
        checkHeader(static_cast<const DirectHeader*>(seg.value().data()), r, nranks, bufferBytes);
    region->segments_[static_cast<size_t>(r)] = seg.take();
  }
  failed = firstFailedRank(*ctx.bootstrap, rank, nranks, opened.isOk());
  if (!failed.isOk())
    return failed.status().withContext("direct region: rank " + std::to_string(rank));
  if (!opened.isOk()) return opened.withContext(formatString("direct region: rank %d", rank));
  if (failed.value() >= 0)
    return remoteError(
        "direct region: rank %d: rank %d could not map its peers' shared memory (its own error "
        "says why)",
        rank, failed.value());

  // Every rank has mapped every segment: the names can go, so nothing is left in /dev/shm even
  // if a process is killed later.
  region->segments_[static_cast<size_t>(rank)].unlink();
  for (int r = 0; r < nranks; ++r) {
    char* base = static_cast<char*>(region->segments_[static_cast<size_t>(r)].data());
    region->headers_[static_cast<size_t>(r)] = reinterpret_cast<DirectHeader*>(base);
    region->data_[static_cast<size_t>(r)] = base + kDirectDataOffset;
  }
  LOG_TRACE(kSubsysShm, "direct region %s: %d ranks, %zu-byte buffers", ctx.commTag.c_str(), nranks,
            bufferBytes);
  return region;
}

Code DirectRegion::waitAtLeast(int r, DirectCounterKind kind, uint64_t target,
                               Waiter& waiter) const {
  DirectCounter& c = counter(r, kind);
  for (;;) {
    uint64_t v = c.value.load(std::memory_order_acquire);
    if (v >= target) return Code::kSuccess;
    Code code = waiter.pause(c.value, v, c.sleepers);
    if (code != Code::kInProgress) {
      // A last look: the value may have arrived while the deadline passed.
      if (c.value.load(std::memory_order_acquire) >= target) return Code::kSuccess;
      return code;
    }
  }
}

}  // namespace chorus
