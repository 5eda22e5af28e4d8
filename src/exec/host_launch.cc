#include "exec/host_launch.h"

#include <algorithm>
#include <atomic>

#include "algorithms/selector.h"
#include "exec/host_direct.h"
#include "exec/host_rd.h"

namespace chorus {

namespace {

// Holds each channel thread of a launch until all of them finished the same collective.
struct LocalBarrier {
  std::atomic<uint64_t> arrived{0};
  std::atomic<uint32_t> sleepers{0};

  void arriveAndWait(uint64_t target, const ExecContext& ctx) {
    arrived.fetch_add(1, std::memory_order_acq_rel);
    wakeSleepers(arrived, sleepers);
    Waiter waiter(0, nullptr, ctx.spinCount);
    waiter.setYieldMicros(ctx.yieldMicros);
    uint64_t seen;
    while ((seen = arrived.load(std::memory_order_acquire)) < target)
      waiter.pause(arrived, seen, sleepers);
  }
};

Status runWork(const ExecContext& ctx, const HostWork& w, int channel,
               const LaunchResources& resources) {
  if (w.args.count == 0) return Status::ok();
  if (ctx.nranks == 1) {
    if (channel == 0) hostLocal(w.coll, w.args);
    return Status::ok();
  }
  if (w.windowed) {
    // One thread: the usual algorithm, when the ranks fall back to it, runs on one channel.
    if (channel != 0) return Status::ok();
    if (resources.direct == nullptr || resources.windows == nullptr)
      return internalError("window collective without a shared region");
    bool runUsual = false;
    Status s = hostWindowCollective(ctx, w.coll, w.args, w.sendWindow, w.recvWindow,
                                    *resources.windows, *resources.direct, &runUsual);
    if (!s.isOk() || !runUsual) return s;
  }
  switch (w.algo) {
    case Algorithm::kRing:
      if (channel >= w.args.nchannels) return Status::ok();
      return hostRingChannel(ctx, w.coll, w.args, channel);
    case Algorithm::kTree:
      if (channel != 0) return Status::ok();
      if (resources.trees == nullptr) return internalError("tree all-reduce without tree links");
      return hostAllReduceTree(ctx, w.args, *resources.trees);
    case Algorithm::kOneShot:
    case Algorithm::kTwoShot:
      if (channel != 0) return Status::ok();
      if (resources.direct == nullptr || resources.directStores == nullptr)
        return internalError("direct all-reduce without a shared region");
      return hostAllReduceDirect(ctx, w.args, *resources.direct, w.algo == Algorithm::kTwoShot,
                                 *resources.directStores);
    case Algorithm::kRd:
      if (channel != 0) return Status::ok();
      if (resources.rd == nullptr)
        return internalError("recursive-doubling all-reduce without partner links");
      return hostAllReduceRd(ctx, w.args, *resources.rd);
    default:
      return internalError("no executor for algorithm %d", static_cast<int>(w.algo));
  }
}

}  // namespace

Status hostLaunch(const ExecContext& ctx, const HostWork* works, size_t n,
                  const LaunchResources& resources) {
  int nthreads = 1;
  if (ctx.nranks > 1)
    for (size_t k = 0; k < n; ++k)
      if (works[k].algo == Algorithm::kRing) nthreads = std::max(nthreads, works[k].args.nchannels);
  nthreads = std::min(nthreads, static_cast<int>(ctx.channels->size()));
  if (nthreads <= 1 || ctx.workers == nullptr) {
    for (size_t k = 0; k < n; ++k) CHORUS_TRY(runWork(ctx, works[k], 0, resources));
    return Status::ok();
  }
  Status results[kMaxChannels];
  LocalBarrier barrier;
  ctx.workers->run(nthreads, [&](int c) {
    for (size_t k = 0; k < n; ++k) {
      // After a failure this thread only keeps the barrier so that the others finish.
      if (results[c].isOk()) results[c] = runWork(ctx, works[k], c, resources);
      if (k + 1 < n) barrier.arriveAndWait((k + 1) * nthreads, ctx);
    }
  });
  for (int c = 0; c < nthreads; ++c)
    if (!results[c].isOk()) return results[c];
  return Status::ok();
}

}  // namespace chorus
