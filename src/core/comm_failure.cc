// How a communicator fails and tells others: the peer watch of the ranks on its host, the
// error its calls return, what it says as it stops (its board, the sockets' notices), and how
// another thread stops an init (InitCancel).
#include <dirent.h>
#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "core/comm.h"
#include "core/peer_watch.h"

namespace chorus {

// Every rank passes the same two barriers (whatever its own settings), so that ranks which
// watch and ranks which do not still meet; a rank watches the local peers whose lock files it
// finds.
Status Communicator::startPeerWatch(bool anyShmDisabled) {
  const int64_t intervalMs = paramInt("PEER_WATCH_MS");
  std::vector<PeerWatch::Peer> local;
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_ && peers_[r].hostId == peers_[rank_].hostId) local.push_back({r, peers_[r].pid});
  const bool wanted = !local.empty() && !anyShmDisabled && intervalMs > 0;
  const std::string prefix = "/chorus-" + transportCtx_.commTag;
  std::unique_ptr<PeerWatch> watch;
  if (wanted) {
    Result<std::unique_ptr<PeerWatch>> w = PeerWatch::create(prefix, rank_);
    // Without its lock a rank is only not watched by its peers: say so and go on.
    if (w.isOk())
      watch = w.take();
    else
      LOG_WARN(kSubsysInit, "rank %d: no liveness lock: %s", rank_, w.status().message().c_str());
  }
  CHORUS_TRY(bootstrap_->barrier());
  if (watch) {
    // The local peers compare this rank's calls with theirs (peer_watch.h).
    watch->setCurrentCall([this] { return currentCall(); }, paramInt("CHECK_CALLS") != 0);
    CHORUS_TRY(watch->watch(local, static_cast<int>(intervalMs),
                            [this](const Status& s) { reportAsyncError(s); }));
  }
  CHORUS_TRY(bootstrap_->barrier());
  if (watch) {
    watch->unlinkOwn();
    std::lock_guard<std::mutex> lock(mutex_);
    peerWatch_ = std::move(watch);
  }
  return Status::ok();
}

Status Communicator::explain(const Status& failure) const {
  Status async = asyncError();
  if (!async.isOk()) return async;
  return failure;
}

bool InitCancel::attach(Communicator* comm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (cancelled_) return false;
  comm_ = comm;
  return true;
}

void InitCancel::detach() {
  std::lock_guard<std::mutex> lock(mutex_);
  comm_ = nullptr;
  detached_.notify_all();
}

bool InitCancel::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  if (comm_ == nullptr) return false;
  comm_->abort();
  return true;
}

bool InitCancel::waitDetached(double timeoutSeconds) {
  std::unique_lock<std::mutex> lock(mutex_);
  return detached_.wait_for(lock, std::chrono::duration<double>(timeoutSeconds),
                            [this] { return comm_ == nullptr; });
}

Status Communicator::checkUsable() const {
  if (revoked_.load(std::memory_order_relaxed))
    return invalidUsage(
        "rank %d: the communicator was revoked (ncclCommRevoke); only ncclCommDestroy, "
        "ncclCommSplit or ncclCommShrink may follow",
        rank_);
  Status async = asyncError();
  if (!async.isOk()) return async;
  if (abort_.isRaised()) return invalidUsage("rank %d: the communicator was aborted", rank_);
  if (finalized_.load())
    return invalidUsage("rank %d: the communicator was finalized; only ncclCommDestroy may follow",
                        rank_);
  return Status::ok();
}

Status Communicator::asyncError() const {
  // Calls ask on every collective: a flag spares them the lock while nothing went wrong.
  if (!hasAsyncError_.load(std::memory_order_acquire)) {
    if (device_) return device_->asyncError();
    return Status::ok();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  return asyncError_;
}

void Communicator::reportAsyncError(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!asyncError_.isOk()) return;
    // Messages from the executors already start with this rank ("rank 3:", "rank 3 waits").
    const std::string self = formatString("rank %d", rank_);
    const std::string& m = status.message();
    const bool named = m.compare(0, self.size(), self) == 0 && m.size() > self.size() &&
                       (m[self.size()] == ':' || m[self.size()] == ' ');
    asyncError_ = named ? status : status.withContext(self);
    hasAsyncError_.store(true, std::memory_order_release);
    // The local peers' communicators fail too (their calls would wait for this rank).
    if (peerWatch_) {
      peerWatch_->publishFailure(asyncError_.message());
      failurePublished_.store(true, std::memory_order_release);
    }
  }
  abort_.raise();
  // Kernels waiting for a peer that is gone stop too.
  if (device_) device_->abort();
  failHier(asyncError());
}

// A call that failed halfway on a peer (a timeout, a closed connection) leaves the connections
// out of step: the communicator fails, and its peers learn it (board, failure notices) instead
// of waiting for data. (Mismatches fail it where they are found; a call refused before it
// moved anything leaves it usable.) connecting: the call failed while connecting send/recv
// peers.
void Communicator::failIfOutOfStep(const Status& failure, bool connecting) {
  if (failure.code() != Code::kRemoteError) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lastFailure_ = failure;
  }
  lastCallFailed_.store(true, std::memory_order_release);
  // A send/recv pair that could not connect (a peer that did not come) moved nothing: the
  // communicator stays usable, but says why if it is destroyed now (failureText).
  if (!connecting) reportAsyncError(failure);
}

std::string Communicator::failureText() const {
  Status async = asyncError();
  if (!async.isOk()) return async.message();
  if (abort_.isRaised()) return formatString("rank %d: the communicator was aborted", rank_);
  if (!lastCallFailed_.load(std::memory_order_acquire)) return std::string();
  std::lock_guard<std::mutex> lock(mutex_);
  return lastFailure_.message();
}

void Communicator::removeLeftNames() const {
  std::vector<int> died;
  const bool all = hasAsyncError_.load() || abort_.isRaised() || initFailed_;
  if (!all) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (peerWatch_) died = peerWatch_->diedRanks();
  }
  if (transportCtx_.commTag.empty() || (!all && died.empty())) return;
  const std::string prefix = "chorus-" + transportCtx_.commTag + "-";
  // The maker's rank in a name: <rank>-<peer>-<channel>, direct-<rank> or live-<rank>.
  auto madeBy = [](const std::string& rest) {
    std::string r = rest;
    for (const char* kind : {"direct-", "live-"})
      if (r.compare(0, strlen(kind), kind) == 0) r = r.substr(strlen(kind));
    return r.empty() || !isdigit(static_cast<unsigned char>(r[0])) ? -1 : atoi(r.c_str());
  };
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!all &&
        std::find(died.begin(), died.end(), madeBy(name.substr(prefix.size()))) == died.end())
      continue;
    if (shm_unlink(("/" + name).c_str()) == 0)
      LOG_INFO(kSubsysShm, "rank %d: removed /dev/shm/%s, left by a failed peer", rank_,
               name.c_str());
  }
  closedir(d);
}

}  // namespace chorus
