// The IB network's internals, shared by its files: HCAs, ports, connections and requests, and
// the IbNet class (ib_net.cc: discovery, registration, data path; ib_net_setup.cc: connection
// setup over a TCP socket).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/socket.h"
#include "common/status.h"
#include "transport/ib/ib_devices.h"
#include "transport/ib/ib_logic.h"
#include "transport/ib/verbs.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_plugin.h"

namespace chorus {
namespace ibnet {

using ib::ConnInfo;
using ib::FifoEntry;
using ib::kConnInfoBytes;
using ib::kMaxQps;
using ib::kMaxRecvs;
using ib::kMaxRequests;
using SteadyClock = std::chrono::steady_clock;

constexpr uint32_t kHandleMagic = 0x49424c48;  // "IBLH"

// Kinds of work request, in the top bits of wr_id; the request's slot below.
enum : uint64_t { kWrSend = 1, kWrRecv = 2, kWrFifo = 3, kWrFlush = 4 };
inline uint64_t wrId(uint64_t kind, int slot) {
  return kind << 32 | static_cast<uint64_t>(slot);
}

// One HCA, opened once; its protection domain and registrations serve all its ports.
struct Hca {
  std::string name;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::mutex mrMutex;
  ib::MrCache mrs;
  bool dmabuf = false;      // the kernel and driver register dma-bufs (probed at discovery)
  bool peerMemory = false;  // GPU memory by its address (Options::peerMemory)
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
  // Receive side, for iflush: a queue pair connected to itself that reads a byte of the last
  // buffer of GPU memory a receive wrote, into flushBuf (made at the first flush). The read
  // completes after the HCA's writes before it reached that memory.
  ibv_qp* flushQp = nullptr;
  char* flushBuf = nullptr;
  ibv_mr* flushMr = nullptr;
  Request flushes[kMaxRequests];
  uint64_t flushSeq = 0;
  bool failed = false;
  std::string error;
  SteadyClock::time_point lastPeek{};
};

// The connection's failure, if it failed.
inline Status connStatus(const Comm* c) {
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
    // dma-bufs (GPU memory) where the HCA registers them.
    out->ptrSupport = NCCL_PTR_HOST | (ports_[dev]->hca->dmabuf ? NCCL_PTR_DMABUF : 0) |
                      (ports_[dev]->hca->peerMemory ? NCCL_PTR_CUDA : 0);
    out->maxMessageBytes = size_t(1) << 30;
    out->pciPath = ports_[dev]->pciPath;
    return Status::ok();
  }

  Status listen(int dev, void* handle, void** listenComm) override;
  Status connect(int dev, void* handle, void** sendComm) override;
  Status accept(void* listenComm, void** recvComm) override;
  Status regMr(void* comm, void* data, size_t size, void** mhandle) override;
  Status regMrDevice(void* comm, void* data, size_t size, void** mhandle) override;
  Status regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                     void** mhandle) override;
  Status deregMr(void* comm, void* mhandle) override;
  Status iflush(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles,
                void** request) override;
  // Receives into GPU memory (dma-buf registrations) are flushed by an RDMA read.
  bool flushesDevice() const override { return true; }
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
  // An RC queue pair on c's port and CQ, moved to INIT with remoteAccess added to what remote
  // peers may do: null, or what failed (errno set) with *qp null or to destroy.
  const char* initQp(Comm* c, uint32_t sendWrs, uint32_t recvWrs, int remoteAccess, ibv_qp** qp);
  // Moves qp to RTR towards queue pair q of remote, then to RTS.
  Status qpToRts(Comm* c, ibv_qp* qp, const ConnInfo& remote, int q);
  Status toRts(Comm* c, const ConnInfo& remote);
  Status makeFlushQp(Comm* c);
  void fillInfo(const Comm* c, ConnInfo* info) const;
  Status stepConnect(int dev, Handle* h, void** sendComm);
  Status stepAccept(ListenComm* l, void** recvComm);
  void poll(Comm* c);
  // Host memory (shared registrations), or GPU memory (registrations of their own that remote
  // reads may reach, for flushes): by address (fd < 0), or through the dma-buf fd.
  Status registerPages(void* comm, void* data, size_t size, bool device, int fd, uint64_t offset,
                       void** mhandle);
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

}  // namespace ibnet
}  // namespace chorus
