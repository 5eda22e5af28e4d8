// The CUDA device communicator's own definitions, shared by its source files (dev_comm.cc:
// set-up and enqueue; dev_comm_links.cc: the links to other ranks). Not a public header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "cuda/dev_comm.h"
#include "cuda/dev_launch.h"
#include "transport/device_proxy.h"

namespace chorus {
namespace dev {
namespace cuda_comm {

constexpr int kTagDeviceRing = 2000;
constexpr int kTagDeviceP2p = 2001;
constexpr size_t kLine = 128;  // counters each on a line of their own

inline Status cudaFailure(cudaError_t err, const std::string& what) {
  return Status(Code::kUnhandledCudaError,
                formatString("%s: %s (CUDA error %d)", what.c_str(), cudaGetErrorString(err),
                             static_cast<int>(err)));
}

#define CHORUS_CUDA_TRY(call, what)           \
  do {                                        \
    cudaError_t chorusErr_ = (call);          \
    if (chorusErr_ != cudaSuccess) {          \
      cudaGetLastError();                     \
      return cudaFailure(chorusErr_, (what)); \
    }                                         \
  } while (0)

// Where each FIFO of a receive region lies: per channel and protocol the slots, then the tail
// and head counters on lines of their own.
struct RegionLayout {
  uint32_t nchannels = 0;
  uint32_t nslots[kNumProtos] = {};
  uint32_t slotBytes[kNumProtos] = {};

  size_t fifoBytes(int p) const {
    return (static_cast<size_t>(nslots[p]) * slotBytes[p] + kLine - 1) / kLine * kLine + 2 * kLine;
  }
  size_t channelBytes() const {
    size_t b = 0;
    for (int p = 0; p < kNumProtos; ++p) b += fifoBytes(p);
    return b;
  }
  size_t totalBytes() const { return channelBytes() * nchannels; }
  size_t fifoOffset(int c, int p) const {
    size_t off = channelBytes() * static_cast<size_t>(c);
    for (int q = 0; q < p; ++q) off += fifoBytes(q);
    return off;
  }
  size_t tailOffset(int c, int p) const { return fifoOffset(c, p) + fifoBytes(p) - 2 * kLine; }
  size_t headOffset(int c, int p) const { return tailOffset(c, p) + kLine; }
  // The FIFO of channel c and protocol p in a region laid out so; step: the using end's own.
  Fifo fifo(char* region, int c, int p, uint64_t* step) const {
    Fifo f;
    f.slots = region + fifoOffset(c, p);
    f.tail = reinterpret_cast<uint64_t*>(region + tailOffset(c, p));
    f.head = reinterpret_cast<uint64_t*>(region + headOffset(c, p));
    f.step = step;
    f.nslots = nslots[p];
    f.slotBytes = slotBytes[p];
    return f;
  }
  bool operator==(const RegionLayout& o) const {
    return nchannels == o.nchannels && std::memcmp(nslots, o.nslots, sizeof nslots) == 0 &&
           std::memcmp(slotBytes, o.slotBytes, sizeof slotBytes) == 0;
  }
};

// What a rank tells its ring predecessor about its receive region (plain data).
struct RegionInfo {
  DeviceEndpoint owner;
  RegionLayout layout;
  uint64_t address;  // valid in the owner's process
  cudaIpcMemHandle_t ipc;
  int32_t usable;   // 0: the owner has none to offer (no link, or its set-up failed)
  int32_t viaHost;  // 1: the link goes through host memory and the proxies, not this region
};

// What a rank tells each other rank about its receive FIFO for that rank's sends: the region,
// or why there is none (the receiver decides, so both ends agree).
struct P2pLinkInfo {
  RegionInfo region;
  char reason[160];
};

// What each rank reports at the end of init: whether its set-up succeeded (else why not), and
// the first rank whose point-to-point link into it is missing (-1: none; reason: why).
struct SetupVerdict {
  int32_t ok;
  int32_t noLinkFrom;
  char reason[480];

  // A failure naming rank r when it reported one (as this rank received it).
  Status check(int self, int r) {
    reason[sizeof reason - 1] = 0;
    if (ok != 0) return Status::ok();
    return remoteError("rank %d: rank %d could not set up its device communicator (%s)", self, r,
                       reason);
  }
};

// The first failure of a set-up step whose rank still takes part in the exchanges after it.
class SetupFailure {
 public:
  bool ok() const { return status_.isOk(); }
  const Status& status() const { return status_; }
  // Keeps the first failure; true when s is a success.
  bool note(const Status& s) {
    if (!s.isOk() && status_.isOk()) status_ = s;
    return s.isOk();
  }
  bool cuda(cudaError_t err, const std::string& what) {
    if (err == cudaSuccess) return true;
    cudaGetLastError();
    return note(cudaFailure(err, what));
  }
  SetupVerdict verdict() const {
    SetupVerdict v{};
    v.ok = ok() ? 1 : 0;
    v.noLinkFrom = -1;
    if (!ok()) snprintf(v.reason, sizeof v.reason, "%s", status_.message().c_str());
    return v;
  }

 private:
  Status status_;
};

inline bool isP2p(DevicePathKind k) {
  return k == DevicePathKind::kP2pSameGpu || k == DevicePathKind::kP2pNvlink ||
         k == DevicePathKind::kP2pPcie;
}

// Bytes to allocate for a region: whole 2 MiB granules when another process maps it, since a
// CUDA IPC handle maps the granules an allocation lies in, which a small allocation may share
// with others of its process.
inline size_t allocationBytes(size_t bytes, bool exported) {
  constexpr size_t kGranule = size_t(2) << 20;
  return exported ? (bytes + kGranule - 1) / kGranule * kGranule : bytes;
}

// A region in mapped pinned host memory: its address on the host (the proxy's) and on the
// device (the kernels'); for a sender's own FIFOs also their slot sizes, per channel, protocol
// and slot.
// With gpu set, the Simple slots are in GPU memory laid out the same way instead (GPUDirect
// RDMA: the network moves them in place, the proxy only counters and sizes), exported as the
// dma-buf gpuFd where the driver did.
struct MappedRegion {
  char* host = nullptr;
  char* dev = nullptr;
  uint32_t* sizesHost = nullptr;
  uint32_t* sizesDev = nullptr;
  uint32_t sizesPerFifo = 0;
  char* gpu = nullptr;
  int gpuFd = -1;
  bool valid() const { return host != nullptr; }
  // The FIFO of channel c and protocol p laid out as `layout`, as the kernel sees it (with the
  // kernel's own step) or as the proxy does.
  Fifo kernelFifo(const RegionLayout& layout, int c, int p, uint64_t* step) const {
    Fifo f = layout.fifo(dev, c, p, step);
    if (sizesDev != nullptr) f.sizes = sizesDev + (c * kNumProtos + p) * sizesPerFifo;
    return inGpu(layout, c, p, f);
  }
  Fifo proxyFifo(const RegionLayout& layout, int c, int p) const {
    Fifo f = layout.fifo(host, c, p, nullptr);
    if (sizesHost != nullptr) f.sizes = sizesHost + (c * kNumProtos + p) * sizesPerFifo;
    return inGpu(layout, c, p, f);
  }
  Fifo inGpu(const RegionLayout& layout, int c, int p, Fifo f) const {
    if (gpu != nullptr && p == static_cast<int>(Proto::kSimple))
      f.slots = gpu + layout.fifoOffset(c, p);
    return f;
  }
};

class CudaDeviceComm final : public DeviceComm {
 public:
  ~CudaDeviceComm() override { release(); }

  Status init(const DeviceCommSetup& s);

  int cudaDev() const override { return device_; }
  Status enqueue(const DeviceCall* calls, size_t n, void* stream) override;
  Status enqueueP2p(const DeviceP2p* ops, size_t n, void* stream) override;
  void abort() override {
    if (abortHost_ != nullptr) __atomic_store_n(abortHost_, 1u, __ATOMIC_RELEASE);
  }
  Status asyncError() const override {
    if (proxy_) {
      const Status e = proxy_->error();
      if (!e.isOk())
        return remoteError("rank %d: a device link through host memory failed: %s", rank_,
                           e.message().c_str());
    }
    if (errorHost_ != nullptr && __atomic_load_n(errorHost_, __ATOMIC_ACQUIRE) != 0)
      return remoteError(
          "rank %d: a collective kernel stopped before finishing (the communicator was "
          "aborted while it waited for a peer)",
          rank_);
    return Status::ok();
  }
  std::string describe() const override { return description_; }

 private:
  void release();
  // The point-to-point links to every other rank, p2pLayout's channels each, and to each tree
  // neighbour and recursive-doubling partner 2 treeChannels + rdChannels more; fills
  // peersHost_ (by rank, that many links each).
  Status connectPeers(const DeviceCommSetup& s, const std::vector<DeviceEndpoint>& ends,
                      const RegionLayout& p2pLayout, int treeChannels, int rdChannels,
                      cudaStream_t setup, SetupFailure* local);
  // The direct all-reduce's regions: this rank's, and every peer's mapped, into host->direct
  // (and shape_.directBytes) when every rank reaches every other; else none, and all-reduce
  // runs on the ring. Collective; not being able to set them up is no failure of init.
  Status connectDirect(const DeviceCommSetup& s, const std::vector<DeviceEndpoint>& ends,
                       cudaStream_t setup, const SetupFailure& local, Comm* host);
  // Mapped pinned host memory of `bytes` bytes, zeroed, freed at the end; with sizes, also a
  // slot size per FIFO slot of layout. False (noted in local) when it could not be had.
  bool allocMapped(size_t bytes, const RegionLayout* sizesOf, const std::string& what,
                   SetupFailure* local, MappedRegion* out);
  // GPUDirect RDMA for the links to `peer` through host connectors (s.gpuDirect), asked once
  // per peer and logged; none after a failure.
  const NetGdr& gdrFor(const DeviceCommSetup& s, int peer, SetupFailure* local);
  // Moves the Simple slots of `r` (laid out as layout), the sending (send) or receiving end of
  // a link, into GPU memory where verdict gdr puts that end there (gpuEnd), exported as a
  // dma-buf where the driver does. Where the driver gives no dma-buf a network needs, or GPU
  // memory cannot be had, r stays in host memory (logged).
  void gpuSlots(const NetGdr& gdr, bool send, const RegionLayout& layout, const std::string& what,
                MappedRegion* r);
  // Host connectors of the ring channels whose link to the successor (sendVia) or from the
  // predecessor (recvVia) goes through host memory, joined to this rank's FIFOs by the proxy.
  Status connectRingViaHost(const DeviceCommSetup& s, int prev, int next, bool sendVia,
                            bool recvVia, const RegionLayout& layout, SetupFailure* local);
  // Whether kernels this communicator queued may still run (and wait on a link).
  bool kernelsInFlight() const {
    if (!__atomic_load_n(&launched_, __ATOMIC_ACQUIRE)) return false;
    const cudaError_t e = cudaEventQuery(lastLaunch_);
    if (e == cudaSuccess) return false;
    cudaGetLastError();
    return true;  // not ready, or unknown: treated as running
  }
  // The proxy's view of failures: kernels waiting on a link stop.
  void proxyFailed(const Status& s) {
    LOG_WARN(kSubsysInit, "rank %d: %s", rank_, s.message().c_str());
    abort();
  }
  // Maps a peer's region (its device pointer within this process, else its IPC handle).
  void mapRegion(const DeviceEndpoint& me, const RegionInfo& theirs, int owner, const char* what,
                 SetupFailure* local, char** mapped, bool* ipc);
  // The end of init on every rank: fails all when one failed; notes missing links.
  Status agree(const DeviceCommSetup& s, const SetupFailure& local);
  void warnCrossContext() {
    if (warnedCrossContext_) return;
    warnedCrossContext_ = true;
    LOG_WARN(kSubsysInit,
             "rank %d: shares its GPU with a rank of another process; without MPS the GPU runs "
             "their kernels in turns, and each step between them may wait a time slice (run "
             "the ranks of one GPU as threads of one process, or start MPS)",
             rank_);
  }
  Status checkStream(void* stream) const;
  // Queues launches on stream, after this communicator's earlier ones.
  Status launchAll(const std::vector<Launch>& launches, void* stream);
  // Runs body(cudaStream_t), which queues work on stream, after this communicator's earlier
  // work (on whichever stream), and records the point later work waits for.
  template <class Body>
  Status ordered(void* stream, Body body);
  // One rank alone: copies (or nothing, in place) for what needs no arithmetic, the kernel for
  // the rest, in the calls' order.
  Status enqueueAlone(const DeviceCall* calls, size_t n, void* stream);

  int rank_ = 0;
  int device_ = -1;
  int nchannels_ = 1;
  int treeChannels_ = 0;  // channels with tree links
  int rdChannels_ = 0;    // channels with recursive-doubling links
  int nthreads_ = 512;    // threads of each block
  bool sharesGpuInProcess_ = false;
  DeviceShape shape_;
  std::vector<int32_t> ringRanks_;
  char* recvRegion_ = nullptr;  // this rank's receive FIFOs (device memory)
  char* sendRegion_ = nullptr;  // the ring successor's receive FIFOs, mapped
  // Ring links through host memory: this rank's receive FIFOs (then not recvRegion_'s device
  // memory) and its own send FIFOs, which the proxy forwards to the successor.
  MappedRegion recvViaHost_;
  MappedRegion sendViaHost_;
  bool sendRegionIpc_ = false;  // opened from an IPC handle (closed at the end)
  uint64_t* state_ = nullptr;   // FIFO ends' steps and the grid barrier (device memory)
  int32_t* ringRanksDev_ = nullptr;
  Comm* commDev_ = nullptr;
  // Point-to-point, by rank: this rank's receive FIFO from it, the mapping of its receive FIFO
  // for this rank's sends, and why a direction has no link (empty: linked).
  std::vector<char*> peerRecv_;
  std::vector<char*> peerSend_;
  std::vector<bool> peerSendIpc_;
  // Point-to-point links through host memory, by rank: this rank's receive FIFO from it
  // (peerRecv_ then holds its device address) and this rank's own send FIFO to it.
  std::vector<MappedRegion> peerRecvViaHost_;
  std::vector<MappedRegion> peerSendViaHost_;
  std::vector<std::string> noRecvLink_;
  // The direct all-reduce: this rank's region (device memory), every rank's as mapped here.
  char* directRegion_ = nullptr;
  std::vector<char*> directPeers_;
  std::vector<bool> directPeersIpc_;
  std::string directNote_;  // for the init log
  // Why device sends and receives between ranks are refused (empty: they run).
  std::string p2pRefusal_;
  bool warnedCrossContext_ = false;
  std::vector<Channel> peersHost_;
  uint64_t* peerState_ = nullptr;  // steps of both ends, per peer and protocol
  Channel* peersDev_ = nullptr;
  uint32_t* abortHost_ = nullptr;  // mapped pinned host memory
  uint32_t* errorHost_ = nullptr;
  std::vector<void*> hostRegions_;  // mapped pinned host memory (cudaFreeHost at the end)
  // GPU memory holding network-placed Simple slots and its dma-buf descriptors (-1: none).
  std::vector<std::pair<void*, int>> gpuSlotRegions_;
  std::map<int, NetGdr> gdr_;  // gdrFor, by peer
  // Moves the slots of links through host memory (null: none); stopped before they are freed.
  std::unique_ptr<DeviceProxy> proxy_;
  // Recorded after this communicator's last launch: a launch on another stream waits for it,
  // since consecutive kernels continue each other's FIFO positions.
  cudaEvent_t lastLaunch_ = nullptr;
  void* lastStream_ = nullptr;
  bool launched_ = false;
  std::string description_;
};

}  // namespace cuda_comm
}  // namespace dev
}  // namespace chorus
