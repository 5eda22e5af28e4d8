#include "core/peer_watch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>

#include "exec/call_tag.h"

namespace chorus {

// Where a rank's file holds its board (the first byte is the leaving mark), and the file's size.
constexpr size_t kBoardOffset = 64;
constexpr size_t kFileBytes = 4096;
constexpr size_t kFailureBytes = 1024;

struct PeerWatch::Board {
  // A seqlock over the tag: odd while it is being written.
  std::atomic<uint32_t> version;
  std::atomic<uint32_t> failed;  // 1 once `failure` holds the message
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> whatRoot;  // what | root << 32
  char failure[kFailureBytes];
};

namespace {

// A consistent copy of a board's tag; false when the writer kept changing it.
template <class Board>
bool readTag(const Board& b, CallTag* t) {
  for (int tries = 0; tries < 1000; ++tries) {
    const uint32_t v = b.version.load(std::memory_order_acquire);
    if ((v & 1) != 0) continue;
    t->seq = b.seq.load(std::memory_order_relaxed);
    t->count = b.count.load(std::memory_order_relaxed);
    const uint64_t wr = b.whatRoot.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (b.version.load(std::memory_order_relaxed) != v) continue;
    t->what = static_cast<uint32_t>(wr);
    t->root = static_cast<int32_t>(static_cast<uint32_t>(wr >> 32));
    return true;
  }
  return false;
}

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
  for (const Board* b : boards_)
    if (b != nullptr)
      munmap(const_cast<char*>(reinterpret_cast<const char*>(b)) - kBoardOffset, kFileBytes);
  if (ownBoard_ != nullptr) munmap(reinterpret_cast<char*>(ownBoard_) - kBoardOffset, kFileBytes);
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
  static_assert(kBoardOffset + sizeof(Board) <= kFileBytes, "the board fits the file");
  std::unique_ptr<PeerWatch> w(new PeerWatch());
  w->prefix_ = prefix;
  const std::string name = peerWatchName(prefix, rank);
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return errnoError(errno, "shm_open(create) " + name + " (peer liveness lock)");
  w->ownName_ = name;
  w->ownFd_ = fd;
  w->rank_ = rank;
  if (ftruncate(fd, kFileBytes) != 0) return errnoError(errno, "ftruncate " + name);
  void* m = mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return errnoError(errno, "mmap " + name);
  w->ownBoard_ = new (static_cast<char*>(m) + kBoardOffset) Board();
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
    // Its board, read-only (a file too small to hold one has none).
    struct stat st {};
    void* m = fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= kFileBytes
                  ? mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    boards_.push_back(m == MAP_FAILED
                          ? nullptr
                          : reinterpret_cast<const Board*>(static_cast<char*>(m) + kBoardOffset));
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

std::vector<int> PeerWatch::diedRanks() const {
  std::vector<int> died;
  for (size_t i = 0; i < peers_.size(); ++i)
    if (state(i) == State::kDied) died.push_back(peers_[i].rank);
  return died;
}

void PeerWatch::publishCall(const CallTag& tag) {
  if (ownBoard_ == nullptr) return;
  Board& b = *ownBoard_;
  const uint32_t v = b.version.load(std::memory_order_relaxed);
  b.version.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  b.seq.store(tag.seq, std::memory_order_relaxed);
  b.count.store(tag.count, std::memory_order_relaxed);
  b.whatRoot.store(uint64_t{tag.what} | uint64_t{static_cast<uint32_t>(tag.root)} << 32,
                   std::memory_order_relaxed);
  b.version.store(v + 2, std::memory_order_release);
}

void PeerWatch::publishFailure(const std::string& message) {
  if (ownBoard_ == nullptr || ownBoard_->failed.load(std::memory_order_relaxed) != 0) return;
  const size_t n = std::min(message.size(), kFailureBytes - 1);
  memcpy(ownBoard_->failure, message.data(), n);
  ownBoard_->failure[n] = '\0';
  ownBoard_->failed.store(1, std::memory_order_release);
}

Status PeerWatch::lookAtBoard(size_t i, const CallTag& mine) {
  const Board* b = boards_[i];
  if (b == nullptr) return Status::ok();
  const int peer = peers_[i].rank;
  // A mismatch first: this rank then says what it found itself, also when the peer, having
  // found it first, already failed.
  CallTag theirs;
  const bool differ = checkCalls_ && mine.seq != 0 && readTag(*b, &theirs) &&
                      theirs.seq == mine.seq && mine != theirs;
  if (differ)
    return invalidUsage(
        "rank %d: %s does not match rank %d's call of that number, %s; every rank must make the "
        "same collective calls in the same order, with the same count, type, operation and "
        "root (CHORUS_CHECK_CALLS=0 turns this check off)",
        rank_, describeCall(mine).c_str(), peer, describeCall(theirs).c_str());
  if (b->failed.load(std::memory_order_acquire) != 0) {
    std::string why(b->failure, strnlen(b->failure, kFailureBytes));
    return remoteError(
        "rank %d's communicator failed, so no collective of this communicator can complete now "
        "(destroy it, or shrink it without that rank); its error: %s",
        peer, why.c_str());
  }
  return Status::ok();
}

void PeerWatch::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::milliseconds(intervalMs_), [this] { return stop_; });
    if (stop_) break;
    // What this rank makes now, for the peers (calls of one number are compared, so a board
    // an interval old is never taken for a mismatch).
    CallTag mine;
    if (currentCall_) {
      mine = currentCall_();
      publishCall(mine);
    }
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!watching_[i]) continue;
      Status board = lookAtBoard(i, mine);
      if (!board.isOk()) {
        report_(board);
        return;
      }
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
