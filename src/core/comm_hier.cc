// The hierarchical algorithm: a collective over several hosts, each with L ranks, run in phases
// over two communicators made from this one (ncclCommSplit's exchange): the L ranks of this
// rank's host, and the H ranks, one per host, that share this rank's local index. Each phase is
// an ordinary call on one of them, so each gets its own selection (ring, tree, recursive
// doubling, direct) and its own transports (shared memory within a host, the network across).
//
//   all-reduce      reduce-scatter within the host (rank j keeps block j of L), all-reduce of
//                   that block across hosts, all-gather within the host. A count that L does
//                   not divide runs through a staging buffer padded to L equal blocks.
//   all-gather      all-gather across hosts (the blocks of local index j), all-gather of those
//                   within the host, then one pass that puts every block at its rank's place.
//   reduce-scatter  the reverse: one pass that orders the blocks by local index, then host;
//                   reduce-scatter within the host, then across hosts.
//   broadcast       across hosts among the root's local index, then within every host.
//
// Only the last phase finalises: Avg sums until the cross-host (or last) phase divides by the
// size of this communicator, and PreMulSum scales each rank's input in the first phase only.
// Every final value is computed by one rank and then copied, so all ranks end bitwise equal.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "algorithms/cost_model.h"
#include "algorithms/selector.h"
#include "bootstrap/root.h"
#include "common/log.h"
#include "core/comm.h"

namespace chorus {

namespace {

// How often the making of the phase communicators looks for ranks that went away.
constexpr int kHierWatchMs = 20;

// Where this rank sits: its host's index in hosts (ordered by lowest rank) and its index
// among that host's ranks.
void placeOf(const std::vector<std::vector<int>>& hosts, int rank, int* host, int* local) {
  for (size_t h = 0; h < hosts.size(); ++h)
    for (size_t j = 0; j < hosts[h].size(); ++j)
      if (hosts[h][j] == rank) {
        *host = static_cast<int>(h);
        *local = static_cast<int>(j);
        return;
      }
}

// The operator of a phase: PreMulSum scales only in the first phase (each input once), Avg
// divides only in the last (by the whole communicator's size), both sum otherwise.
RedOp phaseOp(const RedOp& op, bool first, bool last, int nranks) {
  RedOp r = op;
  if (op.kind == RedKind::kPreMulSum && !first) r.kind = RedKind::kSum;
  if (op.kind == RedKind::kAvg) r.kind = last ? RedKind::kAvg : RedKind::kSum;
  r.nranks = nranks;
  return r;
}

}  // namespace

void Communicator::failHier(const Status& failure) {
  std::lock_guard<std::mutex> lock(hierMutex_);
  // Phase communicators still being made would wait for ranks that may be gone.
  hierCancel_.cancel();
  if (hierLocal_) hierLocal_->reportAsyncError(failure);
  if (hierCross_) hierCross_->reportAsyncError(failure);
}

void Communicator::abortHier() {
  std::lock_guard<std::mutex> lock(hierMutex_);
  hierCancel_.cancel();
  if (hierLocal_) hierLocal_->abort();
  if (hierCross_) hierCross_->abort();
}

Status Communicator::ensureHier() {
  if (hierLocal_ && hierCross_) return Status::ok();
  if (hierFailed_)
    return internalError("rank %d: the hierarchical algorithm's communicators failed to build",
                         rank_);
  hierFailed_ = true;  // until both are made
  int host = 0, local = 0;
  placeOf(hosts_, rank_, &host, &local);
  const std::string what = formatString("rank %d: making the hierarchical algorithm's %s", rank_,
                                        "communicators (within host, across hosts)");
  // Every rank takes part in both exchanges, in the same order.
  Result<SplitPlan> within = planSplit(host, local);
  if (!within.isOk()) return within.status().withContext(what);
  Result<SplitPlan> across = planSplit(local, host);
  if (!across.isOk()) {
    abandonRendezvousRoot(within.value().id, across.status());
    return across.status().withContext(what);
  }
  // One phase communicator from its plan, into *slot (under the lock abort takes).
  // shape: the phase as the selector prices it (hierLocalInfo / hierCrossInfo), which the
  // phase communicator takes in place of what its own ranks show.
  auto make = [&](const SplitPlan& plan, const char* suffix, const char* label,
                  const TuningInfo& shape, std::unique_ptr<Communicator>* slot) -> Status {
    CommOptions o = options_;
    o.blocking = true;
    o.hierPhase = true;
    o.phaseCoresPerRank = shape.coresPerRank;
    o.phaseNetLinkGBps = shape.nnodes > 1 ? shape.netLinkGBps : 0;
    o.name = options_.name + (options_.name.empty() ? "" : ".") + suffix;
    o.logLabel = label;
    Result<std::unique_ptr<Communicator>> c =
        Communicator::create(plan.id, plan.newSize, plan.newRank, o, &hierCancel_);
    if (!c.isOk())
      return c.status().withContext(
          formatString("%s, the one whose rendezvous rank %d hosts", what.c_str(), plan.idRank));
    std::lock_guard<std::mutex> lock(hierMutex_);
    *slot = c.take();
    return Status::ok();
  };
  // While they are made, a rank of this communicator that goes away (its process ended, or its
  // communicator failed and closed its connections) ends the wait: every rank makes them, and
  // the ones it would have joined wait for it otherwise until the init timeout.
  std::mutex watchMutex;
  std::condition_variable watchWake;
  bool making = true;
  auto firstGone = [this] {
    for (int r = 0; r < nranks_; ++r)
      if (r != rank_ && bootstrap_->peerGone(r)) return r;
    return -1;
  };
  int goneRank = -1;
  std::thread watch([&] {
    std::unique_lock<std::mutex> lock(watchMutex);
    while (making) {
      goneRank = firstGone();
      if (goneRank >= 0) {
        hierCancel_.cancel();
        return;
      }
      watchWake.wait_for(lock, std::chrono::milliseconds(kHierWatchMs));
    }
  });
  Status made = make(within.value(), "host",
                     " (hierarchical phases within the host; ranks of that communicator)",
                     hierLocalInfo(tuning_), &hierLocal_);
  if (made.isOk())
    made = make(across.value(), "cross",
                " (hierarchical phases across hosts; ranks of that communicator)",
                hierCrossInfo(tuning_, costModel()), &hierCross_);
  {
    std::lock_guard<std::mutex> lock(watchMutex);
    making = false;
  }
  watchWake.notify_all();
  watch.join();
  // A rank that died closed its connections as the failure came: look once more.
  if (!made.isOk() && goneRank < 0) goneRank = firstGone();
  if (!made.isOk() && goneRank >= 0 && asyncError().isOk())
    made = remoteError(
        "%s: rank %d closed its connections while they were made: it exited, or its "
        "communicator failed (here: %s)",
        what.c_str(), goneRank, made.message().c_str());
  if (!made.isOk()) {
    // The ranks waiting at a rendezvous this rank hosts learn why now, not at their timeout.
    const Status why = remoteError(
        "rank %d gave up making the hierarchical algorithm's "
        "communicators: %s",
        rank_, explain(made).message().c_str());
    abandonRendezvousRoot(within.value().id, why);
    abandonRendezvousRoot(across.value().id, why);
    return made;
  }
  hierFailed_ = false;
  LOG_INFO(kSubsysInit, "rank %d: hierarchical algorithm ready: host %d of %d, local rank %d of %d",
           rank_, host, tuning_.nnodes, local, hierLocal_->nranks());
  return Status::ok();
}

Status Communicator::runHier(const HostWork& w) {
  const CollArgs& args = w.args;
  const int nhosts = hierCross_->nranks(), nlocal = hierLocal_->nranks();
  const int host = hierCross_->rank(), local = hierLocal_->rank();
  const size_t elt = dataTypeSize(args.type);
  const char* collName = collectiveName(w.coll);
  // One phase: a call on comm with the operator and buffers given.
  auto phase = [&](Communicator* comm, Collective coll, const void* in, void* out, size_t count,
                   const RedOp& op, int root, const char* where) -> Status {
    HostWork sub;
    sub.coll = coll;
    sub.args.sendbuff = in;
    sub.args.recvbuff = out;
    sub.args.count = count;
    sub.args.type = args.type;
    sub.args.op = op;
    sub.args.root = root;
    Status s = comm->run(&sub, 1);
    if (s.isOk()) return s;
    // The phase's communicator numbers its ranks from 0: say which ranks they are here.
    const bool within = comm == hierLocal_.get();
    std::string members;
    for (int k = 0; k < comm->nranks(); ++k)
      members += formatString("%sits rank %d is rank %d", k == 0 ? "" : ", ", k,
                              within ? hosts_[host][k] : hosts_[k][local]);
    return s.withContext(formatString("rank %d: hierarchical %s, %s phase (%s)", rank_, collName,
                                      where, members.c_str()));
  };
  auto stage = [&](size_t bytes) -> char* {
    if (hierStage_.size() < bytes) hierStage_.resize(bytes);
    return hierStage_.data();
  };
  switch (w.coll) {
    case Collective::kAllReduce: {
      const size_t count = args.count;
      const size_t block = (count + nlocal - 1) / nlocal;
      const bool padded = block * nlocal != count;
      const char* in = static_cast<const char*>(args.sendbuff);
      char* out = static_cast<char*>(args.recvbuff);
      if (padded) {
        char* buf = stage(block * nlocal * elt);
        // The padding's results are never read; zeros keep them defined.
        memset(buf + count * elt, 0, (block * nlocal - count) * elt);
        memcpy(buf, in, count * elt);
        in = out = buf;
      }
      char* mine = out + local * block * elt;
      CHORUS_TRY(phase(hierLocal_.get(), Collective::kReduceScatter, in, mine, block,
                       phaseOp(args.op, true, false, nranks_), 0, "within-host reduce-scatter"));
      CHORUS_TRY(phase(hierCross_.get(), Collective::kAllReduce, mine, mine, block,
                       phaseOp(args.op, false, true, nranks_), 0, "cross-host all-reduce"));
      CHORUS_TRY(phase(hierLocal_.get(), Collective::kAllGather, mine, out, block, RedOp(), 0,
                       "within-host all-gather"));
      if (padded) memcpy(args.recvbuff, out, count * elt);
      return Status::ok();
    }
    case Collective::kAllGather: {
      const size_t bytes = args.count * elt;
      char* buf = stage(bytes * (nhosts + static_cast<size_t>(nhosts) * nlocal));
      char* byHost = buf;                    // nhosts blocks: local index `local` of every host
      char* byLocal = buf + bytes * nhosts;  // nlocal x nhosts blocks
      CHORUS_TRY(phase(hierCross_.get(), Collective::kAllGather, args.sendbuff, byHost, args.count,
                       RedOp(), 0, "cross-host all-gather"));
      CHORUS_TRY(phase(hierLocal_.get(), Collective::kAllGather, byHost, byLocal,
                       args.count * nhosts, RedOp(), 0, "within-host all-gather"));
      char* out = static_cast<char*>(args.recvbuff);
      for (int j = 0; j < nlocal; ++j)
        for (int h = 0; h < nhosts; ++h)
          memcpy(out + static_cast<size_t>(hosts_[h][j]) * bytes,
                 byLocal + (static_cast<size_t>(j) * nhosts + h) * bytes, bytes);
      return Status::ok();
    }
    case Collective::kReduceScatter: {
      const size_t bytes = args.count * elt;
      char* buf = stage(bytes * (static_cast<size_t>(nhosts) * nlocal + nhosts));
      char* byLocal = buf;  // the input's blocks ordered by local index, then host
      char* byHost = buf + bytes * nhosts * nlocal;
      const char* in = static_cast<const char*>(args.sendbuff);
      for (int j = 0; j < nlocal; ++j)
        for (int h = 0; h < nhosts; ++h)
          memcpy(byLocal + (static_cast<size_t>(j) * nhosts + h) * bytes,
                 in + static_cast<size_t>(hosts_[h][j]) * bytes, bytes);
      CHORUS_TRY(phase(hierLocal_.get(), Collective::kReduceScatter, byLocal, byHost,
                       args.count * nhosts, phaseOp(args.op, true, false, nranks_), 0,
                       "within-host reduce-scatter"));
      CHORUS_TRY(phase(hierCross_.get(), Collective::kReduceScatter, byHost, args.recvbuff,
                       args.count, phaseOp(args.op, false, true, nranks_), 0,
                       "cross-host reduce-scatter"));
      return Status::ok();
    }
    case Collective::kBroadcast: {
      int rootHost = 0, rootLocal = 0;
      placeOf(hosts_, args.root, &rootHost, &rootLocal);
      if (local == rootLocal)
        CHORUS_TRY(phase(hierCross_.get(), Collective::kBroadcast,
                         rank_ == args.root ? args.sendbuff : args.recvbuff, args.recvbuff,
                         args.count, RedOp(), rootHost, "cross-host broadcast"));
      CHORUS_TRY(phase(hierLocal_.get(), Collective::kBroadcast, args.recvbuff, args.recvbuff,
                       args.count, RedOp(), rootLocal, "within-host broadcast"));
      return Status::ok();
    }
    default:
      return internalError("rank %d: %s has no hierarchical algorithm", rank_, collName);
  }
}

}  // namespace chorus
