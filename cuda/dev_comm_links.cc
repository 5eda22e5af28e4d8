// The CUDA device communicator's links to other ranks: point-to-point FIFOs in each receiver's
// GPU memory (mapped by the sender within a process, through CUDA IPC across processes), and
// for pairs without a P2P path FIFOs in mapped pinned host memory that a proxy thread joins
// through the communicator's host transports.
#include <cuda.h>  // the driver API's types only: its entry points come through the runtime
#include <unistd.h>

#include <algorithm>

#include "cuda/dev_comm_cuda.h"

namespace chorus {
namespace dev {
namespace cuda_comm {

namespace {
// A proxied Simple FIFO's slots (mapped host memory, or GPU memory where the region has it),
// which a network may send from and receive into in place (DeviceProxy's place); LL lines
// are not offered.
struct Placement {
  SlotMemory mem;
  const SlotMemory* get() const { return mem.data != nullptr ? &mem : nullptr; }
};
Placement placementOf(const MappedRegion& r, const Fifo& f, int proto) {
  Placement p;
  if (proto != static_cast<int>(Proto::kSimple)) return p;
  p.mem.data = f.slots;
  p.mem.nslots = f.nslots;
  p.mem.slotBytes = f.slotBytes;
  if (r.gpu != nullptr) {
    p.mem.device = true;
    p.mem.dmabufFd = r.gpuFd;
    p.mem.dmabufOffset = static_cast<uint64_t>(f.slots - r.gpu);
  }
  return p;
}

// A dma-buf of GPU memory [p, p + bytes) (cuMemGetHandleForAddressRange, CUDA 11.7 and newer,
// reached through the runtime so that Chorus links no libcuda); -1 where the driver gives none.
int exportDmaBuf(void* p, size_t bytes) {
  using GetHandle =
      CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  static const GetHandle getHandle = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn,
                                                           11070, cudaEnableDefault, &found);
#else
    const cudaError_t e =
        cudaGetDriverEntryPoint("cuMemGetHandleForAddressRange", &fn, cudaEnableDefault, &found);
#endif
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return static_cast<GetHandle>(nullptr);
    }
    return reinterpret_cast<GetHandle>(fn);
  }();
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  if (getHandle == nullptr || reinterpret_cast<uintptr_t>(p) % page != 0 || bytes % page != 0)
    return -1;
  int fd = -1;
  if (getHandle(&fd, reinterpret_cast<CUdeviceptr>(p), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0) != CUDA_SUCCESS)
    return -1;
  return fd;
}
}  // namespace

const NetGdr& CudaDeviceComm::gdrFor(const DeviceCommSetup& s, int peer, SetupFailure* local) {
  auto it = gdr_.find(peer);
  if (it != gdr_.end()) return it->second;
  NetGdr g;
  if (!s.gpuDirect) {
    g.why = "no network transport";
  } else if (!local->ok()) {
    g.why = "not asked (the set-up failed before)";
  } else {
    Result<NetGdr> r = s.gpuDirect(peer);
    if (local->note(r.status()))
      g = r.value();
    else
      g.why = r.status().message();
  }
  LOG_INFO(kSubsysInit, "rank %d: device links with rank %d through the network: %s", rank_, peer,
           g.why.c_str());
  return gdr_.emplace(peer, g).first->second;
}

void CudaDeviceComm::gpuSlots(const NetGdr& gdr, bool send, const RegionLayout& layout,
                              const std::string& what, MappedRegion* r) {
  if (!(send ? gdr.send : gdr.recv)) return;
  // Whole 2 MiB granules: page-aligned, as a dma-buf's range must be.
  const size_t bytes = allocationBytes(layout.totalBytes(), true);
  char* mem = nullptr;
  const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&mem), bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    LOG_WARN(kSubsysInit,
             "%s: cudaMalloc of %zu bytes of GPU slots failed (%s): slots in host "
             "memory",
             what.c_str(), bytes, cudaGetErrorString(e));
    return;
  }
  const int fd = exportDmaBuf(mem, bytes);
  if (!gpuEnd(gdr, send, fd >= 0)) {
    cudaFree(mem);
    LOG_INFO(kSubsysInit,
             "%s: the network takes GPU memory only as a dma-buf, which the driver does not "
             "export here: slots in host memory",
             what.c_str());
    return;
  }
  gpuSlotRegions_.emplace_back(mem, fd);
  r->gpu = mem;
  r->gpuFd = fd;
}

Status CudaDeviceComm::connectPeers(const DeviceCommSetup& s,
                                    const std::vector<DeviceEndpoint>& ends,
                                    const RegionLayout& p2pLayout, int treeChannels, int rdChannels,
                                    cudaStream_t setup, SetupFailure* local) {
  const int n = s.nranks;
  const DeviceEndpoint& me = ends[static_cast<size_t>(rank_)];
  peerRecv_.assign(static_cast<size_t>(n), nullptr);
  peerSend_.assign(static_cast<size_t>(n), nullptr);
  peerSendIpc_.assign(static_cast<size_t>(n), false);
  noRecvLink_.assign(static_cast<size_t>(n), "");
  // The links of each pair: one per part (the channels of p2pLayout), then for the pairs
  // whose ranks are tree neighbours or recursive-doubling partners the tree links and the
  // recursive-doubling links (the same layout with more channels; a pair that is only one of
  // the two leaves the other's unused).
  const int parts = static_cast<int>(p2pLayout.nchannels) + 2 * treeChannels + rdChannels;
  RegionLayout extraLayout = p2pLayout;
  extraLayout.nchannels = static_cast<uint32_t>(parts);
  std::vector<bool> extra(static_cast<size_t>(n), false);
  for (int p = 0; p < n; ++p)
    extra[static_cast<size_t>(p)] = (treeChannels > 0 && treeNeighbours(n, rank_, p)) ||
                                    (rdChannels > 0 && rdPartners(n, rank_, p));
  auto layoutOf = [&](int p) -> const RegionLayout& {
    return extra[static_cast<size_t>(p)] ? extraLayout : p2pLayout;
  };
  auto linked = [&](int p, int part) {
    return part < static_cast<int>(p2pLayout.nchannels) || extra[static_cast<size_t>(p)];
  };
  peersHost_.assign(static_cast<size_t>(n) * parts, Channel());
  peerRecvViaHost_.assign(static_cast<size_t>(n), MappedRegion());
  peerSendViaHost_.assign(static_cast<size_t>(n), MappedRegion());
  // Peers whose links to and from this rank go through host memory (the path is the same
  // both ways).
  std::vector<int> viaHost;
  // Per peer, part and protocol: the send step, the receive step.
  const size_t stateWords = static_cast<size_t>(n) * parts * kNumProtos * 2;
  if (local->ok() &&
      local->cuda(cudaMalloc(reinterpret_cast<void**>(&peerState_), stateWords * sizeof(uint64_t)),
                  formatString("rank %d: cudaMalloc of the point-to-point FIFO state", rank_)))
    local->cuda(cudaMemsetAsync(peerState_, 0, stateWords * sizeof(uint64_t), setup),
                "cudaMemsetAsync");
  // This rank decides each link into its own memory and tells the sender; after a local
  // failure it offers none (the agreement at the end of init fails every rank).
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    const DeviceEndpoint& peer = ends[static_cast<size_t>(p)];
    const DevicePath path = chooseDevicePath(*s.topo, peer, me, s.paths);
    const RegionLayout& layout = layoutOf(p);
    P2pLinkInfo info{};
    if (!isP2p(path.kind) && s.connectHost) {
      viaHost.push_back(p);
      info.region.owner = me;
      info.region.layout = layout;
      info.region.viaHost = 1;
      MappedRegion& in = peerRecvViaHost_[static_cast<size_t>(p)];
      const std::string what = formatString("rank %d: receive FIFO from rank %d", rank_, p);
      if (local->ok() && allocMapped(layout.totalBytes(), nullptr, what, local, &in)) {
        gpuSlots(gdrFor(s, p, local), false, layout, what, &in);
        peerRecv_[static_cast<size_t>(p)] = in.dev;
        info.region.usable = local->ok() ? 1 : 0;
      }
    } else if (!isP2p(path.kind)) {
      snprintf(info.reason, sizeof info.reason, "%s: %s", devicePathName(path.kind),
               path.reason.c_str());
      noRecvLink_[static_cast<size_t>(p)] = info.reason;
    } else if (local->ok()) {
      if (path.crossContext) warnCrossContext();
      const bool exported = peer.pid != me.pid || peer.hostId != me.hostId;
      const size_t bytes = allocationBytes(layout.totalBytes(), exported);
      char* region = nullptr;
      if (local->cuda(cudaMalloc(reinterpret_cast<void**>(&region), bytes),
                      formatString("rank %d: cudaMalloc of %zu bytes of receive FIFOs from "
                                   "rank %d",
                                   rank_, bytes, p))) {
        peerRecv_[static_cast<size_t>(p)] = region;
        info.region.owner = me;
        info.region.layout = layout;
        info.region.address = reinterpret_cast<uint64_t>(region);
        if (local->cuda(cudaMemsetAsync(region, 0, bytes, setup), "cudaMemsetAsync") &&
            (!exported || local->cuda(cudaIpcGetMemHandle(&info.region.ipc, region),
                                      formatString("rank %d: cudaIpcGetMemHandle", rank_))))
          info.region.usable = 1;
      }
    }
    CHORUS_TRY(s.bootstrap->send(p, kTagDeviceP2p, &info, sizeof info));
  }
  if (local->ok()) local->cuda(cudaStreamSynchronize(setup), "cudaStreamSynchronize");
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    P2pLinkInfo theirs{};
    CHORUS_TRY(s.bootstrap->recv(p, kTagDeviceP2p, &theirs, sizeof theirs));
    // A link the receiver refused is reported by the receiver (init's agreement).
    if (theirs.region.usable == 0 || !local->ok()) continue;
    const RegionLayout& layout = layoutOf(p);
    if (!(theirs.region.layout == layout)) {
      local->note(invalidUsage(
          "rank %d: rank %d uses other device FIFO sizes (CHORUS_BUFFSIZE or CHORUS_STEPS differ "
          "between the ranks); set them alike on every rank",
          rank_, p));
      continue;
    }
    const bool via = std::find(viaHost.begin(), viaHost.end(), p) != viaHost.end();
    if ((theirs.region.viaHost != 0) != via) {
      local->note(internalError(
          "rank %d: rank %d and this rank disagree on whether the link between them goes "
          "through host memory (their topologies differ)",
          rank_, p));
      continue;
    }
    if (via) {
      MappedRegion& out = peerSendViaHost_[static_cast<size_t>(p)];
      const std::string what = formatString("rank %d: send FIFO to rank %d", rank_, p);
      if (allocMapped(layout.totalBytes(), &layout, what, local, &out)) {
        gpuSlots(gdrFor(s, p, local), true, layout, what, &out);
        peerSend_[static_cast<size_t>(p)] = out.dev;
      }
      continue;
    }
    bool ipc = false;
    mapRegion(me, theirs.region, p, "receive FIFO", local, &peerSend_[static_cast<size_t>(p)],
              &ipc);
    peerSendIpc_[static_cast<size_t>(p)] = ipc;
  }
  // The host connectors of those links, one per protocol each way, joined to the FIFOs by the
  // proxy (every rank takes part, whatever its own set-up did: the peers wait for it).
  for (int part = 0; part < parts && !viaHost.empty(); ++part) {
    // Tree and recursive-doubling links only where the pair has them (both list each other).
    std::vector<int> peers;
    for (int p : viaHost)
      if (linked(p, part)) peers.push_back(p);
    for (int q = 0; q < kNumProtos && !peers.empty(); ++q) {
      HostLinks links;
      CHORUS_TRY(s.connectHost(hostP2pChannel(part, q), peers, peers, &links));
      for (int p : peers) {
        const RegionLayout& layout = layoutOf(p);
        const MappedRegion& in = peerRecvViaHost_[static_cast<size_t>(p)];
        const MappedRegion& out = peerSendViaHost_[static_cast<size_t>(p)];
        if (!local->ok() || !in.valid() || !out.valid()) continue;
        const std::string what = formatString("device link %d between ranks %d and %d, %s", part,
                                              rank_, p, protoName(static_cast<Proto>(q)));
        const Fifo outFifo = out.proxyFifo(layout, part, q), inFifo = in.proxyFifo(layout, part, q);
        local->note(proxy_->addSend(outFifo, links.send[static_cast<size_t>(p)], "send " + what,
                                    placementOf(out, outFifo, q).get())) &&
            local->note(proxy_->addRecv(links.recv[static_cast<size_t>(p)], inFifo,
                                        static_cast<Proto>(q), "receive " + what,
                                        placementOf(in, inFifo, q).get()));
      }
    }
  }
  for (int p = 0; p < n; ++p)
    for (int part = 0; part < parts; ++part)
      for (int q = 0; q < kNumProtos && peerState_ != nullptr && linked(p, part); ++q) {
        const RegionLayout& layout = layoutOf(p);
        const size_t at = static_cast<size_t>(p) * parts + part;
        uint64_t* steps = peerState_ + (at * kNumProtos + q) * 2;
        Channel& link = peersHost_[at];
        if (peerSendViaHost_[static_cast<size_t>(p)].valid())
          link.send[q] =
              peerSendViaHost_[static_cast<size_t>(p)].kernelFifo(layout, part, q, steps);
        else if (char* out = peerSend_[static_cast<size_t>(p)])
          link.send[q] = layout.fifo(out, part, q, steps);
        if (peerRecvViaHost_[static_cast<size_t>(p)].valid())
          link.recv[q] =
              peerRecvViaHost_[static_cast<size_t>(p)].kernelFifo(layout, part, q, steps + 1);
        else if (char* in = peerRecv_[static_cast<size_t>(p)])
          link.recv[q] = layout.fifo(in, part, q, steps + 1);
      }
  return Status::ok();
}

bool CudaDeviceComm::allocMapped(size_t bytes, const RegionLayout* sizesOf, const std::string& what,
                                 SetupFailure* local, MappedRegion* out) {
  // The slot sizes follow the FIFOs, on a line of their own.
  uint32_t perFifo = 0;
  if (sizesOf != nullptr)
    for (int p = 0; p < kNumProtos; ++p) perFifo = std::max(perFifo, sizesOf->nslots[p]);
  const size_t sizesAt = (bytes + kLine - 1) / kLine * kLine;
  const size_t sizesBytes =
      sizesOf != nullptr ? static_cast<size_t>(sizesOf->nchannels) * kNumProtos * perFifo * 4 : 0;
  const size_t total = sizesAt + sizesBytes;
  void* host = nullptr;
  if (!local->cuda(cudaHostAlloc(&host, total, cudaHostAllocMapped | cudaHostAllocPortable),
                   formatString("%s: cudaHostAlloc of %zu bytes", what.c_str(), total)))
    return false;
  hostRegions_.push_back(host);
  // Fresh LL lines must carry no step's flag, and counters start at zero.
  std::memset(host, 0, total);
  void* dev = nullptr;
  if (!local->cuda(cudaHostGetDevicePointer(&dev, host, 0),
                   formatString("%s: cudaHostGetDevicePointer", what.c_str())))
    return false;
  out->host = static_cast<char*>(host);
  out->dev = static_cast<char*>(dev);
  if (sizesOf != nullptr) {
    out->sizesHost = reinterpret_cast<uint32_t*>(out->host + sizesAt);
    out->sizesDev = reinterpret_cast<uint32_t*>(out->dev + sizesAt);
    out->sizesPerFifo = perFifo;
  }
  return true;
}

Status CudaDeviceComm::connectRingViaHost(const DeviceCommSetup& s, int prev, int next,
                                          bool sendVia, bool recvVia, const RegionLayout& layout,
                                          SetupFailure* local) {
  const std::vector<int> from = recvVia ? std::vector<int>{prev} : std::vector<int>{};
  const std::vector<int> to = sendVia ? std::vector<int>{next} : std::vector<int>{};
  for (int c = 0; c < static_cast<int>(layout.nchannels); ++c) {
    for (int p = 0; p < kNumProtos; ++p) {
      HostLinks links;
      CHORUS_TRY(s.connectHost(hostRingChannel(c, p), from, to, &links));
      if (!local->ok()) continue;
      const char* proto = protoName(static_cast<Proto>(p));
      if (sendVia && sendViaHost_.valid()) {
        const Fifo f = sendViaHost_.proxyFifo(layout, c, p);
        if (!local->note(proxy_->addSend(
                f, links.send[static_cast<size_t>(next)],
                formatString("ring channel %d from rank %d to rank %d, %s", c, rank_, next, proto),
                placementOf(sendViaHost_, f, p).get())))
          continue;
      }
      if (recvVia && recvViaHost_.valid()) {
        const Fifo f = recvViaHost_.proxyFifo(layout, c, p);
        local->note(proxy_->addRecv(
            links.recv[static_cast<size_t>(prev)], f, static_cast<Proto>(p),
            formatString("ring channel %d from rank %d to rank %d, %s", c, prev, rank_, proto),
            placementOf(recvViaHost_, f, p).get()));
      }
    }
  }
  return Status::ok();
}

Status CudaDeviceComm::connectDirect(const DeviceCommSetup& s,
                                     const std::vector<DeviceEndpoint>& ends, cudaStream_t setup,
                                     const SetupFailure& local, Comm* host) {
  const int n = s.nranks;
  const DeviceEndpoint& me = ends[static_cast<size_t>(rank_)];
  // Every rank must reach every other rank's GPU memory (one GPU, NVLink, PCIe peers); else,
  // or when turned off, no rank has regions and all-reduce runs on the ring.
  std::string why;
  if (s.directBytes == 0) {
    why = "CHORUS_DEVICE_DIRECT_BUFFSIZE=0";
  } else if (n > kMaxDirectRanks) {
    why = formatString("more than %d ranks", kMaxDirectRanks);
  }
  bool exported = false;
  for (int p = 0; p < n && why.empty(); ++p) {
    if (p == rank_) continue;
    const DeviceEndpoint& peer = ends[static_cast<size_t>(p)];
    for (const DevicePath& path : {chooseDevicePath(*s.topo, me, peer, s.paths),
                                   chooseDevicePath(*s.topo, peer, me, s.paths)})
      if (!isP2p(path.kind) && why.empty())
        why = formatString("rank %d and rank %d have no P2P path (%s)", rank_, p,
                           devicePathName(path.kind));
    exported = exported || peer.pid != me.pid || peer.hostId != me.hostId;
  }
  // What each rank offers: its region, or usable 0.
  SetupFailure failure;
  const uint64_t channelBytes = directChannelBytes(s.directBytes);
  const size_t bytes = allocationBytes(channelBytes * static_cast<uint64_t>(nchannels_), exported);
  std::vector<RegionInfo> infos(static_cast<size_t>(n));  // value-initialised: zeros
  RegionInfo& mine = infos[static_cast<size_t>(rank_)];
  if (why.empty() && local.ok() &&
      failure.cuda(
          cudaMalloc(reinterpret_cast<void**>(&directRegion_), bytes),
          formatString("rank %d: cudaMalloc of %zu bytes of direct buffers", rank_, bytes)) &&
      failure.cuda(cudaMemsetAsync(directRegion_, 0, bytes, setup), "cudaMemsetAsync") &&
      failure.cuda(cudaStreamSynchronize(setup), "cudaStreamSynchronize") &&
      (!exported || failure.cuda(cudaIpcGetMemHandle(&mine.ipc, directRegion_),
                                 formatString("rank %d: cudaIpcGetMemHandle", rank_)))) {
    mine.owner = me;
    mine.address = reinterpret_cast<uint64_t>(directRegion_);
    mine.usable = 1;
  }
  CHORUS_TRY(s.bootstrap->allGather(infos.data(), sizeof(RegionInfo)));
  bool all = true;
  for (const RegionInfo& info : infos) all = all && info.usable != 0;
  directPeers_.assign(static_cast<size_t>(n), nullptr);
  directPeersIpc_.assign(static_cast<size_t>(n), false);
  for (int p = 0; p < n && all; ++p) {
    if (p == rank_) {
      directPeers_[static_cast<size_t>(p)] = directRegion_;
      continue;
    }
    bool ipc = false;
    mapRegion(me, infos[static_cast<size_t>(p)], p, "direct buffers", &failure,
              &directPeers_[static_cast<size_t>(p)], &ipc);
    directPeersIpc_[static_cast<size_t>(p)] = ipc;
  }
  // Direct all-reduce only where every rank mapped every region.
  std::vector<int32_t> mapped(static_cast<size_t>(n), 0);
  mapped[static_cast<size_t>(rank_)] = all && failure.ok() ? 1 : 0;
  CHORUS_TRY(s.bootstrap->allGather(mapped.data(), sizeof(int32_t)));
  bool everywhere = true;
  for (int32_t m : mapped) everywhere = everywhere && m != 0;
  if (!failure.ok())
    LOG_WARN(kSubsysInit, "rank %d: no direct all-reduce on the device: %s", rank_,
             failure.status().message().c_str());
  if (!everywhere) {
    if (why.empty()) why = "a rank could not set up or map the direct buffers";
    directNote_ = "direct all-reduce off: " + why;
    return Status::ok();
  }
  host->directRanks = n;
  host->direct.channelBytes = channelBytes;
  host->direct.bufferBytes = s.directBytes;
  for (int p = 0; p < n; ++p) host->direct.regions[p] = directPeers_[static_cast<size_t>(p)];
  shape_.directBytes = s.directBytes;
  directNote_ = formatString("direct all-reduce over %d ranks (%u-byte buffers)", n, s.directBytes);
  return Status::ok();
}

void CudaDeviceComm::mapRegion(const DeviceEndpoint& me, const RegionInfo& theirs, int owner,
                               const char* what, SetupFailure* local, char** mapped, bool* ipc) {
  const DeviceEndpoint& o = theirs.owner;
  if (o.pid == me.pid && o.hostId == me.hostId) {
    if (o.cudaDev != device_) {
      cudaError_t e = cudaDeviceEnablePeerAccess(o.cudaDev, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) {
        local->cuda(e, formatString("rank %d: cudaDeviceEnablePeerAccess(%d)", rank_, o.cudaDev));
        return;
      }
      cudaGetLastError();
    }
    *mapped = reinterpret_cast<char*>(theirs.address);
    *ipc = false;
    return;
  }
  void* p = nullptr;
  if (local->cuda(
          cudaIpcOpenMemHandle(&p, theirs.ipc, cudaIpcMemLazyEnablePeerAccess),
          formatString("rank %d: cudaIpcOpenMemHandle of rank %d's %s", rank_, owner, what))) {
    *mapped = static_cast<char*>(p);
    *ipc = true;
  }
}

}  // namespace cuda_comm
}  // namespace dev
}  // namespace chorus
