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
#include "transport/ib/ib_net_internal.h"
#include "transport/net_plugin/net_abi.h"

namespace chorus {

namespace ibnet {

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
      // Whether the kernel and driver take dma-bufs: a registration of no fd fails for want of
      // one (EBADF, EINVAL) where they do, and as unsupported where they do not.
      if (v_->regDmabufMr != nullptr) {
        errno = 0;
        ibv_mr* probe = v_->regDmabufMr(hca->pd, 0, 0, 0, -1, 0);
        if (probe != nullptr) v_->deregMr(probe);
        hca->dmabuf = probe != nullptr || (errno != EOPNOTSUPP && errno != EPROTONOSUPPORT);
      }
      hca->peerMemory =
          options_.peerMemory == 1 || (options_.peerMemory < 0 && ib::peerMemoryLoaded("/sys"));
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
  for (Request& r : c->flushes) r.comm = c.get();
  c->psn = std::random_device{}() & 0xffffff;
  Hca* hca = c->port->hca;
  Comm* raw = c.release();
  auto fail = [&](const std::string& what) {
    Status s = errnoError(errno != 0 ? errno : EIO, "IB: " + what + " on " + raw->port->label);
    destroy(raw);
    return s;
  };
  errno = 0;
  // Each request's completions, and a flush's.
  raw->cq = v_->createCq(hca->ctx, kMaxRequests * (kMaxRecvs * nqps + 2) + 8, nullptr, nullptr, 0);
  if (raw->cq == nullptr) return fail("ibv_create_cq");
  for (int q = 0; q < nqps; ++q) {
    const char* failed =
        initQp(raw, 2 * kMaxRequests + 2, kMaxRequests * kMaxRecvs, 0, &raw->qps[q]);
    if (failed != nullptr) return fail(failed);
  }
  raw->fifo = static_cast<FifoEntry*>(aligned_alloc(4096, kFifoBytes));
  if (raw->fifo == nullptr) return fail("allocating the FIFO");
  memset(raw->fifo, 0, kFifoBytes);
  const int access = isSend ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0;
  raw->fifoMr = v_->regMr(hca->pd, raw->fifo, kFifoBytes, access);
  if (raw->fifoMr == nullptr) return fail("ibv_reg_mr of the FIFO");
  return raw;
}

const char* IbNet::initQp(Comm* c, uint32_t sendWrs, uint32_t recvWrs, int remoteAccess,
                          ibv_qp** qp) {
  ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.send_cq = c->cq;
  init.recv_cq = c->cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = sendWrs;
  init.cap.max_recv_wr = recvWrs;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  *qp = v_->createQp(c->port->hca->pd, &init);
  if (*qp == nullptr) return "ibv_create_qp";
  ibv_qp_attr attr;
  int mask = 0;
  ib::initTransition(c->port->local, &attr, &mask);
  attr.qp_access_flags |= remoteAccess;
  if (v_->modifyQp(*qp, &attr, mask) != 0) return "moving a queue pair to INIT";
  return nullptr;
}

Status IbNet::qpToRts(Comm* c, ibv_qp* qp, const ConnInfo& remote, int q) {
  ibv_qp_attr attr;
  int mask = 0;
  ib::rtrTransition(c->port->local, remote, q, options_, &attr, &mask);
  if (v_->modifyQp(qp, &attr, mask) != 0)
    return errnoError(errno != 0 ? errno : EINVAL,
                      "IB: moving a queue pair of " + c->port->label + " to RTR");
  ib::rtsTransition(c->psn, options_, &attr, &mask);
  if (v_->modifyQp(qp, &attr, mask) != 0)
    return errnoError(errno != 0 ? errno : EINVAL,
                      "IB: moving a queue pair of " + c->port->label + " to RTS");
  return Status::ok();
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
  for (int q = 0; q < c->nqps; ++q) CHORUS_TRY(qpToRts(c, c->qps[q], remote, q));
  if (!c->isSend) {
    c->remoteFifo = remote.fifoAddr;
    c->remoteFifoKey = remote.fifoRkey;
  }
  return Status::ok();
}

// The flush queue pair of a receiving connection, connected to itself: its reads of this
// host's own registrations go out through the HCA and come back.
Status IbNet::makeFlushQp(Comm* c) {
  Hca* hca = c->port->hca;
  auto fail = [&](const std::string& what) {
    return errnoError(errno != 0 ? errno : EIO,
                      "IB: " + what + " for flushes on " + c->port->label);
  };
  errno = 0;
  c->flushBuf = static_cast<char*>(aligned_alloc(64, 64));
  if (c->flushBuf == nullptr) return fail("allocating the buffer");
  memset(c->flushBuf, 0, 64);
  c->flushMr = v_->regMr(hca->pd, c->flushBuf, 64, IBV_ACCESS_LOCAL_WRITE);
  if (c->flushMr == nullptr) return fail("ibv_reg_mr");
  const char* failed = initQp(c, kMaxRequests, 1, IBV_ACCESS_REMOTE_READ, &c->flushQp);
  if (failed != nullptr) return fail(failed);
  ConnInfo self{};
  fillInfo(c, &self);
  self.nqps = 1;
  self.qpn[0] = c->flushQp->qp_num;
  return qpToRts(c, c->flushQp, self, 0);
}

namespace {

// One signaled RDMA write or read of length bytes between local (lkey) and remote (rkey);
// ibv_post_send's result.
int postSignaled(ibv_qp* qp, uint64_t id, ibv_wr_opcode opcode, void* local, uint32_t length,
                 uint32_t lkey, uint64_t remote, uint32_t rkey) {
  ibv_sge sge;
  sge.addr = reinterpret_cast<uintptr_t>(local);
  sge.length = length;
  sge.lkey = lkey;
  ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = id;
  wr.opcode = opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return VerbsApi::postSend(qp, &wr, &bad);
}

}  // namespace

Status IbNet::regMr(void* comm, void* data, size_t size, void** mhandle) {
  return registerPages(comm, data, size, false, -1, 0, mhandle);
}

Status IbNet::regMrDevice(void* comm, void* data, size_t size, void** mhandle) {
  *mhandle = nullptr;
  const Hca* hca = static_cast<Comm*>(comm)->port->hca;
  if (!hca->peerMemory)
    return invalidUsage(
        "IB: %s does not register GPU memory by its address: no peer memory module "
        "(nvidia-peermem) is loaded (CHORUS_IB_PEER_MEMORY=1 says there is one)",
        hca->name.c_str());
  return registerPages(comm, data, size, true, -1, 0, mhandle);
}

Status IbNet::regMrDmaBuf(void* comm, void* data, size_t size, int, uint64_t offset, int fd,
                          void** mhandle) {
  *mhandle = nullptr;
  const Hca* hca = static_cast<Comm*>(comm)->port->hca;
  if (v_->regDmabufMr == nullptr)
    return invalidUsage("IB: %s has no ibv_reg_dmabuf_mr (rdma-core 34 or newer has it)",
                        v_->library.c_str());
  if (!hca->dmabuf)
    return invalidUsage("IB: %s does not register dma-bufs (its kernel driver refused)",
                        hca->name.c_str());
  if (fd < 0) return invalidArgument("IB: a dma-buf registration with fd %d", fd);
  return registerPages(comm, data, size, true, fd, offset, mhandle);
}

// The pages holding data: host memory (fd < 0), registered once for every registration that
// shares them; or GPU memory, registered each time (the same addresses may map other memory
// next time), by its address or as the dma-buf fd whose byte `offset` is data's first (the
// pages' start is as far before that as data is past its page).
Status IbNet::registerPages(void* comm, void* data, size_t size, bool device, int fd,
                            uint64_t offset, void** mhandle) {
  Hca* hca = static_cast<Comm*>(comm)->port->hca;
  // GPU memory is also read by the flush after receives.
  const int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (device ? IBV_ACCESS_REMOTE_READ : 0);
  std::lock_guard<std::mutex> lock(hca->mrMutex);
  Result<ib::MrCache::Entry*> e = hca->mrs.acquire(
      data, size,
      [&](void* begin, size_t bytes) -> Result<void*> {
        errno = 0;
        ibv_mr* mr = nullptr;
        if (fd < 0) {
          mr = v_->regMr(hca->pd, begin, bytes, access);
        } else {
          const uint64_t lead =
              static_cast<uint64_t>(static_cast<char*>(data) - static_cast<char*>(begin));
          if (offset < lead)
            return invalidArgument(
                "IB: dma-buf offset %llu of %p is less than the %llu bytes before it in its "
                "page",
                static_cast<unsigned long long>(offset), data,
                static_cast<unsigned long long>(lead));
          mr = v_->regDmabufMr(hca->pd, offset - lead, bytes, reinterpret_cast<uint64_t>(begin), fd,
                               access);
        }
        if (mr == nullptr)
          return errnoError(
              errno != 0 ? errno : ENOMEM,
              formatString("IB: %s of %zu bytes on %s", fd < 0 ? "ibv_reg_mr" : "ibv_reg_dmabuf_mr",
                           bytes, hca->name.c_str()));
        return static_cast<void*>(mr);
      },
      !device);
  if (!e.isOk()) return e.status();
  *mhandle = e.value();
  return Status::ok();
}

// Host memory needs no flush. What the HCA wrote into GPU memory (a registration of its own) may
// still be on its way when the receive completes: an RDMA read of a byte of the last such
// buffer that took data, through the flush queue pair, completes only after those writes
// reached the memory (PCIe orders a read after the writes before it).
Status IbNet::iflush(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles,
                     void** request) {
  *request = nullptr;
  Comm* c = static_cast<Comm*>(recvComm);
  int last = -1;
  for (int i = 0; i < n; ++i)
    if (sizes[i] > 0 && mhandles[i] != nullptr &&
        !static_cast<const ib::MrCache::Entry*>(mhandles[i])->shared)
      last = i;
  if (last < 0) return Status::ok();
  CHORUS_TRY(connStatus(c));
  if (c->flushQp == nullptr) {
    Status made = makeFlushQp(c);
    if (!made.isOk()) return failure(c, made.message());
  }
  poll(c);
  CHORUS_TRY(connStatus(c));
  const int slot = static_cast<int>(c->flushSeq % kMaxRequests);
  Request& r = c->flushes[slot];
  if (r.used) return internalError("IB: more than %d flushes in flight", kMaxRequests);
  const ibv_mr* mr = static_cast<ibv_mr*>(static_cast<ib::MrCache::Entry*>(mhandles[last])->mr);
  if (postSignaled(c->flushQp, wrId(kWrFlush, slot), IBV_WR_RDMA_READ, c->flushBuf, 1,
                   c->flushMr->lkey, reinterpret_cast<uintptr_t>(data[last]), mr->rkey) != 0)
    return failure(c, formatString("ibv_post_send of a flush failed (%s)", strerror(errno)));
  r.used = true;
  r.pending = 1;
  r.n = 1;
  r.sizes[0] = 0;
  ++c->flushSeq;
  *request = &r;
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
  if (postSignaled(c->qps[0], wrId(kWrFifo, slot), IBV_WR_RDMA_WRITE, entries,
                   static_cast<uint32_t>(sizeof(FifoEntry) * static_cast<size_t>(n)),
                   c->fifoMr->lkey,
                   c->remoteFifo + static_cast<uint64_t>(slot) * kMaxRecvs * sizeof(FifoEntry),
                   c->remoteFifoKey) != 0)
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
      if (slot >= kMaxRequests || kind < kWrSend || kind > kWrFlush) {
        (void)failure(c, "a completion that belongs to no request");
        continue;
      }
      Request& r = kind == kWrFlush ? c->flushes[slot] : c->reqs[slot];
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
  if (c->flushQp != nullptr) v_->destroyQp(c->flushQp);
  if (c->flushMr != nullptr) v_->deregMr(c->flushMr);
  free(c->flushBuf);
  if (c->cq != nullptr) v_->destroyCq(c->cq);
  if (c->fifoMr != nullptr) v_->deregMr(c->fifoMr);
  free(c->fifo);
  delete c;
}

}  // namespace ibnet

Result<std::unique_ptr<NetPlugin>> makeIbNet(const VerbsApi* verbs) {
  Result<ib::Options> options = ib::optionsFromEnvironment();
  if (!options.isOk()) return options.status();
  std::unique_ptr<ibnet::IbNet> net(new ibnet::IbNet(verbs, options.value()));
  CHORUS_TRY(net->discover());
  return std::unique_ptr<NetPlugin>(net.release());
}

}  // namespace chorus
