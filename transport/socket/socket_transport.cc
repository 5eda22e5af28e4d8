// Socket transport: TCP between ranks that share no memory. Each connector is a FIFO in local
// memory whose far end is this communicator's proxy thread: it sends the slots the executor
// posts, and fills receive slots from the socket. Messages are framed as an 8-byte length
// followed by the payload.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "common/socket.h"
#include "transport/transport.h"

namespace chorus {

namespace {

constexpr uint64_t kHelloMagic = 0x43484f5255534443ull;  // "CHORUSDC"

struct Hello {
  uint64_t magic;
  uint64_t secret;
  int32_t rank;
  int32_t channel;
};

struct SocketInfo {
  sockaddr_storage address;
};
static_assert(sizeof(SocketInfo) <= sizeof(ConnectInfo), "SocketInfo must fit a ConnectInfo");

struct AlignedFree {
  void operator()(void* p) const { free(p); }
};

// One direction of one (peer, channel) pair, driven by the proxy.
struct SocketConn {
  bool isSend = false;
  int peer = -1;
  int channel = -1;
  Socket socket;
  std::unique_ptr<void, AlignedFree> memory;
  FifoHeader* fifo = nullptr;
  char* data = nullptr;
  uint64_t done = 0;      // slots fully moved
  uint64_t msgBytes = 0;  // size of the message in progress (receive side: from its header)
  size_t offset = 0;      // bytes of the message in progress moved, header included
  bool failed = false;
  int listener = 0;  // receive side: the address index its peer connects to
};

class SocketTransport final : public Transport, public ProxyLink {
 public:
  explicit SocketTransport(const TransportContext& ctx) : ctx_(ctx) {
    options_.noDelay = true;
    options_.bufferBytes = static_cast<int>(paramInt("SOCKET_BUFFSIZE"));
    doorbellFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }

  ~SocketTransport() override {
    stop_.store(true);
    if (doorbellFd >= 0) ring();
    if (proxy_.joinable()) proxy_.join();
    if (doorbellFd >= 0) close(doorbellFd);
  }

  const char* name() const override { return "socket"; }

  Status setupRecv(int peer, int channel, ConnectInfo* info, RecvConnector* conn) override {
    const int index = addressFor(peer, channel);
    if (!listeners_[index].valid()) {
      const PeerInfo& me = (*ctx_.peers)[ctx_.rank];
      SocketAddress bindAddr(index == 0 ? me.address : me.extraAddr[index - 1]);
      bindAddr.setPort(0);
      Result<Listener> l = Listener::open(bindAddr);
      if (!l.isOk())
        return l.status().withContext(
            formatString("socket transport: data listener on %s", bindAddr.toString().c_str()));
      listeners_[index] = l.take();
    }
    auto c = newConn(false, peer, channel);
    c->listener = index;
    *conn = RecvConnector(c->memory.get());
    pending_.push_back(std::move(c));
    SocketInfo si{};
    si.address = listeners_[index].address().storage();
    memcpy(info->bytes, &si, sizeof(si));
    return Status::ok();
  }

  Status connectSend(int peer, int channel, const ConnectInfo& info, SendConnector* conn) override {
    SocketInfo si;
    memcpy(&si, info.bytes, sizeof(si));
    SocketAddress addr(si.address);
    Waiter w(ctx_.timeoutSeconds, ctx_.abort);
    Result<Socket> s = connectSocket(addr, w, options_);
    if (!s.isOk())
      return s.status().withContext(
          formatString("socket transport: rank %d connecting to rank %d (channel %d) at %s",
                       ctx_.rank, peer, channel, addr.toString().c_str()));
    Hello h{kHelloMagic, ctx_.secret, ctx_.rank, channel};
    CHORUS_TRY(s.value().sendAll(&h, sizeof(h), w));
    auto c = newConn(true, peer, channel);
    c->socket = s.take();
    *conn = SendConnector(c->memory.get());
    return addConn(std::move(c));
  }

  // Accepts until the connection of (peer, channel) arrives; connections for other channels
  // are matched to their pending receivers as they come, strangers are dropped.
  Status finishRecv(int peer, int channel) override {
    Waiter w(ctx_.timeoutSeconds, ctx_.abort);
    int index = 0;
    for (auto& p : pending_)
      if (p->peer == peer && p->channel == channel) index = p->listener;
    while (true) {
      for (auto it = pending_.begin(); it != pending_.end(); ++it) {
        if ((*it)->peer == peer && (*it)->channel == channel && (*it)->socket.valid()) {
          std::unique_ptr<SocketConn> c = std::move(*it);
          pending_.erase(it);
          return addConn(std::move(c));
        }
      }
      Result<Socket> s = listeners_[index].accept(w, options_);
      if (!s.isOk())
        return s.status().withContext(
            formatString("socket transport: rank %d waiting for rank %d (channel %d) to connect",
                         ctx_.rank, peer, channel));
      Hello h{};
      Waiter helloWait(2.0, ctx_.abort);
      Status hs = s.value().recvAll(&h, sizeof(h), helloWait);
      if (!hs.isOk() || h.magic != kHelloMagic || h.secret != ctx_.secret) {
        LOG_WARN(kSubsysNet, "rank %d: dropped a data connection from %s without valid credentials",
                 ctx_.rank, s.value().peer().toString().c_str());
        continue;
      }
      bool matched = false;
      for (auto& p : pending_) {
        if (p->peer == h.rank && p->channel == h.channel && !p->socket.valid()) {
          p->socket = s.take();
          matched = true;
          break;
        }
      }
      if (!matched)
        LOG_WARN(kSubsysNet, "rank %d: unexpected data connection from rank %d channel %d",
                 ctx_.rank, h.rank, h.channel);
    }
  }

  Status afterSetup() override {
    if (!pending_.empty())
      return internalError("socket transport: %zu receive connectors never connected",
                           pending_.size());
    return Status::ok();
  }

 private:
  // Which of this rank's addresses the data connection of (peer, channel) comes to: the
  // bootstrap's (index 0) or one of the extra interfaces (index i + 1) whose subnet the peer
  // also has an address in, taken in turn by channel so that channels spread over the
  // interfaces both ends share.
  int addressFor(int peer, int channel) const {
    const PeerInfo& me = (*ctx_.peers)[ctx_.rank];
    const PeerInfo& them = (*ctx_.peers)[peer];
    int usable[1 + kMaxExtraAddrs] = {0};
    int n = 1;
    for (int i = 0; i < me.extraAddrs && i < kMaxExtraAddrs; ++i) {
      bool shared = inSubnet(me.extraAddr[i], me.extraMask[i], them.address);
      for (int j = 0; j < them.extraAddrs && j < kMaxExtraAddrs && !shared; ++j)
        shared = inSubnet(me.extraAddr[i], me.extraMask[i], them.extraAddr[j]);
      if (shared) usable[n++] = i + 1;
    }
    return usable[channel % n];
  }

  static bool inSubnet(const sockaddr_storage& addr, const sockaddr_storage& mask,
                       const sockaddr_storage& other) {
    if (addr.ss_family != other.ss_family || addr.ss_family != mask.ss_family) return false;
    const unsigned char *a, *m, *o;
    size_t len;
    if (addr.ss_family == AF_INET) {
      a = reinterpret_cast<const unsigned char*>(
          &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr);
      m = reinterpret_cast<const unsigned char*>(
          &reinterpret_cast<const sockaddr_in*>(&mask)->sin_addr);
      o = reinterpret_cast<const unsigned char*>(
          &reinterpret_cast<const sockaddr_in*>(&other)->sin_addr);
      len = 4;
    } else if (addr.ss_family == AF_INET6) {
      a = reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_addr.s6_addr;
      m = reinterpret_cast<const sockaddr_in6*>(&mask)->sin6_addr.s6_addr;
      o = reinterpret_cast<const sockaddr_in6*>(&other)->sin6_addr.s6_addr;
      len = 16;
    } else {
      return false;
    }
    for (size_t i = 0; i < len; ++i)
      if ((a[i] & m[i]) != (o[i] & m[i])) return false;
    return true;
  }

  // Hands a connected connector to the proxy (started with the first one). Connectors may be
  // added at any time: point-to-point peers are connected when first used.
  Status addConn(std::unique_ptr<SocketConn> c) {
    if (doorbellFd < 0) return errnoError(EMFILE, "socket transport: eventfd for the proxy");
    LOG_INFO(kSubsysNet, "rank %d: %s rank %d channel %d over %s", ctx_.rank,
             c->isSend ? "sending to" : "receiving from", c->peer, c->channel,
             c->socket.peer().toString().c_str());
    {
      std::lock_guard<std::mutex> lock(progressMutex_);
      conns_.push_back(std::move(c));
    }
    if (!proxy_.joinable()) {
      proxy_ = std::thread([this] { proxyLoop(); });
    } else {
      ring();  // the sleeping proxy must add the new socket to its poll set
    }
    return Status::ok();
  }

  std::unique_ptr<SocketConn> newConn(bool isSend, int peer, int channel) {
    auto c = std::make_unique<SocketConn>();
    c->isSend = isSend;
    c->peer = peer;
    c->channel = channel;
    size_t bytes = ctx_.geometry.totalBytes();
    c->memory.reset(aligned_alloc(4096, (bytes + 4095) & ~size_t(4095)));
    if (!c->memory) throw std::bad_alloc();
    fifoInit(c->memory.get(), ctx_.geometry);
    c->fifo = static_cast<FifoHeader*>(c->memory.get());
    c->fifo->proxy = this;
    c->data = static_cast<char*>(c->memory.get()) + FifoGeometry::dataOffset();
    return c;
  }

  void fail(SocketConn& c, const Status& s) {
    c.failed = true;
    Status st =
        s.withContext(formatString("socket transport: %s rank %d (channel %d)",
                                   c.isSend ? "sending to" : "receiving from", c.peer, c.channel));
    LOG_WARN(kSubsysNet, "%s", st.message().c_str());
    ctx_.errors->reportAsyncError(st);
  }

  // Moves as much as the socket takes without blocking; true when something moved.
  bool progressSend(SocketConn& c) {
    bool moved = false;
    uint64_t tail = c.fifo->tail.load(std::memory_order_acquire);
    while (c.done < tail) {
      uint32_t slot = static_cast<uint32_t>(c.done % ctx_.geometry.nslots);
      uint64_t size = c.fifo->slotSize[slot];
      struct iovec iov[2];
      int n = 0;
      if (c.offset < sizeof(uint64_t)) {
        iov[n].iov_base = reinterpret_cast<char*>(&c.fifo->slotSize[slot]) + c.offset;
        iov[n].iov_len = sizeof(uint64_t) - c.offset;
        ++n;
      }
      size_t payloadDone = c.offset > sizeof(uint64_t) ? c.offset - sizeof(uint64_t) : 0;
      if (size > payloadDone) {
        iov[n].iov_base = c.data + size_t(slot) * ctx_.geometry.slotBytes + payloadDone;
        iov[n].iov_len = size - payloadDone;
        ++n;
      }
      struct msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      ssize_t r = sendmsg(c.socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return moved;
        fail(c, errnoError(errno, "send"));
        return moved;
      }
      moved = true;
      c.offset += static_cast<size_t>(r);
      if (c.offset < sizeof(uint64_t) + size) return moved;
      c.offset = 0;
      ++c.done;
      c.fifo->head.store(c.done, std::memory_order_release);
      wakeSleepers(c.fifo->head, c.fifo->headSleepers);
    }
    return moved;
  }

  bool progressRecv(SocketConn& c) {
    bool moved = false;
    while (c.done - c.fifo->head.load(std::memory_order_acquire) < ctx_.geometry.nslots) {
      uint32_t slot = static_cast<uint32_t>(c.done % ctx_.geometry.nslots);
      ssize_t r;
      if (c.offset < sizeof(uint64_t)) {
        r = recv(c.socket.fd(), reinterpret_cast<char*>(&c.msgBytes) + c.offset,
                 sizeof(uint64_t) - c.offset, MSG_DONTWAIT);
      } else {
        size_t got = c.offset - sizeof(uint64_t);
        r = recv(c.socket.fd(), c.data + size_t(slot) * ctx_.geometry.slotBytes + got,
                 c.msgBytes - got, MSG_DONTWAIT);
      }
      if (r == 0) {
        if (c.offset == 0) {
          // A peer that finished its last collective and left: not an error unless this rank
          // still waits for data from it, which the executor reports when it does.
          c.failed = true;
          c.fifo->peerClosed.store(1, std::memory_order_release);
          wakeSleepers(c.fifo->tail, c.fifo->tailSleepers);
          LOG_INFO(kSubsysNet, "rank %d: rank %d closed its connection (channel %d)", ctx_.rank,
                   c.peer, c.channel);
          return moved;
        }
        fail(c, remoteError("rank %d closed the connection in the middle of a message", c.peer));
        return moved;
      }
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return moved;
        fail(c, errnoError(errno, "recv"));
        return moved;
      }
      moved = true;
      c.offset += static_cast<size_t>(r);
      if (c.offset == sizeof(uint64_t) && c.msgBytes > ctx_.geometry.slotBytes) {
        fail(c,
             internalError("message of %llu bytes exceeds the %u-byte slot",
                           static_cast<unsigned long long>(c.msgBytes), ctx_.geometry.slotBytes));
        return moved;
      }
      if (c.offset < sizeof(uint64_t) + c.msgBytes) continue;
      c.fifo->slotSize[slot] = c.msgBytes;
      c.offset = 0;
      c.msgBytes = 0;
      ++c.done;
      c.fifo->tail.store(c.done, std::memory_order_release);
      wakeSleepers(c.fifo->tail, c.fifo->tailSleepers);
    }
    return moved;
  }

  bool sendsDrained() const {
    for (const auto& c : conns_)
      if (c->isSend && !c->failed && c->done < c->fifo->tail.load(std::memory_order_acquire))
        return false;
    return true;
  }

  // Sockets the proxy must watch while it sleeps: receive sides with a free slot, send sides
  // with posted data the socket did not take yet, and the doorbell for new work.
  void buildPollSet(std::vector<pollfd>* fds) {
    fds->clear();
    fds->push_back(pollfd{doorbellFd, POLLIN, 0});
    for (auto& c : conns_) {
      if (c->failed) continue;
      if (c->isSend) {
        if (c->done < c->fifo->tail.load(std::memory_order_acquire))
          fds->push_back(pollfd{c->socket.fd(), POLLOUT, 0});
      } else if (c->done - c->fifo->head.load(std::memory_order_acquire) < ctx_.geometry.nslots) {
        fds->push_back(pollfd{c->socket.fd(), POLLIN, 0});
      }
    }
  }

  void tryProgress() override {
    std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
    if (lock.owns_lock()) progressAll();
  }

  // Callers hold progressMutex_.
  bool progressAll() {
    bool moved = false;
    for (auto& c : conns_) {
      if (c->failed) continue;
      moved |= c->isSend ? progressSend(*c) : progressRecv(*c);
    }
    return moved;
  }

  void proxyLoop() {
    std::vector<pollfd> fds;
    const int64_t spin = 16;
    int64_t idle = 0;
    Clock::time_point drainDeadline{};
    bool draining = false;
    std::unique_lock<std::mutex> lock(progressMutex_);
    while (true) {
      bool moved = progressAll();
      if (stop_.load(std::memory_order_relaxed)) {
        // Deliver what was posted before the communicator went away, within a bound.
        if (!draining) {
          draining = true;
          drainDeadline = Clock::now() + std::chrono::seconds(10);
        }
        if (ctx_.abort->isRaised() || sendsDrained() || Clock::now() > drainDeadline) return;
      }
      if (moved) {
        idle = 0;
        continue;
      }
      // Executor threads drive progress while they wait, so the proxy need not spin long: it
      // covers the time when they compute or have returned to the application.
      if (++idle < spin) {
        lock.unlock();
        cpuRelax();
        lock.lock();
        continue;
      }
      // Sleep until a socket is ready or an executor posts or frees a slot. The flag is raised
      // before the last look at the FIFOs, so a change after that look rings the doorbell.
      sleeping.store(1, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!progressAll() && !stop_.load()) {
        buildPollSet(&fds);
        lock.unlock();
        poll(fds.data(), fds.size(), 100);
        lock.lock();
      }
      sleeping.store(0, std::memory_order_relaxed);
      uint64_t drained;
      while (read(doorbellFd, &drained, sizeof(drained)) > 0) {
      }
      idle = 0;
    }
  }

  TransportContext ctx_;
  SocketOptions options_;
  Listener listeners_[1 + kMaxExtraAddrs];            // by address index (see addressFor)
  std::vector<std::unique_ptr<SocketConn>> pending_;  // receive sides waiting for their sender
  std::vector<std::unique_ptr<SocketConn>> conns_;
  std::thread proxy_;
  std::atomic<bool> stop_{false};
  std::mutex progressMutex_;  // one thread at a time moves data on the connections
};

}  // namespace

std::unique_ptr<Transport> makeSocketTransport(const TransportContext& ctx) {
  return std::make_unique<SocketTransport>(ctx);
}

}  // namespace chorus
