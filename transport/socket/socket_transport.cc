// Socket transport: TCP between ranks that share no memory. Each connector is a FIFO in local
// memory whose far end is this communicator's proxy thread: it sends the slots the executor
// posts, and fills receive slots from the sockets. A connector has one or more TCP connections
// ("streams", CHORUS_SOCKET_NSTREAMS): one stream is often limited well below the link by its
// congestion window, several share the link. A message (one slot) is cut into one stripe per
// stream, each sent after the message's 32-byte header (its length and the call it belongs to,
// SlotInfo); messages under kStripeMinBytes travel whole on stream 0, and stream 0 always
// carries at least the header.
// Where both ranks of a pair send to each other on a channel (setupRecv's sendsBack on both
// ends), the two directions share the connections: the lower rank connects, the higher rank
// sends back on the sockets it accepted. Each side's data then carries the acknowledgements of
// the other's, and a small exchange costs two segments instead of four.
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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
#include "transport/socket/socket_conn.h"
#include "transport/transport.h"

namespace chorus {

namespace {

using namespace socket_detail;

constexpr uint64_t kHelloMagic = 0x43484f5255534443ull;  // "CHORUSDC"

// Bytes a receive side reads from stream 0 at a time when the message part it still needs is
// smaller than this (its header, or a small payload).
constexpr size_t kStageBytes = 4096;

struct Hello {
  uint64_t magic;
  uint64_t secret;
  int32_t rank;
  int32_t channel;
  int32_t stream;
  int32_t nstreams;
  int32_t shared;  // the connection carries both directions
};

struct SocketInfo {
  sockaddr_storage address;
  int32_t nstreams;   // the receiver's choice; the sender follows it
  int32_t sendsBack;  // the receiver also sends to the sender on this channel
};
static_assert(sizeof(SocketInfo) <= sizeof(ConnectInfo), "SocketInfo must fit a ConnectInfo");

class SocketTransport final : public Transport, public ProxyLink {
 public:
  explicit SocketTransport(const TransportContext& ctx) : ctx_(ctx) {
    options_.noDelay = true;
    options_.bufferBytes = static_cast<int>(paramInt("SOCKET_BUFFSIZE"));
    int64_t n = paramInt("SOCKET_NSTREAMS");
    nstreams_ = static_cast<int>(n < 1 ? 1 : n > kMaxStreams ? kMaxStreams : n);
    doorbellFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }

  ~SocketTransport() override {
    stop_.store(true);
    if (doorbellFd >= 0) ring();
    if (proxy_.joinable()) proxy_.join();
    if (doorbellFd >= 0) close(doorbellFd);
  }

  const char* name() const override { return "socket"; }

  Status setupRecv(int peer, int channel, bool sendsBack, ConnectInfo* info,
                   RecvConnector* conn) override {
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
    c->sendsBack = sendsBack;
    c->stage.reset(new char[kStageBytes]);
    c->streams.resize(static_cast<size_t>(nstreams_));
    *conn = RecvConnector(c->memory.get());
    pending_.push_back(std::move(c));
    SocketInfo si{};
    si.address = listeners_[index].address().storage();
    si.nstreams = nstreams_;
    si.sendsBack = sendsBack ? 1 : 0;
    memcpy(info->bytes, &si, sizeof(si));
    return Status::ok();
  }

  Status connectSend(int peer, int channel, const ConnectInfo& info, SendConnector* conn) override {
    SocketInfo si;
    memcpy(&si, info.bytes, sizeof(si));
    SocketAddress addr(si.address);
    if (si.nstreams < 1 || si.nstreams > kMaxStreams)
      return internalError("socket transport: rank %d asks for %d streams (1..%d)", peer,
                           si.nstreams, kMaxStreams);
    Waiter w(ctx_.timeoutSeconds, ctx_.abort);
    auto c = newConn(true, peer, channel);
    c->streams.resize(static_cast<size_t>(si.nstreams));
    *conn = SendConnector(c->memory.get());
    SocketConn* back = si.sendsBack ? pendingRecv(peer, channel) : nullptr;
    if (back != nullptr && !back->sendsBack) back = nullptr;
    if (back != nullptr && ctx_.rank > peer) {
      // The peer connects both directions; this side sends on what finishRecv accepts.
      back->sharing = c->sharing = SocketConn::kAccepts;
      deferredSends_.push_back(std::move(c));
      return Status::ok();
    }
    for (int i = 0; i < si.nstreams; ++i) {
      Result<Socket> s = watchingPeer(peer, w, "tried to connect to it", [&](Waiter& slice) {
        return connectSocket(addr, slice, options_);
      });
      if (!s.isOk())
        return s.status().withContext(formatString(
            "socket transport: rank %d connecting to rank %d (channel %d, stream %d) at %s",
            ctx_.rank, peer, channel, i, addr.toString().c_str()));
      Hello h{kHelloMagic, ctx_.secret, ctx_.rank, channel, i, si.nstreams, back != nullptr};
      CHORUS_TRY(s.value().sendAll(&h, sizeof(h), w));
      c->streams[i].socket = std::make_shared<Socket>(s.take());
    }
    if (back != nullptr) {
      // The receive side reads what the peer sends back on these connections.
      back->sharing = c->sharing = SocketConn::kConnects;
      back->streams = c->streams;  // no message has started on either side yet
    }
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
        if ((*it)->peer == peer && (*it)->channel == channel && (*it)->connected()) {
          std::unique_ptr<SocketConn> c = std::move(*it);
          pending_.erase(it);
          if (c->sharing == SocketConn::kAccepts) CHORUS_TRY(startDeferredSend(*c));
          return addConn(std::move(c));
        }
      }
      Result<Socket> s = watchingPeer(peer, w, "waited for it to connect", [&](Waiter& slice) {
        return listeners_[index].accept(slice, options_);
      });
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
        const int n = static_cast<int>(p->streams.size());
        if (p->peer == h.rank && p->channel == h.channel && h.nstreams == n && h.stream >= 0 &&
            h.stream < n && !p->streams[h.stream].socket) {
          if ((h.shared != 0) != (p->sharing == SocketConn::kAccepts))
            return internalError(
                "socket transport: rank %d's connection (channel %d) %s both directions, rank %d "
                "expected %s",
                h.rank, h.channel, h.shared ? "carries" : "does not carry", ctx_.rank,
                h.shared ? "separate ones" : "one connection");
          p->streams[h.stream].socket = std::make_shared<Socket>(s.take());
          matched = true;
          break;
        }
      }
      if (!matched)
        LOG_WARN(kSubsysNet,
                 "rank %d: unexpected data connection from rank %d channel %d stream %d of %d",
                 ctx_.rank, h.rank, h.channel, h.stream, h.nstreams);
    }
  }

  // Makes attempt(slice) within w, in slices of 0.1 s, giving up early when the bootstrap shows
  // that peer went away (it failed elsewhere and ended, so its connection will never come; a
  // refused connect is otherwise retried, as the listener may not be up yet). doing: what this
  // rank was doing, for the message.
  template <class Attempt>
  Result<Socket> watchingPeer(int peer, Waiter& w, const char* doing, Attempt attempt) {
    const Clock::time_point deadline = w.deadline();
    while (true) {
      Waiter slice(0.1, ctx_.abort);
      Result<Socket> s = attempt(slice);
      // Done, aborted, or failed otherwise than by the slice's end.
      if (s.isOk() || slice.aborted() || s.status().code() != Code::kRemoteError) return s;
      if (ctx_.bootstrap != nullptr && ctx_.bootstrap->peerGone(peer))
        return remoteError(
            "rank %d closed its connections while this rank %s: it exited or destroyed its "
            "communicator (did its call fail?)",
            peer, doing);
      if (Clock::now() >= deadline) return s;
    }
  }

  Status afterSetup() override {
    if (!pending_.empty())
      return internalError("socket transport: %zu receive connectors never connected",
                           pending_.size());
    if (!deferredSends_.empty())
      return internalError("socket transport: %zu send connectors never got their connections",
                           deferredSends_.size());
    return Status::ok();
  }

 private:
  SocketConn* pendingRecv(int peer, int channel) {
    for (auto& p : pending_)
      if (p->peer == peer && p->channel == channel) return p.get();
    return nullptr;
  }

  // The send side of a pair whose peer connected both directions: it sends on the connections
  // the receive side r accepted.
  Status startDeferredSend(const SocketConn& r) {
    for (auto it = deferredSends_.begin(); it != deferredSends_.end(); ++it) {
      if ((*it)->peer != r.peer || (*it)->channel != r.channel) continue;
      std::unique_ptr<SocketConn> c = std::move(*it);
      deferredSends_.erase(it);
      c->streams = r.streams;  // no message has started on either side yet
      return addConn(std::move(c));
    }
    return internalError("socket transport: no send side for rank %d channel %d", r.peer,
                         r.channel);
  }

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
    LOG_INFO(kSubsysNet, "rank %d: %s rank %d channel %d over %s, %zu stream(s)%s", ctx_.rank,
             c->isSend ? "sending to" : "receiving from", c->peer, c->channel,
             c->streams[0].socket->peer().toString().c_str(), c->streams.size(),
             c->sharing == SocketConn::kOwn ? "" : ", both directions");
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
    c->memory = allocLocalFifo(ctx_.geometry, this, &c->fifo, &c->data);
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

  // A failed send or recv: the peer's end gone (it exited, or its communicator failed and
  // closed its connections) is the peer's failure, anything else this host's.
  Status ioError(const SocketConn& c, int err, const char* what) const {
    if (err == EPIPE || err == ECONNRESET)
      return remoteError(
          "rank %d closed the connection (%s: %s): it exited, or its communicator "
          "failed",
          c.peer, what, strerror(err));
    return errnoError(err, what);
  }

  // Moves as much as the sockets take without blocking; true when something moved.
  bool progressSend(SocketConn& c) {
    bool moved = false;
    uint64_t tail = c.fifo->tail.load(std::memory_order_acquire);
    while (c.done < tail) {
      const uint32_t slot = static_cast<uint32_t>(c.done % ctx_.geometry.nslots);
      if (!c.inMessage) c.startMessage(c.fifo->slots[slot]);
      const char* payload = c.data + size_t(slot) * ctx_.geometry.slotBytes;
      bool complete = true;
      for (SocketStream& st : c.streams) {
        while (st.pending()) {
          struct iovec iov[2];
          int n = 0;
          if (st.offset < kHeadBytes) {
            iov[n].iov_base = reinterpret_cast<char*>(&st.head) + st.offset;
            iov[n].iov_len = kHeadBytes - st.offset;
            ++n;
          }
          const size_t done = st.offset > kHeadBytes ? st.offset - kHeadBytes : 0;
          const size_t stripe = st.total - kHeadBytes;
          if (stripe > done) {
            iov[n].iov_base = const_cast<char*>(payload + st.begin + done);
            iov[n].iov_len = stripe - done;
            ++n;
          }
          struct msghdr msg = {};
          msg.msg_iov = iov;
          msg.msg_iovlen = n;
          ssize_t r = sendmsg(st.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
            fail(c, ioError(c, errno, "send"));
            return moved;
          }
          moved = true;
          st.offset += static_cast<size_t>(r);
        }
        complete = complete && !st.pending();
      }
      if (!complete) return moved;
      c.inMessage = false;
      ++c.done;
      c.fifo->head.store(c.done, std::memory_order_release);
      wakeSleepers(c.fifo->head, c.fifo->headSleepers);
    }
    return moved;
  }

  // Reads from one stream into its part of the message in progress. Returns the bytes read,
  // 0 when the peer closed the stream, -1 when nothing is there (or on failure: see c.failed).
  // Stream 0 reads through the connection's stage, so that one recv takes a small message's
  // header and payload together (bytes of the next message stay there for it); what is left
  // of a large part is read straight into the slot.
  ssize_t readStream(SocketConn& c, SocketStream& st, char* payload) {
    const size_t want = st.total - st.offset;
    const bool staged = &st == &c.streams[0];
    if (staged && c.stageBegin == c.stageEnd && (st.offset < kHeadBytes || want < kStageBytes)) {
      ssize_t r = recv(st.fd(), c.stage.get(), kStageBytes, MSG_DONTWAIT);
      if (r <= 0) return recvFailed(c, r);
      c.stageBegin = 0;
      c.stageEnd = static_cast<size_t>(r);
    }
    if (staged && c.stageBegin < c.stageEnd) {
      const size_t take = std::min(want, c.stageEnd - c.stageBegin);
      const char* from = c.stage.get() + c.stageBegin;
      size_t used = 0;
      if (st.offset < kHeadBytes) {
        used = std::min(take, kHeadBytes - st.offset);
        memcpy(reinterpret_cast<char*>(&st.head) + st.offset, from, used);
      }
      if (take > used) {
        const size_t done = st.offset + used - kHeadBytes;
        memcpy(payload + st.begin + done, from + used, take - used);
      }
      c.stageBegin += take;
      st.offset += take;
      return static_cast<ssize_t>(take);
    }
    ssize_t r;
    if (st.offset < kHeadBytes) {
      r = recv(st.fd(), reinterpret_cast<char*>(&st.head) + st.offset, kHeadBytes - st.offset,
               MSG_DONTWAIT);
    } else {
      const size_t done = st.offset - kHeadBytes;
      r = recv(st.fd(), payload + st.begin + done, want, MSG_DONTWAIT);
    }
    if (r <= 0) return recvFailed(c, r);
    st.offset += static_cast<size_t>(r);
    return r;
  }

  // readStream's result for a recv that returned r <= 0.
  ssize_t recvFailed(SocketConn& c, ssize_t r) {
    if (r == 0) return 0;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      fail(c, ioError(c, errno, "recv"));
    return -1;
  }

  bool progressRecv(SocketConn& c) {
    bool moved = false;
    while (c.done - c.fifo->head.load(std::memory_order_acquire) < ctx_.geometry.nslots) {
      const uint32_t slot = static_cast<uint32_t>(c.done % ctx_.geometry.nslots);
      char* payload = c.data + size_t(slot) * ctx_.geometry.slotBytes;
      if (!c.inMessage) {
        // The next message starts with its header on stream 0.
        SocketStream& first = c.streams[0];
        first.total = kHeadBytes;
        ssize_t r = readStream(c, first, payload);
        if (r < 0) return moved;
        if (r == 0) {
          if (first.offset == 0) {
            // A peer that finished its last collective and left: not an error unless this
            // rank still waits for data from it, which the executor reports when it does.
            c.failed = true;
            closeFromPeer(c.fifo, "");
            LOG_INFO(kSubsysNet, "rank %d: rank %d closed its connection (channel %d)", ctx_.rank,
                     c.peer, c.channel);
            return moved;
          }
          fail(c, remoteError("rank %d closed the connection in the middle of a message", c.peer));
          return moved;
        }
        moved = true;
        if (first.offset < kHeadBytes) continue;
        const uint64_t bytes = first.head.bytes;
        if (first.head.tag.what == kFailNoticeKind && bytes >= kPeerErrorBytes) {
          fail(c, internalError("failure notice of %llu bytes (at most %zu)",
                                static_cast<unsigned long long>(bytes), kPeerErrorBytes - 1));
          return moved;
        }
        if (bytes > ctx_.geometry.slotBytes) {
          fail(c, internalError("message of %llu bytes exceeds the %u-byte slot",
                                static_cast<unsigned long long>(bytes), ctx_.geometry.slotBytes));
          return moved;
        }
        const SlotInfo head = first.head;
        c.startMessage(head);
        first.offset = kHeadBytes;
      }
      bool complete = true;
      for (SocketStream& st : c.streams) {
        while (st.pending()) {
          const bool hadLength = st.offset >= kHeadBytes;
          ssize_t r = readStream(c, st, payload);
          if (c.failed) return moved;
          if (r < 0) break;
          if (r == 0) {
            fail(c, remoteError("rank %d closed a connection in the middle of a message", c.peer));
            return moved;
          }
          moved = true;
          if (!hadLength && st.offset >= kHeadBytes &&
              (st.head.bytes != c.msgBytes || st.head.tag != c.msgTag)) {
            fail(c,
                 internalError("streams of one message disagree on its header (%llu, %llu bytes)",
                               static_cast<unsigned long long>(st.head.bytes),
                               static_cast<unsigned long long>(c.msgBytes)));
            return moved;
          }
        }
        complete = complete && !st.pending();
      }
      if (!complete) return moved;
      if (c.msgTag.what == kFailNoticeKind) {
        // Not data: the peer's communicator failed and says why; nothing more will come.
        c.failed = true;
        closeFromPeer(c.fifo, std::string(payload, c.msgBytes));
        LOG_INFO(kSubsysNet, "rank %d: rank %d closed its connection (channel %d): %s", ctx_.rank,
                 c.peer, c.channel, c.fifo->peerError);
        return moved;
      }
      c.fifo->slots[slot] = SlotInfo{c.msgBytes, c.msgTag};
      c.inMessage = false;
      for (SocketStream& st : c.streams) st.offset = st.total = 0;
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

  // Sockets the proxy must watch while it sleeps: receive sides with a free slot (unless the
  // drivers watch them), send sides with posted data the sockets did not take yet, and the
  // doorbell for new work.
  void buildPollSet(std::vector<pollfd>* fds) {
    fds->clear();
    fds->push_back(pollfd{doorbellFd, POLLIN, 0});
    for (auto& c : conns_) {
      c->watched = streamsToWatch(*c);
      const short events = c->isSend ? POLLOUT : POLLIN;
      for (size_t i = 0; i < c->streams.size(); ++i)
        if (c->watched & (1u << i)) fds->push_back(pollfd{c->streams[i].fd(), events, 0});
    }
  }

  // The streams of c whose readiness lets data move: none unless a send side has posted data
  // the sockets did not take or a receive side has a free slot; then the streams whose part of
  // the message in progress is unfinished, or between messages stream 0 (receive: the header
  // comes first) or every stream (send).
  uint32_t streamsToWatch(const SocketConn& c) const {
    if (c.failed || (!c.isSend && recvLeftToDrivers_)) return 0;
    if (c.isSend ? c.done >= c.fifo->tail.load(std::memory_order_acquire)
                 : c.done - c.fifo->head.load(std::memory_order_acquire) >= ctx_.geometry.nslots)
      return 0;
    uint32_t mask = 0;
    for (size_t i = 0; i < c.streams.size(); ++i) {
      const bool needed = c.inMessage ? c.streams[i].pending() : (c.isSend || i == 0);
      if (needed) mask |= 1u << i;
    }
    return mask;
  }

  void tryProgress(const void* fifo) override {
    std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
    if (lock.owns_lock()) progressFor(fifo);
  }

  void tryProgressAll() override {
    std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
    if (lock.owns_lock()) progressAll();
  }

  bool progressNeedsProxy() override {
    std::unique_lock<std::mutex> lock(progressMutex_, std::try_to_lock);
    if (!lock.owns_lock()) return true;  // another thread's pass may have missed the change
    progressFor(nullptr);
    for (const auto& c : conns_)
      if ((streamsToWatch(*c) & ~c->watched) != 0) return true;
    return false;
  }

  // Callers hold progressMutex_. Every connection (the proxy), or the sending ones and the one
  // receiving into recvFifo, if any (threads that wait or post).
  bool progressAll() { return progress(true, nullptr); }
  bool progressFor(const void* recvFifo) { return progress(false, recvFifo); }
  bool progress(bool everyRecv, const void* recvFifo) {
    bool moved = false;
    for (auto& c : conns_) {
      if (c->failed) continue;
      if (c->isSend)
        moved |= progressSend(*c);
      else if (everyRecv || recvFifo == c->fifo)
        moved |= progressRecv(*c);
    }
    return moved;
  }

  // A communicator that failed or was aborted ends its connections at once: peers waiting on
  // them fail promptly (and in turn end theirs) instead of waiting for their timeout.
  // Each peer that receives from this rank first gets a notice saying why, where no message is
  // half sent (best effort: one non-blocking send), so that its own error names the cause.
  void shutDownAll() {
    shutDown_ = true;
    std::string why = ctx_.errors != nullptr ? ctx_.errors->failureText() : std::string();
    if (why.empty()) why = formatString("rank %d: the communicator was aborted", ctx_.rank);
    why.resize(std::min(why.size(), kPeerErrorBytes - 1));
    std::vector<char> notice(kHeadBytes + why.size());
    SlotInfo head{};
    head.bytes = why.size();
    head.tag.what = kFailNoticeKind;
    memcpy(notice.data(), &head, kHeadBytes);
    memcpy(notice.data() + kHeadBytes, why.data(), why.size());
    for (auto& c : conns_) {
      if (c->isSend && !c->failed && !c->inMessage && !c->streams.empty() && c->streams[0].socket &&
          c->streams[0].socket->valid()) {
        ssize_t r =
            ::send(c->streams[0].fd(), notice.data(), notice.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)r;
      }
      c->failed = true;
      for (SocketStream& st : c->streams)
        if (st.socket && st.socket->valid()) ::shutdown(st.fd(), SHUT_RDWR);
    }
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
      if (!shutDown_ && ctx_.abort->isRaised()) shutDownAll();
      if (stop_.load(std::memory_order_relaxed)) {
        // Deliver what was posted before the communicator went away, within a bound.
        if (!draining) {
          draining = true;
          drainDeadline = Clock::now() + std::chrono::seconds(10);
          // Destroyed after a call failed on a peer: the others may wait on this rank, so it
          // tells them why as it closes, rather than looking like a rank that just left.
          if (!shutDown_ && ctx_.errors != nullptr && !ctx_.errors->failureText().empty())
            shutDownAll();
        }
        if (ctx_.abort->isRaised() || sendsDrained() || Clock::now() > drainDeadline) return;
      }
      if (moved) {
        idle = 0;
        continue;
      }
      // Executor threads drive progress while they wait, so the proxy need not spin long: it
      // covers the time when they compute or have returned to the application. While one
      // drives, the proxy's spinning would only contend with it for the lock and the core.
      if (drivers.load(std::memory_order_relaxed) == 0 && ++idle < spin) {
        lock.unlock();
        cpuRelax();
        lock.lock();
        continue;
      }
      // Sleep until a socket is ready or an executor posts or frees a slot. The flag is raised
      // before the last look at the FIFOs and at the drives, so a change after that look rings
      // the doorbell.
      sleeping.store(kAsleepDriven, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!progressAll() && !stop_.load()) {
        recvLeftToDrivers_ = receivesLeftToDrivers();
        if (!recvLeftToDrivers_) sleeping.store(kAsleep, std::memory_order_seq_cst);
        buildPollSet(&fds);
        lock.unlock();
        poll(fds.data(), fds.size(), recvLeftToDrivers_ ? kDrivenSleepMs : 100);
        lock.lock();
        recvLeftToDrivers_ = false;
      }
      sleeping.store(kAwake, std::memory_order_relaxed);
      uint64_t drained;
      while (read(doorbellFd, &drained, sizeof(drained)) > 0) {
      }
      idle = 0;
    }
  }

  TransportContext ctx_;
  bool shutDown_ = false;  // shutDownAll ran (proxy thread only)
  SocketOptions options_;
  int nstreams_ = 1;                        // streams of the connectors this rank receives on
  Listener listeners_[1 + kMaxExtraAddrs];  // by address index (see addressFor)
  std::vector<std::unique_ptr<SocketConn>> pending_;  // receive sides waiting for their sender
  // Send sides waiting for the connections their peer makes for both directions.
  std::vector<std::unique_ptr<SocketConn>> deferredSends_;
  std::vector<std::unique_ptr<SocketConn>> conns_;
  std::thread proxy_;
  std::atomic<bool> stop_{false};
  std::mutex progressMutex_;  // one thread at a time moves data on the connections
  // The proxy's sleep (see ProxyLink drives) leaves the receiving sockets unwatched.
  bool recvLeftToDrivers_ = false;
};

}  // namespace

std::unique_ptr<Transport> makeSocketTransport(const TransportContext& ctx) {
  return std::make_unique<SocketTransport>(ctx);
}

}  // namespace chorus
