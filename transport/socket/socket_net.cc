// The socket network (socket_net.h). Wire: each message is a 16-byte header (tag, size) and
// its bytes; a striped message's header is repeated on every stream that carries a stripe, so
// that a stream out of step fails instead of reading sizes from data. Messages are matched to
// receives in the order both were posted; a receive's tag must be the message's, and a
// grouped receive takes the next n messages, each into the buffer of its tag. Every call is
// non-blocking: isend queues, test writes what the sockets take (the queued messages in one
// sendmsg), a receive reads stream 0 through a stage so that one recv
// takes a small message's header and bytes together, connect keeps its progress behind the
// handle and accept in the listening comm. The listener's handle carries a random nonce that
// each stream presents as it connects: connections without it are dropped. pollFds names the
// descriptors a comm waits on, so that the transport's proxy sleeps in poll.
#include "transport/socket/socket_net.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/log.h"
#include "common/param.h"
#include "common/socket.h"
#include "topo/topology.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"
#include "transport/socket/socket_conn.h"

namespace chorus {

const char kSocketNetName[] = "Socket";

namespace {

using socket_detail::kMaxStreams;
using socket_detail::stripeOf;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kHandleMagic = 0x43534b48;            // "CSKH"
constexpr uint32_t kWireMagic = 0x43534b4d;              // "CSKM"
constexpr uint64_t kHelloMagic = 0x434853534b4e4554ull;  // "CHSSKNET"
constexpr int kMaxRecvs = 8;
constexpr int kMaxRequests = NCCL_NET_MAX_REQUESTS;
constexpr size_t kStageBytes = 16384;
constexpr int kIovMax = 64;
// How long a connect is tried: a refused or unreachable attempt is made again, an unanswered
// one waited for (the listener is up before its handle is handed out, so this covers a backlog
// that overflowed or a peer that cannot be reached, not a late listener).
constexpr double kConnectRetrySeconds = 10;

struct Connecting;

// What listen writes; connect keeps its progress behind `connecting`.
struct Handle {
  uint32_t magic;
  int32_t nstreams;
  uint64_t nonce;
  union {
    sockaddr_in v4;
    sockaddr_in6 v6;
  } addr;
  uint32_t addrLen;
  Connecting* connecting;  // null: not started
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "a handle fits NCCL's");

struct Hello {
  uint64_t magic;
  uint64_t nonce;
  int32_t stream;
  int32_t nstreams;
  int32_t both;  // the connection carries both directions (connectBoth)
  int32_t reserved;
};

struct WireHead {
  int32_t tag;
  uint32_t magic;
  uint64_t bytes;
};
constexpr size_t kHeadBytes = sizeof(WireHead);

struct Comm;

struct Request {
  Comm* comm = nullptr;
  bool used = false;
  int n = 0;       // buffers: a send 1, a grouped receive up to kMaxRecvs
  int filled = 0;  // of them, whose message moved
  char* data[kMaxRecvs] = {};
  size_t size[kMaxRecvs] = {};  // a send's bytes; a receive's room
  int tag[kMaxRecvs] = {};
  size_t got[kMaxRecvs] = {};
  bool has[kMaxRecvs] = {};
};

// One message's part on one stream: header bytes and then the stripe [begin, begin + stripe).
struct Part {
  uint64_t begin = 0;
  size_t total = 0;   // bytes on this stream, header included where it has one (0: none)
  size_t offset = 0;  // moved
  size_t head = 0;    // header bytes at its start (kHeadBytes or 0)
};

struct SendMsg {
  Request* req = nullptr;
  WireHead head{};
  const char* data = nullptr;
  Part part[kMaxStreams];
};

struct Comm {
  bool isSend = false;
  // The connection's streams: shared by the send and the receive comm of a connection that
  // carries both directions (connectBoth, acceptBoth).
  std::shared_ptr<std::vector<Socket>> streams;
  size_t nstreams() const { return streams->size(); }
  int fd(size_t s) const { return (*streams)[s].fd(); }
  Status failure = Status::ok();  // the first failure: every later call returns it
  Request reqs[kMaxRequests];
  std::deque<SendMsg> out;      // a send comm's messages, oldest first
  std::deque<Request*> posted;  // a receive comm's receives: the front takes the next message
  // The message a receive comm is taking: its header (from stream 0) and each stream's part.
  bool inMessage = false;
  WireHead head{};
  size_t headGot = 0;
  WireHead streamHead[kMaxStreams] = {};
  Part part[kMaxStreams];
  Request* dest = nullptr;
  int destBuf = 0;
  std::unique_ptr<char[]> stage;  // stream 0's bytes read and not used yet
  size_t stageBegin = 0;
  size_t stageEnd = 0;
};

struct Listen {
  Listener listener;
  uint64_t nonce = 0;
  int nstreams = 1;
  struct Pending {
    Socket socket;
    Hello hello{};
    size_t got = 0;
  };
  std::vector<Pending> pending;  // accepted, hello not read yet
  std::vector<Socket> streams;   // the connection being assembled, by stream index
  int both = 0;                  // what its streams' hellos say
};

struct Connecting {
  enum State { kStart, kWait, kHello, kDone };
  struct Stream {
    Socket socket;
    State state = kStart;
    size_t helloSent = 0;
    SteadyClock::time_point retryAt{};
  };
  std::vector<Stream> streams;
  SocketAddress address;
  Hello hello{};
  SteadyClock::time_point deadline{};
};

int interfaceSpeed(const std::string& name) {
  std::ifstream in("/sys/class/net/" + name + "/speed");
  int mbps = 0;
  return in >> mbps && mbps > 0 ? mbps : 10000;
}

// The PCI function's directory of an interface ("": virtual): its device link resolved, up to
// the PCI function where the link names a function's child (virtio's).
std::string interfacePciPath(const std::string& name) {
  char resolved[PATH_MAX];
  const std::string dev = "/sys/class/net/" + name + "/device";
  if (realpath(dev.c_str(), resolved) == nullptr) return "";
  std::string path = resolved;
  for (int up = 0; up < 3 && !path.empty(); ++up) {
    const size_t slash = path.rfind('/');
    if (!normalizePciBusId(path.substr(slash + 1)).empty()) return path;
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return "";
}

class SocketNet final : public NetPlugin {
 public:
  explicit SocketNet(std::vector<InterfaceAddress> devices) : devices_(std::move(devices)) {
    options_.noDelay = true;
    options_.bufferBytes = static_cast<int>(paramInt("SOCKET_BUFFSIZE"));
    const int64_t n = paramInt("SOCKET_NSTREAMS");
    nstreams_ = static_cast<int>(n < 1 ? 1 : n > kMaxStreams ? kMaxStreams : n);
  }

  const char* name() const override { return kSocketNetName; }
  int version() const override { return 12; }
  const std::string& library() const override { return library_; }
  int devices() const override { return static_cast<int>(devices_.size()); }

  Status properties(int dev, Properties* out) override {
    CHORUS_TRY(checkDev(dev));
    const InterfaceAddress& a = devices_[static_cast<size_t>(dev)];
    *out = Properties{};
    out->name = a.name;
    out->speedMbps = interfaceSpeed(a.name);
    out->maxRecvs = kMaxRecvs;
    out->ptrSupport = NCCL_PTR_HOST;
    out->maxMessageBytes = size_t(1) << 40;
    out->pciPath = interfacePciPath(a.name);
    return Status::ok();
  }

  Status listen(int dev, void* handle, void** listenComm) override {
    *listenComm = nullptr;
    CHORUS_TRY(checkDev(dev));
    SocketAddress bindAddr(devices_[static_cast<size_t>(dev)].addr);
    bindAddr.setPort(0);
    Result<Listener> l = Listener::open(bindAddr);
    if (!l.isOk())
      return l.status().withContext("socket network: listening on " + bindAddr.toString());
    auto lc = std::make_unique<Listen>();
    lc->listener = l.take();
    lc->nonce = random64();
    lc->nstreams = nstreams_;
    lc->streams.resize(static_cast<size_t>(nstreams_));
    Handle h{};
    h.magic = kHandleMagic;
    h.nstreams = nstreams_;
    h.nonce = lc->nonce;
    const SocketAddress& at = lc->listener.address();
    h.addrLen = static_cast<uint32_t>(std::min<size_t>(at.length(), sizeof h.addr));
    memcpy(&h.addr, at.sockaddrPtr(), h.addrLen);
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &h, sizeof h);
    *listenComm = lc.release();
    return Status::ok();
  }

  Status connect(int dev, void* handle, void** sendComm) override {
    return connectImpl(dev, handle, sendComm, nullptr);
  }

  // A connection that carries both directions: the pair's two ends agree on it (the end that
  // connects calls this, the end that accepts acceptBoth).
  bool bothWays() const override { return true; }
  Status connectBoth(int dev, void* handle, void** sendComm, void** recvComm) override {
    *recvComm = nullptr;
    return connectImpl(dev, handle, sendComm, recvComm);
  }
  void abandonConnect(void* handle) override {
    Handle h;
    memcpy(&h, handle, sizeof h);
    if (h.magic != kHandleMagic || h.connecting == nullptr) return;
    delete h.connecting;
    h.connecting = nullptr;
    memcpy(handle, &h, sizeof h);
  }
  Status accept(void* listenComm, void** recvComm) override {
    return acceptImpl(listenComm, recvComm, nullptr);
  }
  Status acceptBoth(void* listenComm, void** recvComm, void** sendComm) override {
    *sendComm = nullptr;
    return acceptImpl(listenComm, recvComm, sendComm);
  }

  // Host memory is sent and received where it is: nothing to register.
  Status regMr(void* comm, void* data, size_t size, void** mhandle) override {
    (void)data, (void)size;
    *mhandle = comm;
    return Status::ok();
  }
  Status deregMr(void*, void*) override { return Status::ok(); }

  Status isend(void* sendComm, void* data, size_t size, int tag, void*, void** request) override {
    *request = nullptr;
    Comm& c = *static_cast<Comm*>(sendComm);
    if (!c.failure.isOk()) return c.failure;
    Request* r = freeRequest(c);
    if (r == nullptr) return Status::ok();
    r->n = 1;
    r->data[0] = static_cast<char*>(data);
    r->size[0] = r->got[0] = size;
    r->tag[0] = tag;
    SendMsg m;
    m.req = r;
    m.head = WireHead{tag, kWireMagic, size};
    m.data = static_cast<const char*>(data);
    const int n = static_cast<int>(c.nstreams());
    for (int s = 0; s < n; ++s) {
      uint64_t b, e;
      stripeOf(size, n, s, &b, &e);
      Part& p = m.part[s];
      p.begin = b;
      p.head = s == 0 || e > b ? kHeadBytes : 0;
      p.total = p.head + (e - b);
    }
    c.out.push_back(m);
    *request = r;
    return Status::ok();
  }

  Status irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    return irecvGroup(recvComm, 1, &data, &size, &tag, &mhandle, request);
  }

  Status irecvGroup(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                    void**, void** request) override {
    *request = nullptr;
    Comm& c = *static_cast<Comm*>(recvComm);
    if (n < 1 || n > kMaxRecvs)
      return invalidArgument("socket network: a grouped receive of %d buffers (1 to %d)", n,
                             kMaxRecvs);
    if (!c.failure.isOk()) return c.failure;
    Request* r = freeRequest(c);
    if (r == nullptr) return Status::ok();
    r->n = n;
    for (int i = 0; i < n; ++i) {
      r->data[i] = static_cast<char*>(data[i]);
      r->size[i] = sizes[i];
      r->tag[i] = tags[i];
    }
    c.posted.push_back(r);
    *request = r;
    return Status::ok();
  }

  Status test(void* request, bool* done, size_t* size) override {
    return testGroup(request, 1, done, size);
  }

  Status testGroup(void* request, int n, bool* done, size_t* sizes) override {
    *done = false;
    Request& r = *static_cast<Request*>(request);
    Comm& c = *r.comm;
    if (!r.used || n < 1 || n > r.n)
      return internalError("socket network: test of a request that is not posted");
    if (c.isSend)
      progressSend(c);
    else
      progressRecv(c);
    if (r.filled < r.n) return c.failure;
    *done = true;
    if (sizes != nullptr)
      for (int i = 0; i < n; ++i) sizes[i] = r.got[i];
    r.used = false;
    return Status::ok();
  }

  bool pollFds(void* comm, std::vector<pollfd>* fds) override {
    if (comm == nullptr) return true;
    const Comm& c = *static_cast<Comm*>(comm);
    if (!c.failure.isOk()) return true;
    const size_t n = c.nstreams();
    if (c.isSend) {
      for (size_t s = 0; s < n; ++s) {
        bool pending = false;
        for (const SendMsg& m : c.out) pending = pending || m.part[s].offset < m.part[s].total;
        if (pending) fds->push_back(pollfd{c.fd(s), POLLOUT, 0});
      }
      return true;
    }
    if (c.posted.empty()) return true;
    for (size_t s = 0; s < n; ++s)
      if (c.inMessage ? c.part[s].offset < c.part[s].total : s == 0)
        fds->push_back(pollfd{c.fd(s), POLLIN, 0});
    return true;
  }

  Status closeSend(void* sendComm) override {
    delete static_cast<Comm*>(sendComm);
    return Status::ok();
  }
  Status closeRecv(void* recvComm) override {
    delete static_cast<Comm*>(recvComm);
    return Status::ok();
  }
  Status closeListen(void* listenComm) override {
    delete static_cast<Listen*>(listenComm);
    return Status::ok();
  }

 private:
  // connect, and with recvComm also the receive comm of the connection (connectBoth).
  Status connectImpl(int dev, void* handle, void** sendComm, void** recvComm) {
    *sendComm = nullptr;
    CHORUS_TRY(checkDev(dev));
    Handle h;
    memcpy(&h, handle, sizeof h);
    if (h.magic != kHandleMagic || h.nstreams < 1 || h.nstreams > kMaxStreams)
      return invalidArgument("socket network: connect: the handle is not a socket listener's");
    if (h.connecting == nullptr) {
      h.connecting = new Connecting;
      Connecting& k = *h.connecting;
      k.streams.resize(static_cast<size_t>(h.nstreams));
      k.address = SocketAddress(reinterpret_cast<const sockaddr*>(&h.addr), h.addrLen);
      k.hello = Hello{kHelloMagic, h.nonce, 0, h.nstreams, recvComm != nullptr ? 1 : 0, 0};
      k.deadline = SteadyClock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(kConnectRetrySeconds * 1000));
      memcpy(handle, &h, sizeof h);
    }
    Connecting* k = h.connecting;
    Status s = advance(*k);
    bool done = s.isOk();
    for (const Connecting::Stream& st : k->streams) done = done && st.state == Connecting::kDone;
    if (!s.isOk() || done) {
      h.connecting = nullptr;
      memcpy(handle, &h, sizeof h);
    }
    if (!s.isOk()) {
      const std::string where = k->address.toString();
      delete k;
      return s.withContext("socket network: connecting to " + where);
    }
    if (done) {
      if ((k->hello.both != 0) != (recvComm != nullptr)) {
        delete k;
        return invalidUsage("socket network: connect and connectBoth on one handle");
      }
      auto streams = std::make_shared<std::vector<Socket>>();
      for (Connecting::Stream& st : k->streams) streams->push_back(std::move(st.socket));
      delete k;
      *sendComm = newComm(true, streams);
      if (recvComm != nullptr) *recvComm = newComm(false, streams);
    }
    return Status::ok();
  }

  static Comm* newComm(bool isSend, const std::shared_ptr<std::vector<Socket>>& streams) {
    auto c = std::make_unique<Comm>();
    c->isSend = isSend;
    c->streams = streams;
    if (!isSend) c->stage.reset(new char[kStageBytes]);
    return c.release();
  }

  // accept, and with sendComm also the send comm of the connection (acceptBoth).
  Status acceptImpl(void* listenComm, void** recvComm, void** sendComm) {
    *recvComm = nullptr;
    Listen& l = *static_cast<Listen*>(listenComm);
    while (true) {
      Result<Socket> s = l.listener.tryAccept(options_);
      if (!s.isOk()) return s.status().withContext("socket network");
      if (!s.value().valid()) break;
      l.pending.push_back(Listen::Pending{s.take(), Hello{}, 0});
    }
    for (size_t i = 0; i < l.pending.size();) {
      Listen::Pending& p = l.pending[i];
      const ssize_t r = recv(p.socket.fd(), reinterpret_cast<char*>(&p.hello) + p.got,
                             sizeof(Hello) - p.got, MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        ++i;
        continue;
      }
      if (r > 0) p.got += static_cast<size_t>(r);
      if (r > 0 && p.got < sizeof(Hello)) continue;
      const Hello& h = p.hello;
      const bool fits = r > 0 && h.magic == kHelloMagic && h.nonce == l.nonce &&
                        h.nstreams == l.nstreams && h.stream >= 0 && h.stream < l.nstreams &&
                        !l.streams[static_cast<size_t>(h.stream)].valid();
      if (fits) {
        l.streams[static_cast<size_t>(h.stream)] = std::move(p.socket);
        l.both = h.both;
      } else {
        LOG_WARN(kSubsysNet, "socket network: dropped a connection from %s on %s: %s",
                 p.socket.peer().toString().c_str(), l.listener.address().toString().c_str(),
                 r <= 0 ? "it closed before saying who it is" : "not one this listener expects");
      }
      l.pending.erase(l.pending.begin() + static_cast<std::ptrdiff_t>(i));
    }
    for (const Socket& s : l.streams)
      if (!s.valid()) return Status::ok();
    auto streams = std::make_shared<std::vector<Socket>>(std::move(l.streams));
    l.streams.clear();
    l.streams.resize(static_cast<size_t>(l.nstreams));
    if ((l.both != 0) != (sendComm != nullptr))
      return invalidUsage(
          "socket network: the connection accepted on %s carries %s, this end expected %s",
          l.listener.address().toString().c_str(), l.both ? "both directions" : "one",
          sendComm != nullptr ? "both" : "one");
    *recvComm = newComm(false, streams);
    if (sendComm != nullptr) *sendComm = newComm(true, streams);
    return Status::ok();
  }

  Status checkDev(int dev) const {
    if (dev < 0 || dev >= devices())
      return invalidArgument("socket network: device %d (it has %d)", dev, devices());
    return Status::ok();
  }

  static Request* freeRequest(Comm& c) {
    for (Request& r : c.reqs) {
      if (r.used) continue;
      r = Request{};
      r.comm = &c;
      r.used = true;
      return &r;
    }
    return nullptr;
  }

  // One step of every stream of a connect: start it, see it connected, send its hello.
  Status advance(Connecting& k) {
    const SteadyClock::time_point now = SteadyClock::now();
    for (size_t i = 0; i < k.streams.size(); ++i) {
      Connecting::Stream& st = k.streams[i];
      if (st.state == Connecting::kStart && now >= st.retryAt) {
        const int fd = ::socket(k.address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) return errnoError(errno, "socket");
        st.socket = Socket(fd, k.address);
        CHORUS_TRY(st.socket.applyOptions(options_));
        if (::connect(fd, k.address.sockaddrPtr(), k.address.length()) == 0)
          st.state = Connecting::kHello;
        else if (errno == EINPROGRESS)
          st.state = Connecting::kWait;
        else
          CHORUS_TRY(retryLater(k, st, errno, now));
      }
      if (st.state == Connecting::kWait) {
        pollfd p{st.socket.fd(), POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0) {
          // Unanswered (dropped SYNs, an address not routed here): given up with the retries.
          if (now >= k.deadline) return errnoError(ETIMEDOUT, "connect");
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(st.socket.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        if (err != 0) {
          CHORUS_TRY(retryLater(k, st, err, now));
          continue;
        }
        st.state = Connecting::kHello;
      }
      if (st.state == Connecting::kHello) {
        Hello h = k.hello;
        h.stream = static_cast<int32_t>(i);
        const ssize_t r = ::send(st.socket.fd(), reinterpret_cast<const char*>(&h) + st.helloSent,
                                 sizeof h - st.helloSent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return errnoError(errno, "sending the connection's hello");
        if (r > 0) st.helloSent += static_cast<size_t>(r);
        if (st.helloSent == sizeof h) st.state = Connecting::kDone;
      }
    }
    return Status::ok();
  }

  static Status retryLater(Connecting& k, Connecting::Stream& st, int err,
                           SteadyClock::time_point now) {
    if (!retryableConnectError(err) || now >= k.deadline) return errnoError(err, "connect");
    st.socket.close();
    st.state = Connecting::kStart;
    st.retryAt = now + std::chrono::milliseconds(10);
    return Status::ok();
  }

  static void fail(Comm& c, const Status& s) {
    if (c.failure.isOk()) c.failure = s;
  }

  // A send or recv that returned r < 0 (errno) or 0 (recv: closed): fails c unless it would
  // only block. Returns false when nothing moved.
  static bool ioFailed(Comm& c, ssize_t r, const char* what) {
    if (r == 0) {
      fail(c, remoteError("socket network: the peer closed the connection (%s)", what));
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    if (errno == EPIPE || errno == ECONNRESET)
      fail(c, remoteError("socket network: the peer closed the connection (%s: %s)", what,
                          strerror(errno)));
    else
      fail(c, errnoError(errno, std::string("socket network: ") + what));
    return false;
  }

  // Writes, stream by stream, the queued messages' parts in order (several in one sendmsg),
  // as far as the sockets take them; completes the messages sent whole.
  void progressSend(Comm& c) {
    if (!c.failure.isOk()) return;
    for (size_t s = 0; s < c.nstreams(); ++s) {
      while (true) {
        iovec iov[kIovMax];
        int n = 0;
        size_t want = 0;
        for (SendMsg& m : c.out) {
          Part& p = m.part[s];
          if (p.offset >= p.total) continue;
          if (n + 2 > kIovMax) break;
          if (p.offset < p.head) {
            iov[n++] = iovec{reinterpret_cast<char*>(&m.head) + p.offset, p.head - p.offset};
          }
          const size_t done = p.offset > p.head ? p.offset - p.head : 0;
          const size_t stripe = p.total - p.head;
          if (stripe > done)
            iov[n++] = iovec{const_cast<char*>(m.data + p.begin + done), stripe - done};
          want += p.total - p.offset;
        }
        if (n == 0) break;
        msghdr msg{};
        msg.msg_iov = iov;
        msg.msg_iovlen = static_cast<size_t>(n);
        const ssize_t r = sendmsg(c.fd(s), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r < 0) ioFailed(c, r, "send");
        if (r <= 0) break;
        size_t left = static_cast<size_t>(r);
        for (SendMsg& m : c.out) {
          Part& p = m.part[s];
          const size_t take = std::min(left, p.total - p.offset);
          p.offset += take;
          left -= take;
          if (left == 0) break;
        }
        if (static_cast<size_t>(r) < want) break;  // the socket is full
      }
      if (!c.failure.isOk()) return;
    }
    while (!c.out.empty()) {
      const SendMsg& m = c.out.front();
      for (size_t s = 0; s < c.nstreams(); ++s)
        if (m.part[s].offset < m.part[s].total) return;
      m.req->filled = 1;
      c.out.pop_front();
    }
  }

  // Stream 0's next bytes, through the stage (a part at least a stage long is read in place):
  // how many were moved into `to` (0: none now, or c failed).
  static size_t readStaged(Comm& c, char* to, size_t want) {
    if (c.stageBegin == c.stageEnd) {
      const int fd = c.fd(0);
      if (want >= kStageBytes) {
        const ssize_t r = recv(fd, to, want, MSG_DONTWAIT);
        return r > 0 ? static_cast<size_t>(r) : (ioFailed(c, r, "recv"), 0);
      }
      const ssize_t r = recv(fd, c.stage.get(), kStageBytes, MSG_DONTWAIT);
      if (r <= 0) return ioFailed(c, r, "recv"), 0;
      c.stageBegin = 0;
      c.stageEnd = static_cast<size_t>(r);
    }
    const size_t take = std::min(want, c.stageEnd - c.stageBegin);
    memcpy(to, c.stage.get() + c.stageBegin, take);
    c.stageBegin += take;
    return take;
  }

  static size_t readDirect(Comm& c, size_t s, char* to, size_t want) {
    const ssize_t r = recv(c.fd(s), to, want, MSG_DONTWAIT);
    return r > 0 ? static_cast<size_t>(r) : (ioFailed(c, r, "recv"), 0);
  }

  // Takes the next message's header, if a receive waits for it, and chooses its buffer.
  bool startMessage(Comm& c) {
    if (c.posted.empty()) return false;
    while (c.headGot < kHeadBytes) {
      const size_t got =
          readStaged(c, reinterpret_cast<char*>(&c.head) + c.headGot, kHeadBytes - c.headGot);
      if (got == 0) return false;
      c.headGot += got;
    }
    c.headGot = 0;
    if (c.head.magic != kWireMagic) {
      fail(c, internalError("socket network: a message without its header (the stream is out "
                            "of step)"));
      return false;
    }
    Request& r = *c.posted.front();
    int buf = -1;
    for (int i = 0; i < r.n && buf < 0; ++i)
      if (!r.has[i] && r.tag[i] == c.head.tag) buf = i;
    if (buf < 0) {
      fail(c, internalError("socket network: a message with tag %d where the receive posted "
                            "first takes tag%s %d%s",
                            c.head.tag, r.n > 1 ? "s" : "", r.tag[0], r.n > 1 ? ", ..." : ""));
      return false;
    }
    if (c.head.bytes > r.size[buf]) {
      fail(c, internalError("socket network: a message of %llu bytes for a receive of %zu",
                            static_cast<unsigned long long>(c.head.bytes), r.size[buf]));
      return false;
    }
    const int n = static_cast<int>(c.nstreams());
    for (int s = 0; s < n; ++s) {
      uint64_t b, e;
      stripeOf(c.head.bytes, n, s, &b, &e);
      Part& p = c.part[s];
      p = Part{};
      p.begin = b;
      p.head = s == 0 || e == b ? 0 : kHeadBytes;  // stream 0's header is read already
      p.total = p.head + (e - b);
    }
    c.dest = &r;
    c.destBuf = buf;
    c.inMessage = true;
    return true;
  }

  void progressRecv(Comm& c) {
    while (c.failure.isOk()) {
      if (!c.inMessage && !startMessage(c)) return;
      char* const to = c.dest->data[c.destBuf];
      bool complete = true;
      for (size_t s = 0; s < c.nstreams() && c.failure.isOk(); ++s) {
        Part& p = c.part[s];
        while (p.offset < p.total) {
          size_t got;
          if (p.offset < p.head) {
            got = readDirect(c, s, reinterpret_cast<char*>(&c.streamHead[s]) + p.offset,
                             p.head - p.offset);
          } else {
            char* at = to + p.begin + (p.offset - p.head);
            got = s == 0 ? readStaged(c, at, p.total - p.offset)
                         : readDirect(c, s, at, p.total - p.offset);
          }
          if (got == 0) break;
          const bool hadHead = p.offset >= p.head;
          p.offset += got;
          if (!hadHead && p.offset >= p.head &&
              (c.streamHead[s].magic != kWireMagic || c.streamHead[s].tag != c.head.tag ||
               c.streamHead[s].bytes != c.head.bytes)) {
            fail(c, internalError("socket network: the streams of one message disagree on its "
                                  "header"));
            return;
          }
        }
        complete = complete && p.offset == p.total;
      }
      if (!complete || !c.failure.isOk()) return;
      Request& r = *c.dest;
      r.got[c.destBuf] = c.head.bytes;
      r.has[c.destBuf] = true;
      c.inMessage = false;
      if (++r.filled == r.n) c.posted.pop_front();
    }
  }

  std::vector<InterfaceAddress> devices_;
  std::string library_ = "built in: TCP sockets";
  SocketOptions options_;
  int nstreams_ = 1;
};

}  // namespace

Result<std::unique_ptr<NetPlugin>> makeSocketNet() {
  Result<std::vector<InterfaceAddress>> found = findInterfaces();
  if (!found.isOk()) return found.status().withContext("socket network");
  std::vector<InterfaceAddress> devices = found.take();
  if (devices.empty()) return invalidUsage("socket network: no interface is up");
  std::string names;
  for (const InterfaceAddress& a : devices) names += (names.empty() ? "" : ", ") + a.name;
  // Channels listen on each device in turn: every one must reach every other host.
  LOG_INFO(kSubsysNet, "socket network: devices %s%s", names.c_str(),
           devices.size() > 1 ? " (each takes channels in turn; SOCKET_IFNAME leaves out those "
                                "that do not reach every host)"
                              : "");
  return std::unique_ptr<NetPlugin>(new SocketNet(std::move(devices)));
}

}  // namespace chorus
