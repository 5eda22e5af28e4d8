#include "transport/ib/ib_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "common/socket.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_logic.h"
#include "transport/net_plugin/net_abi.h"

namespace chorus {

namespace {

using ib::ConnInfo;
using ib::FifoEntry;
using ib::kConnInfoBytes;
using ib::kMaxQps;
using ib::kMaxRecvs;
using ib::kMaxRequests;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kHandleMagic = 0x49424c48;  // "IBLH"

// Kinds of work request, in the top bits of wr_id; the request's slot below.
enum : uint64_t { kWrSend = 1, kWrRecv = 2, kWrFifo = 3 };
uint64_t wrId(uint64_t kind, int slot) {
  return kind << 32 | static_cast<uint64_t>(slot);
}

// One HCA, opened once; its protection domain and registrations serve all its ports.
struct Hca {
  std::string name;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::mutex mrMutex;
  ib::MrCache mrs;
};

// One device of the network: an HCA port.
struct Port {
  Hca* hca = nullptr;
  ib::LocalPort local;
  uint8_t gid[16] = {};
  double gbps = 0;
  std::string label;    // "mlx5_0:1"
  std::string pciPath;  // the HCA's PCI directory in /sys ("" when /sys does not show it)
};

struct Comm;
struct Request {
  Comm* comm = nullptr;
  bool used = false;
  int pending = 0;  // completions still to come
  int n = 1;        // a receive's buffers
  size_t sizes[kMaxRecvs] = {};
};
// A slot of the FIFO: a receive's entries, one per buffer.
constexpr size_t kFifoBytes = sizeof(FifoEntry) * kMaxRecvs * kMaxRequests;

struct Comm {
  bool isSend = false;
  Port* port = nullptr;
  Socket sock;
  ibv_cq* cq = nullptr;
  ibv_qp* qps[kMaxQps] = {};
  int nqps = 0;
  uint32_t psn = 0;
  FifoEntry* fifo = nullptr;  // send: entries the receiver writes; receive: what it writes from
  ibv_mr* fifoMr = nullptr;
  uint64_t remoteFifo = 0;  // receive: the sender's FIFO
  uint32_t remoteFifoKey = 0;
  uint64_t seq = 0;  // requests posted
  // Send: FIFO slots taken whole, and which entries of the next one are written.
  uint64_t fifoSeq = 0;
  uint32_t sentMask = 0;
  Request reqs[kMaxRequests];
  bool failed = false;
  std::string error;
  SteadyClock::time_point lastPeek{};
};

// The connection's failure, if it failed.
Status connStatus(const Comm* c) {
  return c->failed ? remoteError("%s", c->error.c_str()) : Status::ok();
}

// Connection setup, stepped by repeated connect/accept calls.
struct Setup {
  enum Stage { kConnecting, kSendInfo, kRecvInfo, kReady } stage = kConnecting;
  Comm* comm = nullptr;
  SteadyClock::time_point started{};
  uint8_t out[kConnInfoBytes] = {};
  uint8_t in[kConnInfoBytes] = {};
  size_t moved = 0;
};

struct Handle {
  uint32_t magic;
  sockaddr_in6 addr;  // or a sockaddr_in
  uint32_t addrLen;
  Setup* setup;  // connect's progress
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "the handle fits NCCL's");

struct ListenComm {
  int dev = 0;
  Listener listener;
  Setup* setup = nullptr;  // the accept in progress
};

class IbNet final : public NetPlugin {
 public:
  IbNet(const VerbsApi* v, ib::Options options) : v_(v), options_(options) {}
  ~IbNet() override {
    for (auto& h : hcas_) {
      if (h->pd != nullptr) v_->deallocPd(h->pd);
      v_->closeDevice(h->ctx);
    }
  }

  Status discover();

  const char* name() const override { return "IB"; }
  int version() const override { return 10; }
  const std::string& library() const override { return v_->library; }
  int devices() const override { return static_cast<int>(ports_.size()); }

  Status properties(int dev, Properties* out) override {
    CHORUS_TRY(checkDev(dev));
    out->name = ports_[dev]->label;
    out->speedMbps = static_cast<int>(ports_[dev]->gbps * 1000);
    out->maxRecvs = kMaxRecvs;
    out->ptrSupport = NCCL_PTR_HOST;
    out->maxMessageBytes = size_t(1) << 30;
    out->pciPath = ports_[dev]->pciPath;
    return Status::ok();
  }

  Status listen(int dev, void* handle, void** listenComm) override;
  Status connect(int dev, void* handle, void** sendComm) override;
  Status accept(void* listenComm, void** recvComm) override;
  Status regMr(void* comm, void* data, size_t size, void** mhandle) override;
  Status deregMr(void* comm, void* mhandle) override;
  Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override;
  Status irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    return irecvGroup(recvComm, 1, &data, &size, &tag, &mhandle, request);
  }
  Status irecvGroup(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                    void** mhandles, void** request) override;
  Status test(void* request, bool* done, size_t* size) override {
    return testGroup(request, 1, done, size);
  }
  Status testGroup(void* request, int n, bool* done, size_t* sizes) override;
  Status closeSend(void* c) override {
    destroy(static_cast<Comm*>(c));
    return Status::ok();
  }
  Status closeRecv(void* c) override {
    destroy(static_cast<Comm*>(c));
    return Status::ok();
  }
  Status closeListen(void* c) override {
    auto* l = static_cast<ListenComm*>(c);
    if (l->setup != nullptr) {
      destroy(l->setup->comm);
      delete l->setup;
    }
    delete l;
    return Status::ok();
  }

 private:
  Status checkDev(int dev) const {
    if (dev < 0 || dev >= devices())
      return invalidArgument("IB: device %d does not exist (%d devices)", dev, devices());
    return Status::ok();
  }
  Result<Comm*> createComm(bool isSend, int dev, int nqps);
  Status toRts(Comm* c, const ConnInfo& remote);
  void fillInfo(const Comm* c, ConnInfo* info) const;
  Status stepConnect(int dev, Handle* h, void** sendComm);
  Status stepAccept(ListenComm* l, void** recvComm);
  void poll(Comm* c);
  Status failure(Comm* c, const std::string& why);
  Status peekPeer(Comm* c);
  Result<Request*> freeRequest(Comm* c);
  void destroy(Comm* c);

  const VerbsApi* v_;
  ib::Options options_;
  std::vector<std::unique_ptr<Hca>> hcas_;
  std::vector<std::unique_ptr<Port>> ports_;
  std::mutex addrMutex_;
  bool haveAddr_ = false;
  SocketAddress addr_;  // where listeners bind (the first interface SOCKET_IFNAME allows)
};

Status IbNet::discover() {
  Result<std::vector<IbPortChoice>> found = discoverIbPorts(v_);
  if (!found.isOk()) return found.status();
  for (const IbPortChoice& f : found.value()) {
    Hca* hca = nullptr;
    for (auto& h : hcas_)
      if (h->ctx == f.ctx) hca = h.get();
    if (hca == nullptr) {
      hcas_.push_back(std::make_unique<Hca>());
      hca = hcas_.back().get();
      hca->name = f.device;
      hca->ctx = f.ctx;
      hca->pd = v_->allocPd(hca->ctx);
      if (hca->pd == nullptr) return errnoError(errno, "IB: ibv_alloc_pd on " + f.device);
    }
    auto p = std::make_unique<Port>();
    p->hca = hca;
    p->local = f.local;
    memcpy(p->gid, f.gid, 16);
    p->gbps = f.gbps;
    p->label = f.device + ":" + std::to_string(f.local.port);
    char resolved[PATH_MAX];
    const std::string link = "/sys/class/infiniband/" + f.device + "/device";
    if (realpath(link.c_str(), resolved) != nullptr) p->pciPath = resolved;
    ports_.push_back(std::move(p));
  }
  return Status::ok();
}

Result<Comm*> IbNet::createComm(bool isSend, int dev, int nqps) {
  std::unique_ptr<Comm> c(new Comm);
  c->isSend = isSend;
  c->port = ports_[dev].get();
  c->nqps = nqps;
  for (Request& r : c->reqs) r.comm = c.get();
  c->psn = std::random_device{}() & 0xffffff;
  Hca* hca = c->port->hca;
  Comm* raw = c.release();
  auto fail = [&](const std::string& what) {
    Status s = errnoError(errno != 0 ? errno : EIO, "IB: " + what + " on " + raw->port->label);
    destroy(raw);
    return s;
  };
  errno = 0;
  raw->cq = v_->createCq(hca->ctx, kMaxRequests * (kMaxRecvs * nqps + 1) + 8, nullptr, nullptr, 0);
  if (raw->cq == nullptr) return fail("ibv_create_cq");
  for (int q = 0; q < nqps; ++q) {
    ibv_qp_init_attr init;
    memset(&init, 0, sizeof init);
    init.send_cq = raw->cq;
    init.recv_cq = raw->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 2 * kMaxRequests + 2;
    init.cap.max_recv_wr = kMaxRequests * kMaxRecvs;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    raw->qps[q] = v_->createQp(hca->pd, &init);
    if (raw->qps[q] == nullptr) return fail("ibv_create_qp");
    ibv_qp_attr attr;
    int mask = 0;
    ib::initTransition(raw->port->local, &attr, &mask);
    if (v_->modifyQp(raw->qps[q], &attr, mask) != 0) return fail("moving a queue pair to INIT");
  }
  raw->fifo = static_cast<FifoEntry*>(aligned_alloc(4096, kFifoBytes));
  if (raw->fifo == nullptr) return fail("allocating the FIFO");
  memset(raw->fifo, 0, kFifoBytes);
  const int access = isSend ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
  raw->fifoMr = v_->regMr(hca->pd, raw->fifo, kFifoBytes, access);
  if (raw->fifoMr == nullptr) return fail("ibv_reg_mr of the FIFO");
  return raw;
}

void IbNet::fillInfo(const Comm* c, ConnInfo* info) const {
  info->nqps = static_cast<uint32_t>(c->nqps);
  info->lid = c->port->local.lid;
  info->linkLayer = c->port->local.roce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  info->mtu = static_cast<uint8_t>(c->port->local.mtu);
  memcpy(info->gid, c->port->gid, 16);
  for (int q = 0; q < c->nqps; ++q) info->qpn[q] = c->qps[q]->qp_num;
  info->psn = c->psn;
  if (c->isSend) {
    info->fifoAddr = reinterpret_cast<uintptr_t>(c->fifo);
    info->fifoRkey = c->fifoMr->rkey;
  }
}

Status IbNet::toRts(Comm* c, const ConnInfo& remote) {
  const bool remoteRoce = remote.linkLayer == IBV_LINK_LAYER_ETHERNET;
  if (remoteRoce != c->port->local.roce)
    return remoteError("IB: %s is %s, the peer's port %s", c->port->label.c_str(),
                       c->port->local.roce ? "RoCE" : "InfiniBand",
                       remoteRoce ? "RoCE" : "InfiniBand");
  for (int q = 0; q < c->nqps; ++q) {
    ibv_qp_attr attr;
    int mask = 0;
    ib::rtrTransition(c->port->local, remote, q, options_, &attr, &mask);
    if (v_->modifyQp(c->qps[q], &attr, mask) != 0)
      return errnoError(errno != 0 ? errno : EINVAL,
                        "IB: moving a queue pair of " + c->port->label + " to RTR");
    ib::rtsTransition(c->psn, options_, &attr, &mask);
    if (v_->modifyQp(c->qps[q], &attr, mask) != 0)
      return errnoError(errno != 0 ? errno : EINVAL,
                        "IB: moving a queue pair of " + c->port->label + " to RTS");
  }
  if (!c->isSend) {
    c->remoteFifo = remote.fifoAddr;
    c->remoteFifoKey = remote.fifoRkey;
  }
  return Status::ok();
}

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

// A non-blocking connect of c's setup socket to peer.
Status startConnect(Comm* c, const SocketAddress& peer) {
  int fd = socket(peer.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError(errno, "IB: socket for connection setup");
  c->sock = Socket(fd, peer);
  if (::connect(fd, peer.sockaddrPtr(), peer.length()) != 0 && errno != EINPROGRESS)
    return errnoError(errno, "IB: connecting to " + peer.toString());
  return Status::ok();
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

Status IbNet::regMr(void* comm, void* data, size_t size, void** mhandle) {
  Hca* hca = static_cast<Comm*>(comm)->port->hca;
  std::lock_guard<std::mutex> lock(hca->mrMutex);
  Result<ib::MrCache::Entry*> e =
      hca->mrs.acquire(data, size, [&](void* begin, size_t bytes) -> Result<void*> {
        errno = 0;
        ibv_mr* mr =
            v_->regMr(hca->pd, begin, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        if (mr == nullptr)
          return errnoError(
              errno != 0 ? errno : ENOMEM,
              formatString("IB: ibv_reg_mr of %zu bytes on %s", bytes, hca->name.c_str()));
        return static_cast<void*>(mr);
      });
  if (!e.isOk()) return e.status();
  *mhandle = e.value();
  return Status::ok();
}

Status IbNet::deregMr(void* comm, void* mhandle) {
  Hca* hca = static_cast<Comm*>(comm)->port->hca;
  std::lock_guard<std::mutex> lock(hca->mrMutex);
  return hca->mrs.release(static_cast<ib::MrCache::Entry*>(mhandle), [&](void* mr) {
    return v_->deregMr(static_cast<ibv_mr*>(mr)) == 0
               ? Status::ok()
               : errnoError(errno, "IB: ibv_dereg_mr on " + hca->name);
  });
}

Status IbNet::failure(Comm* c, const std::string& why) {
  if (!c->failed) {
    c->failed = true;
    c->error = formatString("IB %s (%s %s): %s", c->port->label.c_str(),
                            c->isSend ? "sending to" : "receiving from",
                            c->sock.peer().toString().c_str(), why.c_str());
  }
  return connStatus(c);
}

// A peer that closed its end of the setup socket has closed the connection (or died): checked
// at most every 100 ms while a request waits.
Status IbNet::peekPeer(Comm* c) {
  const SteadyClock::time_point now = SteadyClock::now();
  if (c->failed || now - c->lastPeek < std::chrono::milliseconds(100)) return connStatus(c);
  c->lastPeek = now;
  char b;
  ssize_t n = recv(c->sock.fd(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    return failure(c, "the peer closed the connection");
  return Status::ok();
}

// The slot of the next request after taking the completions there are; null while it is still
// in use (post again later).
Result<Request*> IbNet::freeRequest(Comm* c) {
  if (!c->failed) poll(c);
  CHORUS_TRY(connStatus(c));
  Request& r = c->reqs[c->seq % kMaxRequests];
  return r.used ? nullptr : &r;
}

Status IbNet::isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                    void** request) {
  *request = nullptr;
  Comm* c = static_cast<Comm*>(sendComm);
  Result<Request*> next = freeRequest(c);
  if (!next.isOk() || next.value() == nullptr) return next.status();
  Request& r = *next.value();
  const int slot = static_cast<int>(c->seq % kMaxRequests);
  // The receive this send is for: the next FIFO slot, once all its entries arrived.
  FifoEntry* entries = &c->fifo[(c->fifoSeq % kMaxRequests) * kMaxRecvs];
  if (__atomic_load_n(&entries[0].seq, __ATOMIC_ACQUIRE) != c->fifoSeq + 1) return peekPeer(c);
  const int n = static_cast<int>(entries[0].nreqs);
  if (n < 1 || n > kMaxRecvs)
    return failure(c, formatString("a FIFO entry for a receive of %d buffers", n));
  for (int i = 1; i < n; ++i)
    if (__atomic_load_n(&entries[i].seq, __ATOMIC_ACQUIRE) != c->fifoSeq + 1) return peekPeer(c);
  const int index = ib::matchFifoEntry(entries, n, c->sentMask, tag);
  if (index < 0)
    return failure(c, formatString("a send with tag %d met a receive with tag %d%s", tag,
                                   entries[0].tag, n > 1 ? " and others" : ""));
  const FifoEntry entry = entries[index];
  if (size > entry.size)
    return failure(c, formatString("a send of %zu bytes met a receive of %u", size, entry.size));
  if (mhandle == nullptr) return invalidArgument("IB: a send from memory that is not registered");
  const ibv_mr* mr = static_cast<ibv_mr*>(static_cast<ib::MrCache::Entry*>(mhandle)->mr);
  for (int q = 0; q < c->nqps; ++q) {
    const ib::Chunk ch = ib::chunkOfQp(size, c->nqps, q);
    ibv_sge sge;
    sge.addr = reinterpret_cast<uintptr_t>(data) + ch.offset;
    sge.length = static_cast<uint32_t>(ch.bytes);
    sge.lkey = mr->lkey;
    ibv_send_wr wr[2];
    memset(wr, 0, sizeof wr);
    ibv_send_wr* first = &wr[1];
    wr[1].wr_id = wrId(kWrSend, slot);
    wr[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[1].send_flags = IBV_SEND_SIGNALED;
    wr[1].imm_data = htonl(ib::encodeImm(index, n, size));
    wr[1].wr.rdma.remote_addr = entry.addr + ch.offset;
    wr[1].wr.rdma.rkey = entry.rkey;
    if (options_.adaptiveRouting && ch.bytes > 0) {
      // Data packets may arrive out of order: write them first, then a zero-byte write with
      // immediate on the same queue pair, which completes only after them.
      wr[0] = wr[1];
      wr[0].opcode = IBV_WR_RDMA_WRITE;
      wr[0].send_flags = 0;
      wr[0].sg_list = &sge;
      wr[0].num_sge = 1;
      wr[0].next = &wr[1];
      first = &wr[0];
    } else if (ch.bytes > 0) {
      wr[1].sg_list = &sge;
      wr[1].num_sge = 1;
    }
    ibv_send_wr* bad = nullptr;
    if (VerbsApi::postSend(c->qps[q], first, &bad) != 0)
      return failure(c, formatString("ibv_post_send failed (%s)", strerror(errno)));
  }
  r.used = true;
  r.pending = c->nqps;
  r.n = 1;
  r.sizes[0] = size;
  ++c->seq;
  c->sentMask |= 1u << index;
  if (c->sentMask == (1u << n) - 1) {  // the receive has all its messages
    ++c->fifoSeq;
    c->sentMask = 0;
  }
  *request = &r;
  return Status::ok();
}

Status IbNet::irecvGroup(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                         void** mhandles, void** request) {
  *request = nullptr;
  Comm* c = static_cast<Comm*>(recvComm);
  if (n < 1 || n > kMaxRecvs)
    return invalidArgument("IB: a receive of %d buffers (1 to %d)", n, kMaxRecvs);
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > (n == 1 ? size_t(0xffffffffu) : ib::kGroupedMaxBytes))
      return invalidArgument("IB: a receive of %zu bytes (at most %zu in a group of %d)", sizes[i],
                             n == 1 ? size_t(0xffffffffu) : ib::kGroupedMaxBytes, n);
    if (mhandles[i] == nullptr)
      return invalidArgument("IB: a receive into memory that is not registered");
  }
  Result<Request*> next = freeRequest(c);
  if (!next.isOk() || next.value() == nullptr) return next.status();
  Request& r = *next.value();
  const int slot = static_cast<int>(c->seq % kMaxRequests);
  // A buffer's message arrives as one write with immediate on every queue pair.
  for (int q = 0; q < c->nqps; ++q)
    for (int i = 0; i < n; ++i) {
      ibv_recv_wr wr;
      memset(&wr, 0, sizeof wr);
      wr.wr_id = wrId(kWrRecv, slot);
      ibv_recv_wr* bad = nullptr;
      if (VerbsApi::postRecv(c->qps[q], &wr, &bad) != 0)
        return failure(c, formatString("ibv_post_recv failed (%s)", strerror(errno)));
    }
  FifoEntry* entries = &c->fifo[static_cast<size_t>(slot) * kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    const ibv_mr* mr = static_cast<ibv_mr*>(static_cast<ib::MrCache::Entry*>(mhandles[i])->mr);
    FifoEntry& e = entries[i];
    e.addr = reinterpret_cast<uintptr_t>(data[i]);
    e.rkey = mr->rkey;
    e.size = static_cast<uint32_t>(sizes[i]);
    e.tag = tags[i];
    e.nreqs = static_cast<uint32_t>(n);
    e.seq = c->seq + 1;
  }
  ibv_sge sge;
  sge.addr = reinterpret_cast<uintptr_t>(entries);
  sge.length = static_cast<uint32_t>(sizeof(FifoEntry) * static_cast<size_t>(n));
  sge.lkey = c->fifoMr->lkey;
  ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wrId(kWrFifo, slot);
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr =
      c->remoteFifo + static_cast<uint64_t>(slot) * kMaxRecvs * sizeof(FifoEntry);
  wr.wr.rdma.rkey = c->remoteFifoKey;
  ibv_send_wr* bad = nullptr;
  if (VerbsApi::postSend(c->qps[0], &wr, &bad) != 0)
    return failure(c, formatString("ibv_post_send of a FIFO entry failed (%s)", strerror(errno)));
  r.used = true;
  r.pending = n * c->nqps + 1;  // each buffer's data on every queue pair, and the FIFO write
  r.n = n;
  for (int i = 0; i < n; ++i) r.sizes[i] = 0;
  ++c->seq;
  *request = &r;
  return Status::ok();
}

// Takes every completion there is. An error completion fails the connection (the first one's
// reason is kept) but the completions around it still count: requests that completed before
// the failure stay complete.
void IbNet::poll(Comm* c) {
  ibv_wc wcs[16];
  while (true) {
    const int n = VerbsApi::pollCq(c->cq, 16, wcs);
    if (n < 0) {
      (void)failure(c, "ibv_poll_cq failed");
      return;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& wc = wcs[i];
      if (wc.status != IBV_WC_SUCCESS) {
        (void)failure(c, formatString("%s (completion status %d, vendor error 0x%x)",
                                      v_->wcStatusStr(wc.status), static_cast<int>(wc.status),
                                      wc.vendor_err));
        continue;
      }
      const uint64_t kind = wc.wr_id >> 32;
      const int slot = static_cast<int>(wc.wr_id & 0xffffffffu);
      if (slot >= kMaxRequests || kind < kWrSend || kind > kWrFifo) {
        (void)failure(c, "a completion that belongs to no request");
        continue;
      }
      Request& r = c->reqs[slot];
      if (kind == kWrRecv) {
        int index = 0;
        size_t bytes = 0;
        ib::decodeImm(ntohl(wc.imm_data), r.n, &index, &bytes);
        if (index >= r.n) {
          (void)failure(c, formatString("a message for buffer %d of a receive of %d", index, r.n));
          continue;
        }
        r.sizes[index] = bytes;
      }
      --r.pending;
    }
    if (n < 16) return;
  }
}

Status IbNet::testGroup(void* request, int n, bool* done, size_t* sizes) {
  auto* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  *done = false;
  if (!c->failed) poll(c);
  if (r->pending > 0) return peekPeer(c);
  if (n != r->n) return internalError("IB: a test of %d sizes for a request of %d", n, r->n);
  *done = true;
  for (int i = 0; sizes != nullptr && i < n; ++i) sizes[i] = r->sizes[i];
  r->used = false;
  return Status::ok();
}

void IbNet::destroy(Comm* c) {
  if (c == nullptr) return;
  for (int q = 0; q < kMaxQps; ++q)
    if (c->qps[q] != nullptr) v_->destroyQp(c->qps[q]);
  if (c->cq != nullptr) v_->destroyCq(c->cq);
  if (c->fifoMr != nullptr) v_->deregMr(c->fifoMr);
  free(c->fifo);
  delete c;
}

}  // namespace

Result<std::unique_ptr<NetPlugin>> makeIbNet(const VerbsApi* verbs) {
  Result<ib::Options> options = ib::optionsFromEnvironment();
  if (!options.isOk()) return options.status();
  std::unique_ptr<IbNet> net(new IbNet(verbs, options.value()));
  CHORUS_TRY(net->discover());
  return std::unique_ptr<NetPlugin>(net.release());
}

}  // namespace chorus
