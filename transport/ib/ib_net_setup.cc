// The IB network's connection setup: a listener per device, and connect and accept stepped
// without blocking over a TCP socket that carries each side's queue pairs (ConnInfo) and a
// last byte that says both are ready.
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "transport/ib/ib_net_internal.h"

namespace chorus {
namespace ibnet {

namespace {

// Moves s->out (or into s->in) as far as the socket takes it; true when all kConnInfoBytes
// (or `bytes`) moved.
Result<bool> moveSome(Socket& sock, Setup* s, bool send, size_t bytes) {
  while (s->moved < bytes) {
    Result<size_t> n = send ? sock.sendSome(s->out + s->moved, bytes - s->moved)
                            : sock.recvSome(s->in + s->moved, bytes - s->moved);
    if (!n.isOk()) return n.status();
    if (n.value() == 0) return false;
    s->moved += n.value();
  }
  s->moved = 0;
  return true;
}

// A non-blocking connect of c's setup socket to peer.
Status startConnect(Comm* c, const SocketAddress& peer) {
  int fd = socket(peer.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError(errno, "IB: socket for connection setup");
  c->sock = Socket(fd, peer);
  if (::connect(fd, peer.sockaddrPtr(), peer.length()) != 0 && errno != EINPROGRESS)
    return errnoError(errno, "IB: connecting to " + peer.toString());
  return Status::ok();
}

}  // namespace

Status IbNet::listen(int dev, void* handle, void** listenComm) {
  CHORUS_TRY(checkDev(dev));
  {
    std::lock_guard<std::mutex> lock(addrMutex_);
    if (!haveAddr_) {
      Result<std::vector<InterfaceAddress>> ifs = findInterfaces();
      if (!ifs.isOk()) return ifs.status().withContext("IB: the interface for connection setup");
      addr_ = SocketAddress(ifs.value().front().addr);
      haveAddr_ = true;
    }
  }
  Result<Listener> l = Listener::open(addr_);
  if (!l.isOk()) return l.status().withContext("IB: listening for connection setup");
  auto* lc = new ListenComm;
  lc->dev = dev;
  lc->listener = l.take();
  Handle h;
  memset(&h, 0, sizeof h);
  h.magic = kHandleMagic;
  const SocketAddress& a = lc->listener.address();
  h.addrLen = static_cast<uint32_t>(a.length());
  memcpy(&h.addr, a.sockaddrPtr(), std::min<size_t>(sizeof h.addr, a.length()));
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h);
  *listenComm = lc;
  return Status::ok();
}

Status IbNet::connect(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  CHORUS_TRY(checkDev(dev));
  Handle h;
  memcpy(&h, handle, sizeof h);
  if (h.magic != kHandleMagic)
    return invalidArgument("IB: connect with a handle that is not an IB listener's");
  Status s = stepConnect(dev, &h, sendComm);
  if (!s.isOk() && h.setup != nullptr) {
    destroy(h.setup->comm);
    delete h.setup;
    h.setup = nullptr;
  }
  memcpy(handle, &h, sizeof h);
  return s;
}

// dev is this host's device: the listener's index means nothing here.
Status IbNet::stepConnect(int dev, Handle* h, void** sendComm) {
  const SocketAddress peer(reinterpret_cast<const sockaddr*>(&h->addr), h->addrLen);
  if (h->setup == nullptr) {
    h->setup = new Setup;
    h->setup->started = SteadyClock::now();
    Result<Comm*> c = createComm(true, dev, options_.qpsPerConnection);
    if (!c.isOk()) return c.status();
    h->setup->comm = c.value();
    CHORUS_TRY(startConnect(h->setup->comm, peer));
  }
  Setup* s = h->setup;
  Comm* c = s->comm;
  if (s->stage == Setup::kConnecting) {
    pollfd pfd{c->sock.fd(), POLLOUT, 0};
    if (::poll(&pfd, 1, 0) <= 0) return Status::ok();
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    // A listener whose backlog overflowed refuses or drops: try again for up to 30 s.
    const bool retry = err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET;
    if (retry && SteadyClock::now() - s->started < std::chrono::seconds(30))
      return startConnect(c, peer);
    if (err != 0) return errnoError(err, "IB: connecting to " + c->sock.peer().toString());
    ConnInfo mine;
    fillInfo(c, &mine);
    ib::encodeConnInfo(mine, s->out);
    s->stage = Setup::kSendInfo;
  }
  if (s->stage == Setup::kSendInfo) {
    Result<bool> done = moveSome(c->sock, s, true, kConnInfoBytes);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    s->stage = Setup::kRecvInfo;
  }
  if (s->stage == Setup::kRecvInfo) {
    Result<bool> done = moveSome(c->sock, s, false, kConnInfoBytes);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    Result<ConnInfo> remote = ib::decodeConnInfo(s->in);
    if (!remote.isOk()) return remote.status();
    if (remote.value().nqps != static_cast<uint32_t>(c->nqps))
      return remoteError("IB: the receiver made %u queue pairs for %d", remote.value().nqps,
                         c->nqps);
    CHORUS_TRY(toRts(c, remote.value()));
    s->out[0] = 1;
    s->stage = Setup::kReady;
  }
  if (s->stage == Setup::kReady) {
    Result<bool> done = moveSome(c->sock, s, true, 1);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    *sendComm = c;
    delete s;
    h->setup = nullptr;
  }
  return Status::ok();
}

Status IbNet::accept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  auto* l = static_cast<ListenComm*>(listenComm);
  Status s = stepAccept(l, recvComm);
  if (!s.isOk() && l->setup != nullptr) {
    destroy(l->setup->comm);
    delete l->setup;
    l->setup = nullptr;
  }
  return s;
}

Status IbNet::stepAccept(ListenComm* l, void** recvComm) {
  if (l->setup == nullptr) {
    Result<Socket> sock = l->listener.tryAccept();
    if (!sock.isOk()) return sock.status().withContext("IB: connection setup");
    if (!sock.value().valid()) return Status::ok();
    l->setup = new Setup;
    l->setup->stage = Setup::kRecvInfo;
    l->setup->comm = new Comm;  // a placeholder holding the socket until the queue pairs exist
    l->setup->comm->sock = sock.take();
  }
  Setup* s = l->setup;
  if (s->stage == Setup::kRecvInfo) {
    Result<bool> done = moveSome(s->comm->sock, s, false, kConnInfoBytes);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    Result<ConnInfo> remote = ib::decodeConnInfo(s->in);
    if (!remote.isOk()) return remote.status();
    Socket sock = std::move(s->comm->sock);
    delete s->comm;
    s->comm = nullptr;
    Result<Comm*> c = createComm(false, l->dev, static_cast<int>(remote.value().nqps));
    if (!c.isOk()) return c.status();
    s->comm = c.value();
    s->comm->sock = std::move(sock);
    CHORUS_TRY(toRts(s->comm, remote.value()));
    ConnInfo mine;
    fillInfo(s->comm, &mine);
    ib::encodeConnInfo(mine, s->out);
    s->stage = Setup::kSendInfo;
  }
  if (s->stage == Setup::kSendInfo) {
    Result<bool> done = moveSome(s->comm->sock, s, true, kConnInfoBytes);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    s->stage = Setup::kReady;
  }
  if (s->stage == Setup::kReady) {
    Result<bool> done = moveSome(s->comm->sock, s, false, 1);
    if (!done.isOk()) return done.status().withContext("IB: connection setup");
    if (!done.value()) return Status::ok();
    *recvComm = s->comm;
    delete s;
    l->setup = nullptr;
  }
  return Status::ok();
}

}  // namespace ibnet
}  // namespace chorus
