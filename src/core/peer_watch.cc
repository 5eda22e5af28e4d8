#include "core/peer_watch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

namespace chorus {

namespace {

struct flock lockRegion(short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  fl.l_pid = 0;  // required for OFD locks
  return fl;
}

// The file name of a rank's liveness lock.
std::string peerWatchName(const std::string& prefix, int rank) {
  return prefix + "-live-" + std::to_string(rank);
}

}  // namespace

PeerWatch::~PeerWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (int fd : peerFds_)
    if (fd >= 0) close(fd);
  unlinkOwn();
  if (ownFd_ >= 0) {
    // Leaving on purpose: say so before the lock goes, so that peers do not take it for a
    // process that died (they may be finalizing or destroying their own communicator).
    const char left = kLeft;
    ssize_t ignored = pwrite(ownFd_, &left, 1, 0);
    (void)ignored;
    close(ownFd_);
  }
}

Result<std::unique_ptr<PeerWatch>> PeerWatch::create(const std::string& prefix, int rank) {
  std::unique_ptr<PeerWatch> w(new PeerWatch());
  w->prefix_ = prefix;
  const std::string name = peerWatchName(prefix, rank);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return errnoError(errno, "shm_open(create) " + name + " (peer liveness lock)");
  w->ownName_ = name;
  w->ownFd_ = fd;
  if (ftruncate(fd, 1) != 0) return errnoError(errno, "ftruncate " + name);
  struct flock fl = lockRegion(F_WRLCK);
  if (fcntl(fd, F_OFD_SETLK, &fl) != 0) return errnoError(errno, "locking " + name);
  return w;
}

Status PeerWatch::watch(const std::vector<Peer>& peers, int intervalMs, Report report) {
  for (const Peer& p : peers) {
    const std::string name = peerWatchName(prefix_, p.rank);
    int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0 && errno == ENOENT) continue;  // that rank made no lock: it is not watched
    if (fd < 0)
      return errnoError(errno, "shm_open " + name + " (the liveness lock of rank " +
                                   std::to_string(p.rank) + ")");
    peers_.push_back(p);
    peerFds_.push_back(fd);
  }
  watching_.assign(peers_.size(), true);
  intervalMs_ = intervalMs;
  report_ = std::move(report);
  if (intervalMs_ > 0 && !peers_.empty()) thread_ = std::thread([this] { run(); });
  return Status::ok();
}

void PeerWatch::unlinkOwn() {
  if (ownName_.empty()) return;
  shm_unlink(ownName_.c_str());
  ownName_.clear();
}

PeerWatch::State PeerWatch::state(size_t i) const {
  // Our own descriptor holds no lock, so the kernel reports the owner's, as long as it exists.
  struct flock fl = lockRegion(F_WRLCK);
  if (fcntl(peerFds_[i], F_OFD_GETLK, &fl) != 0) return State::kAlive;  // cannot tell
  if (fl.l_type != F_UNLCK) return State::kAlive;
  char mark = 0;
  if (pread(peerFds_[i], &mark, 1, 0) == 1 && mark == kLeft) return State::kLeft;
  return State::kDied;
}

void PeerWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(intervalMs_), [this] { return stop_; });
    if (stop_) break;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!watching_[i]) continue;
      const State st = state(i);
      if (st == State::kAlive) continue;
      watching_[i] = false;
      if (st == State::kLeft) continue;
      report_(
          remoteError("rank %d (pid %d) on this host ended without destroying its communicator; no "
                      "collective of this communicator can complete now (destroy it)",
                      peers_[i].rank, peers_[i].pid));
      return;
    }
  }
}

}  // namespace chorus
