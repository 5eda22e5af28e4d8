// Bootstrap over TCP: the rendezvous with the root, then lazily connected per-pair links that
// carry tagged messages. Every rank owns a listener; rank A's messages to rank B travel on the
// connection A opened to B's listener, so each direction has its own ordered stream.
#include "bootstrap/bootstrap.h"

#include <poll.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "common/log.h"
#include "common/socket.h"

namespace chorus {

namespace {

// How long an accepted peer connection may take to present its hello.
constexpr double kPeerHelloTimeoutSeconds = 2.0;
// A rank waits this much longer than the init timeout for the root's answer, so that the
// root (whose clock started no later than this rank's) gets to say who is missing.
constexpr double kRootReplyGraceSeconds = 5.0;
// Tags used by the collectives of the bootstrap itself; send/recv refuse them.
constexpr int kAllGatherTag = INT_MIN + 1;
constexpr int kBarrierTag = INT_MIN + 2;
// Unexpected messages are buffered; a header announcing more than this is taken as corrupt.
constexpr uint64_t kMaxMessageBytes = 1ull << 34;
constexpr int kPollSliceMs = 50;

class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(const UniqueIdInfo& id, int rank, int nranks, const BootstrapOptions& options,
                  Listener listener)
      : id_(id),
        rank_(rank),
        nranks_(nranks),
        options_(options),
        listener_(std::move(listener)),
        localAddress_(listener_.address().storage()),
        outbound_(static_cast<size_t>(nranks)),
        inbound_(static_cast<size_t>(nranks)) {
    for (int r = 0; r < nranks; ++r) inbound_[static_cast<size_t>(r)].peer = r;
  }

  Status rendezvous();

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  bool peerGone(int peer) const override {
    if (peer < 0 || peer >= nranks_) return false;
    for (const Socket* sock :
         {&inbound_[static_cast<size_t>(peer)].sock, &outbound_[static_cast<size_t>(peer)]}) {
      if (!sock->valid()) continue;
      pollfd p{sock->fd(), POLLRDHUP, 0};
      if (poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
    }
    return false;
  }
  const sockaddr_storage& localAddress() const override { return localAddress_; }

  Status allGather(void* data, size_t bytesPerRank) override;
  Status send(int peer, int tag, const void* data, size_t bytes) override;
  void setAbort(const AbortFlag* abort) override { options_.abort = abort; }
  Status recv(int peer, int tag, void* data, size_t bytes) override;
  Status barrier() override;

 private:
  struct SendOp {
    int peer;
    int tag;
    const void* data;
    size_t bytes;
  };
  struct RecvOp {
    int peer;
    int tag;
    void* data;
    size_t bytes;
  };
  // The incoming stream from one peer and the frame being read from it.
  struct Inbound {
    int peer = -1;
    Socket sock;
    unsigned char header[wire::kFrameHeaderBytes];
    size_t headerGot = 0;
    bool inPayload = false;
    bool toUser = false;  // the payload goes straight into the waiting recv's buffer
    bool corrupt = false;
    int tag = 0;
    uint64_t size = 0;
    uint64_t got = 0;
    std::vector<char> spill;
  };
  // An accepted connection that has not yet said which rank it comes from.
  struct PendingPeer {
    Socket sock;
    unsigned char buf[wire::kPeerHelloBytes];
    size_t got = 0;
    Clock::time_point expires;
  };

  Status exchange(const SendOp* send, const RecvOp* recv, const char* opName);
  Status connectTo(int peer, const Waiter& waiter);
  Status awaitInbound(int peer, const Waiter& waiter);
  void acceptPeers();
  bool progressPending(PendingPeer& p);
  Result<bool> progressRecv(Inbound& in, const RecvOp& op);
  bool takeQueued(const RecvOp& op, Status* status);
  Status checkPeer(int peer, int tag, const char* what) const;
  std::string sendWhat(const SendOp& op) const;
  std::string recvWhat(const RecvOp& op) const;

  UniqueIdInfo id_;
  int rank_;
  int nranks_;
  BootstrapOptions options_;
  Listener listener_;
  sockaddr_storage localAddress_;
  std::vector<SocketAddress> peers_;  // every rank's listener, from the root
  std::vector<Socket> outbound_;
  std::vector<Inbound> inbound_;
  std::vector<PendingPeer> pending_;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queued_;  // (peer, tag)
  Status broken_;  // set when a failure left a stream mid-message; later calls fail with it
};

Code codeFromWire(uint32_t v) {
  if (v >= static_cast<uint32_t>(Code::kUnhandledCudaError) &&
      v <= static_cast<uint32_t>(Code::kRemoteError))
    return static_cast<Code>(v);
  return Code::kInternalError;
}

std::string seconds(double s) {
  return formatString("%g s", s);
}

Status SocketBootstrap::rendezvous() {
  const SocketAddress root(id_.rootAddr);
  const std::string rootText = root.toString();
  const std::string me = formatString("bootstrap: rank %d of %d", rank_, nranks_);
  LOG_INFO(kSubsysBootstrap, "%s: listening at %s, joining the rendezvous at %s", me.c_str(),
           SocketAddress(localAddress_).toString().c_str(), rootText.c_str());

  Waiter connectWaiter(options_.initTimeoutSeconds, options_.abort);
  SocketOptions connectOptions;
  connectOptions.retryRefused = !options_.rootListening;
  Result<Socket> sock = connectSocket(root, connectWaiter, connectOptions);
  // A derived communicator's root listened before any rank came: if it cannot be reached now,
  // it is gone.
  auto rootGone = [&](const Status& why) {
    return remoteError(
        "%s: the rendezvous root at %s is gone (%s): the rank that made this communicator's id "
        "ended, or gave up before the others joined",
        me.c_str(), rootText.c_str(), why.message().c_str());
  };
  if (!sock.isOk() && options_.rootListening && !connectWaiter.aborted())
    return rootGone(sock.status());
  if (!sock.isOk())
    return Status(
        sock.status().code(),
        formatString("%s could not reach the rendezvous root at %s within %s: %s; check "
                     "that the process that created the unique id (or rank 0 with "
                     "CHORUS_COMM_ID) is running and that the address is reachable",
                     me.c_str(), rootText.c_str(), seconds(options_.initTimeoutSeconds).c_str(),
                     sock.status().message().c_str()));
  wire::RootHello hello;
  hello.secret = id_.secret;
  hello.idMagic = id_.magic;
  hello.rank = rank_;
  hello.nranks = nranks_;
  double ms = options_.initTimeoutSeconds * 1000.0;
  hello.initTimeoutMs = ms <= 0 ? 0 : ms >= UINT32_MAX ? UINT32_MAX : static_cast<uint32_t>(ms);
  hello.listenAddress = localAddress_;
  unsigned char helloBytes[wire::kRootHelloBytes];
  wire::putRootHello(helloBytes, hello);
  Status st = sock.value().sendAll(helloBytes, sizeof(helloBytes), connectWaiter);
  if (!st.isOk()) return st.withContext(me + ": hello to the rendezvous root at " + rootText);

  double replyTimeout =
      options_.initTimeoutSeconds > 0 ? options_.initTimeoutSeconds + kRootReplyGraceSeconds : 0;
  Waiter replyWaiter(replyTimeout, options_.abort);
  unsigned char header[wire::kRootReplyHeaderBytes];
  st = sock.value().recvAll(header, sizeof(header), replyWaiter);
  // A root that gave up closes what it has not answered (a connection still in its listener's
  // backlog): a failure before the deadline, not an abort, is the root gone, as when the connect
  // is refused.
  if (!st.isOk() && options_.rootListening && !replyWaiter.aborted() &&
      Clock::now() < replyWaiter.deadline())
    return rootGone(st);
  if (!st.isOk())
    return st.withContext(me + ": waiting for the other ranks at the rendezvous root " + rootText);
  wire::RootReply reply;
  if (!wire::getRootReply(header, nranks_, &reply))
    return internalError("%s: the rendezvous root at %s sent a malformed reply", me.c_str(),
                         rootText.c_str());
  const uint32_t code = reply.code;
  std::vector<unsigned char> payload(reply.length);
  st = sock.value().recvAll(payload.data(), reply.length, replyWaiter);
  if (!st.isOk()) return st.withContext(me + ": reading the reply of the rendezvous root");
  if (code != 0)
    return Status(codeFromWire(code),
                  me + ": " + std::string(payload.begin(), payload.end()) +
                      "; check that every rank calls init with the same unique id and nranks");
  for (int r = 0; r < nranks_; ++r) {
    sockaddr_storage addr;
    if (!wire::getAddress(&payload[static_cast<size_t>(r) * wire::kAddressBytes], &addr))
      return internalError("%s: the rendezvous root sent no valid address for rank %d", me.c_str(),
                           r);
    peers_.emplace_back(addr);
  }
  LOG_INFO(kSubsysBootstrap, "%s: rendezvous complete", me.c_str());
  return Status::ok();
}

std::string SocketBootstrap::sendWhat(const SendOp& op) const {
  return formatString("send to rank %d at %s (tag %d, %zu bytes)", op.peer,
                      peers_[static_cast<size_t>(op.peer)].toString().c_str(), op.tag, op.bytes);
}

std::string SocketBootstrap::recvWhat(const RecvOp& op) const {
  return formatString("recv from rank %d at %s (tag %d, %zu bytes)", op.peer,
                      peers_[static_cast<size_t>(op.peer)].toString().c_str(), op.tag, op.bytes);
}

Status SocketBootstrap::checkPeer(int peer, int tag, const char* what) const {
  if (peer < 0 || peer >= nranks_)
    return invalidArgument("bootstrap: rank %d: %s with peer %d, which is not in 0..%d", rank_,
                           what, peer, nranks_ - 1);
  if (tag == kAllGatherTag || tag == kBarrierTag)
    return invalidArgument("bootstrap: rank %d: %s with tag %d, which is reserved", rank_, what,
                           tag);
  return Status::ok();
}

Status SocketBootstrap::send(int peer, int tag, const void* data, size_t bytes) {
  CHORUS_TRY(checkPeer(peer, tag, "send"));
  if (data == nullptr && bytes > 0)
    return invalidArgument("bootstrap: rank %d: send of %zu bytes from a null buffer", rank_,
                           bytes);
  SendOp op{peer, tag, data, bytes};
  return exchange(&op, nullptr, nullptr);
}

Status SocketBootstrap::recv(int peer, int tag, void* data, size_t bytes) {
  CHORUS_TRY(checkPeer(peer, tag, "recv"));
  if (data == nullptr && bytes > 0)
    return invalidArgument("bootstrap: rank %d: recv of %zu bytes into a null buffer", rank_,
                           bytes);
  RecvOp op{peer, tag, data, bytes};
  return exchange(nullptr, &op, nullptr);
}

Status SocketBootstrap::allGather(void* data, size_t bytesPerRank) {
  if (data == nullptr && bytesPerRank > 0)
    return invalidArgument("bootstrap: rank %d: allGather into a null buffer", rank_);
  char* base = static_cast<char*>(data);
  const int next = (rank_ + 1) % nranks_;
  const int prev = (rank_ + nranks_ - 1) % nranks_;
  // Ring: in step s, pass on the block that arrived in step s-1 (our own first).
  for (int step = 0; step < nranks_ - 1; ++step) {
    size_t sendBlock = static_cast<size_t>((rank_ - step + nranks_) % nranks_);
    size_t recvBlock = static_cast<size_t>((rank_ - step - 1 + 2 * nranks_) % nranks_);
    SendOp s{next, kAllGatherTag, base + sendBlock * bytesPerRank, bytesPerRank};
    RecvOp r{prev, kAllGatherTag, base + recvBlock * bytesPerRank, bytesPerRank};
    CHORUS_TRY(exchange(&s, &r, "allGather"));
  }
  return Status::ok();
}

Status SocketBootstrap::barrier() {
  // Dissemination: after round k every rank has heard, indirectly, from 2^(k+1) ranks.
  for (int dist = 1; dist < nranks_; dist *= 2) {
    SendOp s{(rank_ + dist) % nranks_, kBarrierTag, nullptr, 0};
    RecvOp r{(rank_ - dist + nranks_) % nranks_, kBarrierTag, nullptr, 0};
    CHORUS_TRY(exchange(&s, &r, "barrier"));
  }
  return Status::ok();
}

bool SocketBootstrap::takeQueued(const RecvOp& op, Status* status) {
  auto it = queued_.find({op.peer, op.tag});
  if (it == queued_.end() || it->second.empty()) return false;
  std::vector<char> msg = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queued_.erase(it);
  if (msg.size() != op.bytes) {
    *status = invalidUsage("rank %d sent %zu bytes with tag %d but this rank expects %zu", op.peer,
                           msg.size(), op.tag, op.bytes);
    return true;
  }
  if (op.bytes > 0) memcpy(op.data, msg.data(), op.bytes);
  *status = Status::ok();
  return true;
}

Status SocketBootstrap::exchange(const SendOp* send, const RecvOp* recv, const char* opName) {
  const std::string me =
      formatString("bootstrap: rank %d%s%s", rank_, opName ? " " : "", opName ? opName : "");
  if (!broken_.isOk()) return broken_;
  if (options_.abort != nullptr && options_.abort->isRaised()) {
    std::string with;
    if (send != nullptr) with += formatString(" sending to rank %d", send->peer);
    if (recv != nullptr) with += formatString(" receiving from rank %d", recv->peer);
    return invalidUsage("%s: aborted%s", me.c_str(), with.c_str());
  }
  Waiter waiter(options_.timeoutSeconds, options_.abort);

  if (send != nullptr && send->peer == rank_) {
    const char* p = static_cast<const char*>(send->data);
    queued_[{rank_, send->tag}].emplace_back(p, p + send->bytes);
    send = nullptr;
  }
  if (recv != nullptr) {
    Status st;
    if (takeQueued(*recv, &st)) {
      if (!st.isOk()) return st.withContext(me + ": " + recvWhat(*recv));
      recv = nullptr;
    } else if (recv->peer == rank_) {
      return invalidUsage("%s: recv from itself with tag %d but no such message was sent",
                          me.c_str(), recv->tag);
    }
  }
  if (send != nullptr) {
    Status st = connectTo(send->peer, waiter);
    if (!st.isOk()) return st.withContext(me + ": " + sendWhat(*send));
  }
  if (recv != nullptr) {
    Status st = awaitInbound(recv->peer, waiter);
    if (!st.isOk()) return st.withContext(me + ": " + recvWhat(*recv));
  }

  unsigned char header[wire::kFrameHeaderBytes];
  size_t total = 0;
  size_t sent = 0;
  if (send != nullptr) {
    wire::putU32(header, wire::kFrameMarker);
    wire::putU32(header + 4, static_cast<uint32_t>(send->tag));
    wire::putU64(header + 8, send->bytes);
    total = sizeof(header) + send->bytes;
  }
  Inbound* in = recv != nullptr ? &inbound_[static_cast<size_t>(recv->peer)] : nullptr;
  Socket* out = send != nullptr ? &outbound_[static_cast<size_t>(send->peer)] : nullptr;
  bool sendDone = send == nullptr;
  bool recvDone = recv == nullptr;

  // Marks the object unusable when the failure left a stream in the middle of a message.
  auto fail = [&](const Status& st, bool sendSide) {
    Status result = st.withContext(me + ": " + (sendSide ? sendWhat(*send) : recvWhat(*recv)));
    if ((send != nullptr && sent > 0 && sent < total) ||
        (in != nullptr && (in->corrupt || (in->inPayload && in->toUser))))
      broken_ = Status(result.code(), "unusable after an earlier failure: " + result.message());
    return result;
  };

  while (true) {
    while (!sendDone) {
      const char* p;
      size_t len;
      if (sent < sizeof(header)) {
        p = reinterpret_cast<const char*>(header) + sent;
        len = sizeof(header) - sent;
      } else {
        p = static_cast<const char*>(send->data) + (sent - sizeof(header));
        len = total - sent;
      }
      Result<size_t> k = out->sendSome(p, len);
      if (!k.isOk()) return fail(k.status(), true);
      sent += k.value();
      if (sent == total) sendDone = true;
      if (k.value() == 0) break;
    }
    if (!recvDone) {
      Result<bool> k = progressRecv(*in, *recv);
      if (!k.isOk()) return fail(k.status(), false);
      recvDone = k.value();
    }
    if (sendDone && recvDone) return Status::ok();

    pollfd fds[2];
    nfds_t n = 0;
    if (!sendDone) fds[n++] = {out->fd(), POLLOUT, 0};
    if (!recvDone) fds[n++] = {in->sock.fd(), POLLIN, 0};
    if (waiter.aborted()) return fail(invalidUsage("aborted"), !sendDone);
    int ms = waiter.remainingMs(kPollSliceMs);
    if (ms == 0 && waiter.deadline() != Clock::time_point::max())
      return fail(remoteError("timed out after %s (CHORUS_TIMEOUT)",
                              seconds(options_.timeoutSeconds).c_str()),
                  !sendDone);
    if (poll(fds, n, ms) < 0 && errno != EINTR) return fail(errnoError(errno, "poll"), !sendDone);
  }
}

Result<bool> SocketBootstrap::progressRecv(Inbound& in, const RecvOp& op) {
  while (true) {
    if (!in.inPayload) {
      Result<size_t> k =
          in.sock.recvSome(in.header + in.headerGot, sizeof(in.header) - in.headerGot);
      if (!k.isOk()) return k.status();
      if (k.value() == 0) return false;
      in.headerGot += k.value();
      if (in.headerGot < sizeof(in.header)) continue;
      in.headerGot = 0;
      wire::FrameHeader frame;
      const bool valid = wire::getFrameHeader(in.header, kMaxMessageBytes, &frame);
      in.tag = frame.tag;
      in.size = frame.size;
      if (!valid) {
        in.corrupt = true;
        return internalError("corrupt message header from rank %d", in.peer);
      }
      in.inPayload = true;
      in.got = 0;
      in.toUser = in.tag == op.tag;
      if (in.toUser && in.size != op.bytes) {
        in.corrupt = true;
        return invalidUsage("rank %d sent %llu bytes with tag %d but this rank expects %zu",
                            in.peer, static_cast<unsigned long long>(in.size), in.tag, op.bytes);
      }
      if (!in.toUser) in.spill.assign(in.size, 0);
    }
    char* dest = in.toUser ? static_cast<char*>(op.data) : in.spill.data();
    if (in.got < in.size) {
      Result<size_t> k = in.sock.recvSome(dest + in.got, in.size - in.got);
      if (!k.isOk()) return k.status();
      if (k.value() == 0) return false;
      in.got += k.value();
    }
    if (in.got < in.size) continue;
    in.inPayload = false;
    if (in.toUser) return true;
    queued_[{in.peer, in.tag}].push_back(std::move(in.spill));
    in.spill = std::vector<char>();
    // A frame spilled during an earlier, failed recv may be the one this recv wants.
    Status st;
    if (in.tag == op.tag && takeQueued(op, &st)) {
      if (!st.isOk()) return st;
      return true;
    }
  }
}

Status SocketBootstrap::connectTo(int peer, const Waiter& waiter) {
  Socket& out = outbound_[static_cast<size_t>(peer)];
  if (out.valid()) return Status::ok();
  Result<Socket> sock = connectSocket(peers_[static_cast<size_t>(peer)], waiter);
  if (!sock.isOk()) return sock.status();
  unsigned char hello[wire::kPeerHelloBytes];
  wire::putU32(hello, wire::kPeerHelloMarker);
  wire::putU32(hello + 4, wire::kProtocolVersion);
  wire::putU64(hello + 8, id_.secret);
  wire::putU64(hello + 16, id_.magic);
  wire::putU32(hello + 24, static_cast<uint32_t>(rank_));
  wire::putU32(hello + 28, static_cast<uint32_t>(nranks_));
  CHORUS_TRY(sock.value().sendAll(hello, sizeof(hello), waiter));
  out = sock.take();
  LOG_TRACE(kSubsysBootstrap, "bootstrap: rank %d connected to rank %d", rank_, peer);
  return Status::ok();
}

void SocketBootstrap::acceptPeers() {
  while (true) {
    Result<Socket> s = listener_.tryAccept();
    if (!s.isOk()) {
      LOG_WARN(kSubsysBootstrap, "bootstrap: rank %d: %s", rank_, s.status().message().c_str());
      return;
    }
    if (!s.value().valid()) return;
    PendingPeer p;
    p.sock = s.take();
    p.expires = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(kPeerHelloTimeoutSeconds));
    pending_.push_back(std::move(p));
  }
}

bool SocketBootstrap::progressPending(PendingPeer& p) {
  const std::string from = p.sock.peer().toString();
  Result<size_t> k = p.sock.recvSome(p.buf + p.got, sizeof(p.buf) - p.got);
  if (!k.isOk()) {
    LOG_WARN(kSubsysBootstrap, "bootstrap: rank %d: dropped connection from %s: %s", rank_,
             from.c_str(), k.status().message().c_str());
    return true;
  }
  p.got += k.value();
  if (p.got < sizeof(p.buf)) {
    if (Clock::now() < p.expires) return false;
    LOG_WARN(kSubsysBootstrap, "bootstrap: rank %d: dropped connection from %s: no hello within %s",
             rank_, from.c_str(), seconds(kPeerHelloTimeoutSeconds).c_str());
    return true;
  }
  wire::PeerHello hello;
  const bool isHello = wire::getPeerHello(p.buf, &hello);
  const int peer = hello.rank;
  const char* why = nullptr;
  if (!isHello)
    why = "not a Chorus bootstrap hello";
  else if (hello.secret != id_.secret || hello.idMagic != id_.magic)
    why = "wrong secret or another communicator";
  else if (hello.nranks != nranks_ || peer < 0 || peer >= nranks_ || peer == rank_)
    why = "impossible sender rank";
  else if (inbound_[static_cast<size_t>(peer)].sock.valid())
    why = "a second connection claiming the same rank";
  if (why != nullptr) {
    LOG_WARN(kSubsysBootstrap, "bootstrap: rank %d: dropped connection from %s: %s", rank_,
             from.c_str(), why);
    return true;
  }
  inbound_[static_cast<size_t>(peer)].sock = std::move(p.sock);
  LOG_TRACE(kSubsysBootstrap, "bootstrap: rank %d accepted rank %d from %s", rank_, peer,
            from.c_str());
  return true;
}

Status SocketBootstrap::awaitInbound(int peer, const Waiter& waiter) {
  const Inbound& in = inbound_[static_cast<size_t>(peer)];
  while (true) {
    acceptPeers();
    for (size_t i = 0; i < pending_.size();) {
      if (progressPending(pending_[i]))
        pending_.erase(pending_.begin() + static_cast<long>(i));
      else
        ++i;
    }
    if (in.sock.valid()) return Status::ok();
    if (waiter.aborted()) return invalidUsage("aborted while rank %d had not connected", peer);
    int ms = waiter.remainingMs(kPollSliceMs);
    if (ms == 0 && waiter.deadline() != Clock::time_point::max())
      return remoteError("rank %d did not connect within %s (CHORUS_TIMEOUT)", peer,
                         seconds(options_.timeoutSeconds).c_str());
    std::vector<pollfd> fds;
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (const PendingPeer& p : pending_) fds.push_back({p.sock.fd(), POLLIN, 0});
    if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) return errnoError(errno, "poll");
  }
}

}  // namespace

Result<std::unique_ptr<Bootstrap>> Bootstrap::init(const UniqueIdInfo& id, int rank, int nranks,
                                                   const BootstrapOptions& options) {
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalidArgument(
        "bootstrap: rank %d of nranks %d is out of range (need 0 <= rank < nranks)", rank, nranks);
  const SocketAddress root(id.rootAddr);
  if (root.empty() || root.port() == 0)
    return invalidArgument("bootstrap: rank %d: the unique id holds no root address", rank);

  // With CHORUS_COMM_ID, nobody ran ncclGetUniqueId: rank 0 hosts the root at that address.
  if (rank == 0 && commIdFromEnvironment()) {
    Result<UniqueIdInfo> envId = uniqueIdFromEnvironment();
    if (envId.isOk() && SocketAddress(envId.value().rootAddr) == root &&
        envId.value().magic == id.magic) {
      Result<Listener> rootListener = Listener::open(root);
      if (!rootListener.isOk())
        return rootListener.status().withContext(
            "bootstrap: rank 0 cannot host the rendezvous at CHORUS_COMM_ID/NCCL_COMM_ID " +
            root.toString() + " (the address must belong to rank 0's host and be free)");
      CHORUS_TRY(startRendezvousRoot(rootListener.take(), id));
    }
  }

  // Every rank that reaches a root on loopback runs on this host, so peers meet on loopback
  // too, whatever SOCKET_IFNAME says.
  SocketAddress bindAddress = SocketAddress::loopback(root.family(), 0);
  std::string ifaceName = "loopback";
  if (!root.isLoopback()) {
    Result<InterfaceAddress> iface =
        findInterfaceReaching(id.rootAddr, options.preferredInterfaces);
    if (!iface.isOk())
      return iface.status().withContext(
          formatString("bootstrap: rank %d: choosing an interface", rank));
    bindAddress = SocketAddress(iface.value().addr);
    bindAddress.setPort(0);
    ifaceName = iface.value().name;
  }
  Result<Listener> listener = Listener::open(bindAddress);
  if (!listener.isOk())
    return listener.status().withContext(formatString(
        "bootstrap: rank %d: opening the peer listener on %s", rank, ifaceName.c_str()));

  auto bootstrap = std::make_unique<SocketBootstrap>(id, rank, nranks, options, listener.take());
  CHORUS_TRY(bootstrap->rendezvous());
  return std::unique_ptr<Bootstrap>(std::move(bootstrap));
}

}  // namespace chorus
