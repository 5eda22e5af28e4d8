#include "bootstrap/root.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "bootstrap/wire.h"
#include "common/log.h"

namespace chorus {

namespace {

// A connection must present a complete, valid hello this soon after it was accepted.
constexpr double kHelloTimeoutSeconds = 2.0;
// How long a root waits for its first rank; a unique id nobody uses must not keep a thread.
constexpr double kFirstRankWaitSeconds = 3600.0;
// The init timeout used when a rank announces none (0).
constexpr double kDefaultInitTimeoutSeconds = 3600.0;
// Connections still owing a hello, beyond which the oldest is dropped.
constexpr size_t kMaxPendingConnections = 1024;
// A slow rank may hold the root this long while it sends a reply.
constexpr double kReplySendSeconds = 10.0;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class RendezvousRoot {
 public:
  RendezvousRoot(Listener listener, const UniqueIdInfo& id)
      : listener_(std::move(listener)), id_(id), where_(listener_.address().toString()) {}

  void run();
  void stop() { stop_.raise(); }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  uint64_t magic() const { return id_.magic; }
  void abandon(const Status& why) {
    std::lock_guard<std::mutex> lock(abandonMutex_);
    if (abandonWhy_.isOk()) abandonWhy_ = why;
    abandoned_.store(true, std::memory_order_release);
  }

 private:
  struct Pending {
    Socket sock;
    unsigned char buf[wire::kRootHelloBytes];
    size_t got = 0;
    Clock::time_point expires;
  };
  struct Joined {
    Socket sock;
    sockaddr_storage listenAddress{};
  };

  void acceptAll(Clock::time_point now);
  // Once poisoned and about to go: the ranks that connected already (waiting to be accepted, or
  // their hello on the way) get the reason rather than a closed connection, within a short
  // grace.
  void answerLateArrivals();
  // Reads what is available from p; true when p is finished with (handled or dropped).
  bool progress(Pending& p);
  void handleHello(Socket sock, const wire::RootHello& hello);
  void poison(const Status& why);
  void reply(Socket& sock, Code code, const std::string& payload);
  void sendTable();
  void failMissingRanks();

  Listener listener_;
  UniqueIdInfo id_;
  std::string where_;
  AbortFlag stop_;
  std::atomic<bool> finished_{false};
  std::mutex abandonMutex_;
  Status abandonWhy_;  // guarded by abandonMutex_
  std::atomic<bool> abandoned_{false};

  std::vector<Pending> pending_;
  std::vector<Joined> joined_;  // by rank, once nranks is known
  int nranks_ = -1;
  int firstRank_ = -1;
  int joinedCount_ = 0;
  double timeoutSeconds_ = 0;
  Clock::time_point deadline_;
  Status poison_;  // set once the rendezvous cannot succeed; every later arrival gets it
};

void RendezvousRoot::run() {
  LOG_INFO(kSubsysBootstrap, "bootstrap root: waiting for ranks at %s", where_.c_str());
  deadline_ = Clock::now() + seconds(kFirstRankWaitSeconds);
  while (!stop_.isRaised()) {
    if (abandoned_.load(std::memory_order_acquire)) {
      {
        std::lock_guard<std::mutex> lock(abandonMutex_);
        if (poison_.isOk()) poison(abandonWhy_);
      }
      answerLateArrivals();
      listener_.close();
      break;
    }
    if (nranks_ > 0 && joinedCount_ == nranks_ && poison_.isOk()) {
      // Closed first so that the address is free again once any rank has its answer (rank 0
      // may host the next rendezvous at the same CHORUS_COMM_ID right away).
      listener_.close();
      sendTable();
      break;
    }
    Clock::time_point now = Clock::now();
    if (now >= deadline_) {
      if (nranks_ < 0)
        LOG_WARN(kSubsysBootstrap, "bootstrap root at %s: no rank arrived in %.0f s; giving up",
                 where_.c_str(), kFirstRankWaitSeconds);
      listener_.close();
      if (nranks_ >= 0 && poison_.isOk()) failMissingRanks();
      break;
    }
    for (size_t i = 0; i < pending_.size();) {
      if (now >= pending_[i].expires) {
        LOG_WARN(kSubsysBootstrap,
                 "bootstrap root at %s: dropped connection from %s: no valid hello within %.0f s",
                 where_.c_str(), pending_[i].sock.peer().toString().c_str(), kHelloTimeoutSeconds);
        pending_.erase(pending_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});
    Clock::time_point wake = std::min(deadline_, now + std::chrono::milliseconds(100));
    for (const Pending& p : pending_) {
      fds.push_back({p.sock.fd(), POLLIN, 0});
      wake = std::min(wake, p.expires);
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    int rc = poll(fds.data(), fds.size(), static_cast<int>(std::max<int64_t>(ms, 0)) + 1);
    if (rc <= 0) continue;
    // Pending entries are read before new ones are accepted so fds[i + 1] matches pending_[i].
    std::vector<Pending> still;
    std::vector<Pending> ready;
    for (size_t i = 0; i < pending_.size(); ++i) {
      if (fds[i + 1].revents != 0)
        ready.push_back(std::move(pending_[i]));
      else
        still.push_back(std::move(pending_[i]));
    }
    pending_ = std::move(still);
    for (Pending& p : ready)
      if (!progress(p)) pending_.push_back(std::move(p));
    if (fds[0].revents != 0) acceptAll(Clock::now());
  }
  pending_.clear();
  joined_.clear();
  listener_.close();
  LOG_INFO(kSubsysBootstrap, "bootstrap root at %s: done", where_.c_str());
  finished_.store(true, std::memory_order_release);
}

void RendezvousRoot::answerLateArrivals() {
  const Clock::time_point until = Clock::now() + std::chrono::milliseconds(200);
  acceptAll(Clock::now());
  while (!pending_.empty() && Clock::now() < until) {
    std::vector<pollfd> fds;
    for (const Pending& p : pending_) fds.push_back({p.sock.fd(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), 10) > 0) {
      std::vector<Pending> still;
      for (size_t i = 0; i < pending_.size(); ++i)
        if (fds[i].revents == 0 || !progress(pending_[i])) still.push_back(std::move(pending_[i]));
      pending_ = std::move(still);
    }
    acceptAll(Clock::now());
  }
}

void RendezvousRoot::acceptAll(Clock::time_point now) {
  while (true) {
    Result<Socket> s = listener_.tryAccept();
    if (!s.isOk()) {
      LOG_WARN(kSubsysBootstrap, "bootstrap root at %s: %s", where_.c_str(),
               s.status().message().c_str());
      return;
    }
    if (!s.value().valid()) return;
    if (pending_.size() >= kMaxPendingConnections) {
      LOG_WARN(kSubsysBootstrap,
               "bootstrap root at %s: dropped connection from %s: too many connections without "
               "a hello",
               where_.c_str(), pending_.front().sock.peer().toString().c_str());
      pending_.erase(pending_.begin());
    }
    Pending p;
    p.sock = s.take();
    p.expires = now + seconds(kHelloTimeoutSeconds);
    // Most hellos are already there; reading at once spares a poll round.
    if (!progress(p)) pending_.push_back(std::move(p));
  }
}

bool RendezvousRoot::progress(Pending& p) {
  Result<size_t> n = p.sock.recvSome(p.buf + p.got, wire::kRootHelloBytes - p.got);
  if (!n.isOk()) {
    LOG_WARN(kSubsysBootstrap,
             "bootstrap root at %s: dropped connection from %s before a hello: %s", where_.c_str(),
             p.sock.peer().toString().c_str(), n.status().message().c_str());
    return true;
  }
  p.got += n.value();
  if (p.got < wire::kRootHelloBytes) return false;
  wire::RootHello hello;
  const char* why = nullptr;
  if (!wire::getRootHello(p.buf, &hello))
    why = "not a Chorus bootstrap hello";
  else if (hello.idMagic != id_.magic)
    why = "hello for another unique id";
  else if (hello.secret != id_.secret)
    why = "wrong secret";
  if (why != nullptr) {
    LOG_WARN(kSubsysBootstrap, "bootstrap root at %s: dropped connection from %s: %s",
             where_.c_str(), p.sock.peer().toString().c_str(), why);
    return true;
  }
  handleHello(std::move(p.sock), hello);
  return true;
}

void RendezvousRoot::handleHello(Socket sock, const wire::RootHello& hello) {
  if (hello.nranks < 1 || hello.rank < 0 || hello.rank >= hello.nranks) {
    reply(sock, Code::kInvalidArgument,
          formatString("rank %d of nranks %d is out of range at the rendezvous at %s", hello.rank,
                       hello.nranks, where_.c_str()));
    return;
  }
  if (!poison_.isOk()) {
    reply(sock, poison_.code(), poison_.message());
    return;
  }
  if (nranks_ < 0) {
    nranks_ = hello.nranks;
    firstRank_ = hello.rank;
    joined_.resize(static_cast<size_t>(nranks_));
    timeoutSeconds_ =
        hello.initTimeoutMs > 0 ? hello.initTimeoutMs / 1000.0 : kDefaultInitTimeoutSeconds;
    deadline_ = Clock::now() + seconds(timeoutSeconds_);
    LOG_INFO(kSubsysBootstrap, "bootstrap root at %s: first rank %d arrived; %d ranks expected",
             where_.c_str(), hello.rank, nranks_);
  } else if (hello.nranks != nranks_) {
    poison(
        invalidUsage("rank %d called init with nranks %d but rank %d with nranks %d at the "
                     "rendezvous at %s; every rank must pass the same nranks",
                     hello.rank, hello.nranks, firstRank_, nranks_, where_.c_str()));
    reply(sock, poison_.code(), poison_.message());
    return;
  }
  Joined& slot = joined_[static_cast<size_t>(hello.rank)];
  if (slot.sock.valid()) {
    std::string first = slot.sock.peer().toString();
    poison(
        invalidUsage("rank %d joined the rendezvous at %s twice (from %s and from %s); every "
                     "rank must pass a distinct rank",
                     hello.rank, where_.c_str(), first.c_str(), sock.peer().toString().c_str()));
    reply(sock, poison_.code(), poison_.message());
    return;
  }
  slot.sock = std::move(sock);
  slot.listenAddress = hello.listenAddress;
  ++joinedCount_;
  LOG_INFO(kSubsysBootstrap, "bootstrap root at %s: rank %d joined (%d of %d), listening at %s",
           where_.c_str(), hello.rank, joinedCount_, nranks_,
           addressToString(hello.listenAddress).c_str());
}

void RendezvousRoot::poison(const Status& why) {
  LOG_WARN(kSubsysBootstrap, "bootstrap root: %s", why.message().c_str());
  poison_ = why;
  for (Joined& j : joined_) {
    if (j.sock.valid()) reply(j.sock, why.code(), why.message());
    j.sock.close();
  }
  joinedCount_ = 0;
}

void RendezvousRoot::reply(Socket& sock, Code code, const std::string& payload) {
  unsigned char header[wire::kRootReplyHeaderBytes];
  wire::putU32(header, wire::kRootReplyMarker);
  wire::putU32(header + 4, static_cast<uint32_t>(code));
  wire::putU32(header + 8, static_cast<uint32_t>(payload.size()));
  Waiter waiter(kReplySendSeconds, &stop_);
  Status st = sock.sendAll(header, sizeof(header), waiter);
  if (st.isOk()) st = sock.sendAll(payload.data(), payload.size(), waiter);
  if (!st.isOk())
    LOG_WARN(kSubsysBootstrap, "bootstrap root at %s: could not answer %s: %s", where_.c_str(),
             sock.peer().toString().c_str(), st.message().c_str());
  sock.close();
}

void RendezvousRoot::sendTable() {
  std::string table(static_cast<size_t>(nranks_) * wire::kAddressBytes, '\0');
  for (int r = 0; r < nranks_; ++r)
    wire::putAddress(
        reinterpret_cast<unsigned char*>(&table[static_cast<size_t>(r) * wire::kAddressBytes]),
        joined_[static_cast<size_t>(r)].listenAddress);
  for (Joined& j : joined_) reply(j.sock, Code::kSuccess, table);
  LOG_INFO(kSubsysBootstrap, "bootstrap root at %s: all %d ranks joined", where_.c_str(), nranks_);
}

void RendezvousRoot::failMissingRanks() {
  std::string missing;
  int count = 0;
  for (int r = 0; r < nranks_; ++r) {
    if (joined_[static_cast<size_t>(r)].sock.valid()) continue;
    if (count < 16) missing += (count == 0 ? "" : ", ") + std::to_string(r);
    ++count;
  }
  if (count > 16) missing += formatString(" and %d more", count - 16);
  std::string message = formatString(
      "timed out after %g s: %s %s of %d never joined the rendezvous at %s", timeoutSeconds_,
      count == 1 ? "rank" : "ranks", missing.c_str(), nranks_, where_.c_str());
  LOG_WARN(kSubsysBootstrap, "bootstrap root: %s", message.c_str());
  for (Joined& j : joined_)
    if (j.sock.valid()) reply(j.sock, Code::kRemoteError, message);
}

// Owns every root thread of the process.
class RootRegistry {
 public:
  static RootRegistry& instance() {
    static RootRegistry* registry = create();
    return *registry;
  }

  void start(std::unique_ptr<RendezvousRoot> root) {
    std::lock_guard<std::mutex> lock(mu_);
    reapLocked();
    RendezvousRoot* raw = root.get();
    entries_.push_back(Entry{std::move(root), std::thread([raw] { raw->run(); })});
  }

  void abandon(const UniqueIdInfo& id, const Status& why) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_)
      if (e.root->magic() == id.magic && !e.root->finished()) e.root->abandon(why);
  }

  int live() {
    std::lock_guard<std::mutex> lock(mu_);
    reapLocked();
    return static_cast<int>(entries_.size());
  }

 private:
  struct Entry {
    std::unique_ptr<RendezvousRoot> root;
    std::thread thread;
  };

  static RootRegistry* create() {
    // Leaked on purpose: its threads are stopped and joined from atexit, and a forked child
    // forgets the parent's threads instead of joining them.
    auto* r = new RootRegistry();
    pthread_atfork([] { instance().mu_.lock(); }, [] { instance().mu_.unlock(); },
                   [] { instance().forgetInChild(); });
    atexit([] { instance().stopAll(); });
    return r;
  }

  void reapLocked() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->root->finished()) {
        it->thread.join();
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }

  void stopAll() {
    std::list<Entry> entries;
    {
      std::lock_guard<std::mutex> lock(mu_);
      entries.swap(entries_);
    }
    for (Entry& e : entries) e.root->stop();
    for (Entry& e : entries) e.thread.join();
  }

  void forgetInChild() {
    // The threads do not exist in the child: leak their handles rather than join or destroy.
    new std::list<Entry>(std::move(entries_));
    entries_.clear();
    mu_.unlock();
  }

  std::mutex mu_;
  std::list<Entry> entries_;
};

}  // namespace

Status startRendezvousRoot(Listener listener, const UniqueIdInfo& id) {
  if (!listener.valid()) return internalError("bootstrap: root started without a listener");
  RootRegistry::instance().start(std::make_unique<RendezvousRoot>(std::move(listener), id));
  return Status::ok();
}

void abandonRendezvousRoot(const UniqueIdInfo& id, const Status& why) {
  RootRegistry::instance().abandon(id, why);
}

int liveRendezvousRoots() {
  return RootRegistry::instance().live();
}

}  // namespace chorus
