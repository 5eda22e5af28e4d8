// The device communicator on the CUDA runtime. Each rank allocates the receive FIFOs of its
// ring channels in its GPU's memory and describes them to its ring predecessor, which maps them
// (a device pointer within one process, a CUDA IPC handle across processes) and writes into
// them; likewise one receive FIFO per other rank for point-to-point transfers, each in an
// allocation of its own (an IPC handle is opened once, by the one process that writes into it;
// allocations another process maps are whole 2 MiB granules). A rank whose set-up fails still
// takes part in every exchange, and init ends with all ranks agreeing, so none waits for one
// that gave up.
// The steps of each FIFO end and the grid barrier live in the rank's own device memory, the
// abort and error flags in mapped pinned host memory.
#include "cuda/dev_comm_cuda.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <mutex>

namespace chorus {
namespace dev {

namespace cuda_comm {

// The fewest blocks per multiprocessor of any collective kernel, per device, measured when the
// kernels were first loaded there (-1: not yet).
Result<int> loadedKernels(int device) {
  static std::mutex mutex;
  static int blocksPerSm[64];
  static bool initialised = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (!initialised) {
    for (int& b : blocksPerSm) b = -1;
    initialised = true;
  }
  if (device >= 0 && device < 64 && blocksPerSm[device] >= 0) return blocksPerSm[device];
  Result<int> blocks = preloadKernels();
  if (!blocks.isOk()) return blocks.status();
  if (device >= 0 && device < 64) blocksPerSm[device] = blocks.value();
  return blocks.value();
}

void CudaDeviceComm::release() {
  // Frees on this rank's device, whatever the calling thread's current device is.
  int previous = -1;
  if (device_ >= 0 && cudaGetDevice(&previous) == cudaSuccess && previous != device_)
    cudaSetDevice(device_);
  // This communicator's kernels end first (they may still write through the mapping); after an
  // abort they stop at their next poll.
  if (lastLaunch_ != nullptr) {
    if (launched_) cudaEventSynchronize(lastLaunch_);
    cudaEventDestroy(lastLaunch_);
    lastLaunch_ = nullptr;
  }
  // The kernels are done: nothing waits on the proxy's links any more.
  // The last slots the kernels published may still sit in their own FIFOs: forwarded first,
  // unless the communicator was aborted.
  if (proxy_)
    proxy_->stop(std::chrono::seconds(10), [this] {
      return abortHost_ != nullptr && __atomic_load_n(abortHost_, __ATOMIC_ACQUIRE) != 0;
    });
  proxy_.reset();
  if (sendRegion_ != nullptr && sendRegionIpc_) cudaIpcCloseMemHandle(sendRegion_);
  sendRegion_ = nullptr;
  for (size_t r = 0; r < peerSend_.size(); ++r)
    if (peerSend_[r] != nullptr && peerSendIpc_[r]) cudaIpcCloseMemHandle(peerSend_[r]);
  for (size_t r = 0; r < directPeers_.size(); ++r)
    if (directPeers_[r] != nullptr && directPeersIpc_[r]) cudaIpcCloseMemHandle(directPeers_[r]);
  directPeers_.clear();
  if (directRegion_ != nullptr) cudaFree(directRegion_);
  directRegion_ = nullptr;
  peerSend_.clear();
  for (size_t r = 0; r < peerRecv_.size(); ++r)
    if (peerRecv_[r] != nullptr && !(r < peerRecvViaHost_.size() && peerRecvViaHost_[r].valid()))
      cudaFree(peerRecv_[r]);
  peerRecv_.clear();
  peerRecvViaHost_.clear();
  peerSendViaHost_.clear();
  if (recvViaHost_.valid()) recvRegion_ = nullptr;  // host memory, freed below
  recvViaHost_ = MappedRegion();
  sendViaHost_ = MappedRegion();
  for (void* p : {static_cast<void*>(recvRegion_), static_cast<void*>(state_),
                  static_cast<void*>(ringRanksDev_), static_cast<void*>(commDev_),
                  static_cast<void*>(peerState_), static_cast<void*>(peersDev_)})
    if (p != nullptr) cudaFree(p);
  peerState_ = nullptr;
  peersDev_ = nullptr;
  recvRegion_ = nullptr;
  state_ = nullptr;
  ringRanksDev_ = nullptr;
  commDev_ = nullptr;
  for (void* p : hostRegions_) cudaFreeHost(p);
  hostRegions_.clear();
  // The network let go of placed slots when the proxy stopped.
  for (const auto& g : gpuSlotRegions_) {
    if (g.second >= 0) close(g.second);
    cudaFree(g.first);
  }
  gpuSlotRegions_.clear();
  gdr_.clear();
  if (abortHost_ != nullptr) cudaFreeHost(abortHost_);
  abortHost_ = nullptr;
  errorHost_ = nullptr;
  cudaGetLastError();
  if (previous >= 0 && previous != device_) cudaSetDevice(previous);
}

Status CudaDeviceComm::init(const DeviceCommSetup& s) {
  rank_ = s.rank;
  shape_ = s.shape;
  nchannels_ = std::max(1, std::min(s.nchannels, kMaxChannels));
  nthreads_ = s.nthreads;
  shape_.nchannels = nchannels_;
  // A local failure does not end init at once: the peers wait on this rank's part of the
  // exchanges below, so it still takes part in them (telling its peers it has nothing to
  // offer), and at the end every rank learns whether all succeeded. No rank waits for one that
  // gave up; each fails, naming the rank that could not go on.
  SetupFailure local;
  for (int p = 0; p < kNumProtos && local.ok(); ++p)
    if (s.slotBytes[p] < 256 || s.slotBytes[p] % 16 != 0 || s.nslots[p] < 2)
      local.note(invalidArgument(
          "rank %d: device FIFO slots of %u bytes x %u (%s) are not usable: slots hold whole "
          "16-byte lines, at least 256 bytes, and a FIFO at least 2 of them",
          rank_, s.slotBytes[p], s.nslots[p], protoName(static_cast<Proto>(p))));
  Result<int> dev = currentDevice();
  if (local.note(dev.status())) device_ = dev.value();
  int blocksPerSm = 0;
  char bus[32] = {};
  if (local.ok()) {
    Result<int> loaded = loadedKernels(device_);
    if (local.note(loaded.status().withContext(formatString("rank %d", rank_))))
      blocksPerSm = loaded.value();
  }
  if (local.ok())
    local.cuda(cudaEventCreateWithFlags(&lastLaunch_, cudaEventDisableTiming),
               "cudaEventCreateWithFlags") &&
        local.cuda(cudaDeviceGetPCIBusId(bus, sizeof bus, device_),
                   formatString("rank %d: cudaDeviceGetPCIBusId(%d)", rank_, device_));
  if (local.ok() && s.gpuFound) s.gpuFound(normalizePciBusId(bus));

  // Who is where: every rank's GPU, for the transport to each ring neighbour; and whether
  // every rank got this far (all stop here, alike, if one did not).
  // The settings every rank must share: the links each rank builds, and the exchanges they
  // take, follow from them.
  struct Settings {
    int32_t nchannels;
    uint32_t nslots[kNumProtos];
    uint32_t slotBytes[kNumProtos];
    int32_t hostLinks, p2pDisabled, shmDisabled, p2pLevel;
    uint32_t directBytes;
  };
  struct Arrival {
    DeviceEndpoint end;
    SetupVerdict verdict;
    Settings settings;
  };
  std::vector<Arrival> arrivals(static_cast<size_t>(s.nranks));
  Arrival& mine = arrivals[static_cast<size_t>(rank_)];
  mine.end = makeDeviceEndpoint(s.hostId, getpid(), device_, bus);
  mine.verdict = local.verdict();
  std::memset(&mine.settings, 0, sizeof mine.settings);
  mine.settings.nchannels = nchannels_;
  for (int p = 0; p < kNumProtos; ++p) {
    mine.settings.nslots[p] = s.nslots[p];
    mine.settings.slotBytes[p] = s.slotBytes[p];
  }
  mine.settings.hostLinks = s.paths.hostLinks ? 1 : 0;
  mine.settings.p2pDisabled = s.paths.p2pDisabled ? 1 : 0;
  mine.settings.shmDisabled = s.paths.shmDisabled ? 1 : 0;
  mine.settings.p2pLevel = static_cast<int32_t>(s.paths.p2pLevel);
  mine.settings.directBytes = s.directBytes;
  CHORUS_TRY(s.bootstrap->allGather(arrivals.data(), sizeof(Arrival)));
  if (!local.ok()) return local.status();
  for (int r = 0; r < s.nranks; ++r)
    CHORUS_TRY(arrivals[static_cast<size_t>(r)].verdict.check(rank_, r));
  // Every rank compares every rank's settings with rank 0's, so all fail alike.
  for (int r = 1; r < s.nranks; ++r)
    if (std::memcmp(&arrivals[static_cast<size_t>(r)].settings, &arrivals[0].settings,
                    sizeof(Settings)) != 0)
      return invalidUsage(
          "rank %d: rank %d's device settings differ from rank 0's (CHORUS_DEVICE_CHANNELS, "
          "CHORUS_BUFFSIZE, CHORUS_STEPS, CHORUS_DEVICE_HOST_LINKS, "
          "CHORUS_DEVICE_DIRECT_BUFFSIZE, P2P_DISABLE, SHM_DISABLE or P2P_LEVEL); set them "
          "alike on every rank",
          rank_, r);
  std::vector<DeviceEndpoint> ends(static_cast<size_t>(s.nranks));
  for (int r = 0; r < s.nranks; ++r)
    ends[static_cast<size_t>(r)] = arrivals[static_cast<size_t>(r)].end;
  const DeviceEndpoint& me = ends[static_cast<size_t>(rank_)];
  // Ranks of this process on this GPU run their kernels at the same time and wait on each
  // other: all their blocks must fit on the GPU at once.
  int sameGpuHere = 0;
  for (int r = 0; r < s.nranks; ++r)
    if (ends[static_cast<size_t>(r)].pid == me.pid &&
        ends[static_cast<size_t>(r)].hostId == me.hostId &&
        std::strncmp(ends[static_cast<size_t>(r)].busId, me.busId, sizeof me.busId) == 0)
      ++sameGpuHere;
  sharesGpuInProcess_ = sameGpuHere > 1;
  int sms = 0;
  if (local.ok())
    local.cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
               "cudaDeviceGetAttribute");
  const int resident = blocksPerSm * sms;
  // A collective runs a block per channel, a group's sends and receives a block per part of
  // a transfer, for up to kP2pDistancesPerLaunch distances at once.
  const int p2pBlocks =
      s.nranks > 1 ? 2 * kP2pParts * std::min(s.nranks, kP2pDistancesPerLaunch) : 1;
  const int blocksEach = std::max(nchannels_, p2pBlocks);
  if (local.ok() && resident < sameGpuHere * blocksEach)
    local.note(invalidUsage(
        "rank %d: %d ranks of this process share GPU %d and each runs up to %d blocks at once "
        "(%d channels, up to %d for sends and receives), but the GPU holds only %d "
        "collective-kernel blocks at once (%d per multiprocessor x %d); use fewer ranks per GPU%s",
        rank_, sameGpuHere, device_, blocksEach, nchannels_, p2pBlocks, resident, blocksPerSm, sms,
        nchannels_ > p2pBlocks ? " or lower CHORUS_DEVICE_CHANNELS" : ""));

  const std::vector<int>& ring = *s.ringRanks;
  ringRanks_.assign(ring.begin(), ring.end());
  const int n = s.nranks;
  const int pos = static_cast<int>(std::find(ring.begin(), ring.end(), rank_) - ring.begin());
  const int next = ring[static_cast<size_t>((pos + 1) % n)];
  const int prev = ring[static_cast<size_t>((pos + n - 1) % n)];

  // Flags the host raises and the kernels report through.
  void* abortDev = nullptr;
  void* errorDev = nullptr;
  if (local.cuda(cudaHostAlloc(reinterpret_cast<void**>(&abortHost_), 2 * kLine,
                               cudaHostAllocMapped | cudaHostAllocPortable),
                 formatString("rank %d: cudaHostAlloc of the abort flag", rank_))) {
    std::memset(abortHost_, 0, 2 * kLine);
    errorHost_ = abortHost_ + kLine / sizeof(uint32_t);
    local.cuda(cudaHostGetDevicePointer(&abortDev, abortHost_, 0), "cudaHostGetDevicePointer") &&
        local.cuda(cudaHostGetDevicePointer(&errorDev, errorHost_, 0), "cudaHostGetDevicePointer");
  }

  RegionLayout layout;
  layout.nchannels = static_cast<uint32_t>(nchannels_);
  for (int p = 0; p < kNumProtos; ++p) {
    layout.nslots[p] = s.nslots[p];
    layout.slotBytes[p] = s.slotBytes[p];
  }
  // Per channel and protocol: send step, receive step; then the barrier.
  const size_t stateWords = static_cast<size_t>(nchannels_) * kNumProtos * 2 + 1;
  // Set-up copies go through a stream of their own: no wait for the device's other work (a
  // peer's kernel may be waiting for this very rank), and done before any kernel runs.
  cudaStream_t setup = nullptr;
  local.cuda(cudaStreamCreateWithFlags(&setup, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  } setupGuard{setup};
  if (local.ok() &&
      local.cuda(cudaMalloc(reinterpret_cast<void**>(&state_), stateWords * sizeof(uint64_t)),
                 formatString("rank %d: cudaMalloc of the FIFO state", rank_)))
    local.cuda(cudaMemsetAsync(state_, 0, stateWords * sizeof(uint64_t), setup), "cudaMemsetAsync");
  if (n > 1) {
    proxy_.reset(new DeviceProxy([this](const Status& e) { proxyFailed(e); },
                                 [this] { return kernelsInFlight(); }));
    const DevicePath toNext =
        chooseDevicePath(*s.topo, me, ends[static_cast<size_t>(next)], s.paths);
    const DevicePath fromPrev =
        chooseDevicePath(*s.topo, ends[static_cast<size_t>(prev)], me, s.paths);
    // Links without a P2P path go through host memory and the proxies.
    const bool sendVia = !isP2p(toNext.kind) && s.connectHost;
    const bool recvVia = !isP2p(fromPrev.kind) && s.connectHost;
    for (const DevicePath* path : {&toNext, &fromPrev}) {
      if (!isP2p(path->kind) && !s.connectHost) {
        local.note(invalidUsage(
            "rank %d: the ring needs the %s device transport to rank %d (%s), and this "
            "communicator has no host transports for it",
            rank_, devicePathName(path->kind), path == &toNext ? next : prev,
            path->reason.c_str()));
      } else if (path->crossContext) {
        warnCrossContext();
      }
    }
    // An IPC handle only for a predecessor in another process (IPC is missing on some
    // platforms where threads of one process still work).
    const DeviceEndpoint& before = ends[static_cast<size_t>(prev)];
    const bool exported = !recvVia && (before.pid != me.pid || before.hostId != me.hostId);
    const size_t regionBytes = allocationBytes(layout.totalBytes(), exported);
    if (recvVia) {
      const std::string what = formatString("rank %d: receive FIFOs from rank %d", rank_, prev);
      if (local.ok() && allocMapped(layout.totalBytes(), nullptr, what, &local, &recvViaHost_)) {
        recvRegion_ = recvViaHost_.dev;
        gpuSlots(gdrFor(s, prev, &local), false, layout, what, &recvViaHost_);
      }
    } else if (local.ok() &&
               local.cuda(cudaMalloc(reinterpret_cast<void**>(&recvRegion_), regionBytes),
                          formatString("rank %d: cudaMalloc of %zu bytes of receive FIFOs", rank_,
                                       regionBytes))) {
      // Fresh LL lines must carry no step's flag, and counters start at zero.
      local.cuda(cudaMemsetAsync(recvRegion_, 0, regionBytes, setup), "cudaMemsetAsync") &&
          local.cuda(cudaStreamSynchronize(setup), "cudaStreamSynchronize");
    }
    const std::string sendWhat = formatString("rank %d: send FIFOs to rank %d", rank_, next);
    if (sendVia && local.ok() &&
        allocMapped(layout.totalBytes(), &layout, sendWhat, &local, &sendViaHost_)) {
      sendRegion_ = sendViaHost_.dev;
      gpuSlots(gdrFor(s, next, &local), true, layout, sendWhat, &sendViaHost_);
    }

    RegionInfo mine{};
    mine.owner = me;
    mine.layout = layout;
    mine.address = reinterpret_cast<uint64_t>(recvRegion_);
    mine.viaHost = recvVia ? 1 : 0;
    if (local.ok() && exported)
      local.cuda(cudaIpcGetMemHandle(&mine.ipc, recvRegion_),
                 formatString("rank %d: cudaIpcGetMemHandle", rank_));
    mine.usable = local.ok() ? 1 : 0;
    RegionInfo theirs;
    CHORUS_TRY(s.bootstrap->send(prev, kTagDeviceRing, &mine, sizeof mine));
    CHORUS_TRY(s.bootstrap->recv(next, kTagDeviceRing, &theirs, sizeof theirs));
    if (local.ok() && theirs.usable != 0) {
      if (!(theirs.layout == layout))
        local.note(invalidUsage(
            "rank %d: rank %d uses other device FIFO sizes (channels, CHORUS_BUFFSIZE or "
            "CHORUS_STEPS differ between the ranks); set them alike on every rank",
            rank_, next));
      else if ((theirs.viaHost != 0) != sendVia)
        local.note(internalError(
            "rank %d: rank %d and this rank disagree on whether the ring link between them "
            "goes through host memory (their topologies differ)",
            rank_, next));
      else if (!sendVia)
        mapRegion(me, theirs, next, "FIFOs", &local, &sendRegion_, &sendRegionIpc_);
    }
    // Every rank takes part, whatever its own set-up did: the peers wait for it.
    if (sendVia || recvVia)
      CHORUS_TRY(connectRingViaHost(s, prev, next, sendVia, recvVia, layout, &local));
    description_ = formatString("rank %d (GPU %d): to rank %d %s (%s), from rank %d %s", rank_,
                                device_, next, devicePathName(toNext.kind), toNext.reason.c_str(),
                                prev, devicePathName(fromPrev.kind));
    RegionLayout linkLayout = layout;
    linkLayout.nchannels = kP2pParts;
    treeChannels_ = std::min(nchannels_, kMaxTreeChannels);
    rdChannels_ = std::min(nchannels_, kMaxRdChannels);
    CHORUS_TRY(connectPeers(s, ends, linkLayout, treeChannels_, rdChannels_, setup, &local));
  } else {
    description_ = formatString("rank %d (GPU %d): alone", rank_, device_);
  }

  Comm host;
  host.rank = rank_;
  host.nranks = n;
  host.ringIndex = pos;
  host.nchannels = nchannels_;
  host.abortFlag = static_cast<const volatile uint32_t*>(abortDev);
  host.errorFlag = static_cast<uint32_t*>(errorDev);
  if (n > 1) CHORUS_TRY(connectDirect(s, ends, setup, local, &host));
  if (local.ok()) {
    host.barrier = state_ + stateWords - 1;
    for (int c = 0; c < nchannels_ && n > 1; ++c)
      for (int p = 0; p < kNumProtos; ++p) {
        uint64_t* steps = state_ + (static_cast<size_t>(c) * kNumProtos + p) * 2;
        host.channels[c].send[p] = sendViaHost_.valid()
                                       ? sendViaHost_.kernelFifo(layout, c, p, steps)
                                       : layout.fifo(sendRegion_, c, p, steps);
        host.channels[c].recv[p] = recvViaHost_.valid()
                                       ? recvViaHost_.kernelFifo(layout, c, p, steps + 1)
                                       : layout.fifo(recvRegion_, c, p, steps + 1);
      }
    if (local.cuda(cudaMalloc(reinterpret_cast<void**>(&ringRanksDev_), sizeof(int32_t) * n),
                   "cudaMalloc") &&
        local.cuda(cudaMemcpyAsync(ringRanksDev_, ringRanks_.data(), sizeof(int32_t) * n,
                                   cudaMemcpyHostToDevice, setup),
                   "cudaMemcpyAsync"))
      host.ringRanks = ringRanksDev_;
  }
  if (local.ok() && n > 1 &&
      local.cuda(
          cudaMalloc(reinterpret_cast<void**>(&peersDev_), sizeof(Channel) * peersHost_.size()),
          "cudaMalloc") &&
      local.cuda(cudaMemcpyAsync(peersDev_, peersHost_.data(), sizeof(Channel) * peersHost_.size(),
                                 cudaMemcpyHostToDevice, setup),
                 "cudaMemcpyAsync")) {
    host.peers = peersDev_;
    host.p2pParts = kP2pParts;
    host.peerLinks = kP2pParts + 2 * treeChannels_ + rdChannels_;
    host.treeChannels = treeChannels_;
    for (int t = 0; t < kDevTrees; ++t) host.trees[t] = devTreeNode(n, rank_, t);
    host.rdChannels = rdChannels_;
  }
  if (local.ok() &&
      local.cuda(cudaMalloc(reinterpret_cast<void**>(&commDev_), sizeof(Comm)), "cudaMalloc"))
    local.cuda(cudaMemcpyAsync(commDev_, &host, sizeof(Comm), cudaMemcpyHostToDevice, setup),
               "cudaMemcpyAsync") &&
        local.cuda(cudaStreamSynchronize(setup), "cudaStreamSynchronize");
  // The agreement is also the barrier after which kernels run: every rank has mapped its
  // successor's FIFOs before any kernel writes into them.
  if (n > 1) CHORUS_TRY(agree(s, local));
  if (!local.ok()) return local.status();
  shape_.ringRanks = ringRanks_.data();
  shape_.nranks = n;
  shape_.p2pParts = kP2pParts;
  // The tree and recursive doubling where every pair they use is linked (a missing link
  // refuses the point-to-point transfers on every rank alike, and these with them).
  shape_.treeChannels = p2pRefusal_.empty() ? treeChannels_ : 0;
  shape_.rdChannels = p2pRefusal_.empty() ? rdChannels_ : 0;
  if (proxy_ && proxy_->links() > 0) {
    proxy_->start();
    description_ += formatString("; %zu FIFOs through host memory", proxy_->links());
  } else {
    proxy_.reset();  // every link is P2P: nothing to drive
  }
  if (!directNote_.empty()) description_ += "; " + directNote_;
  LOG_INFO(kSubsysInit, "%s; %d channels", description_.c_str(), nchannels_);
  return Status::ok();
}

Status CudaDeviceComm::agree(const DeviceCommSetup& s, const SetupFailure& local) {
  const int n = s.nranks;
  // Whether every rank got this far, and which point-to-point links into it are missing.
  std::vector<SetupVerdict> verdicts(static_cast<size_t>(n));
  SetupVerdict& mine = verdicts[static_cast<size_t>(rank_)];
  mine = local.verdict();
  for (int p = 0; p < n && local.ok() && mine.noLinkFrom < 0; ++p)
    if (!noRecvLink_[static_cast<size_t>(p)].empty()) {
      mine.noLinkFrom = p;
      snprintf(mine.reason, sizeof mine.reason, "%s", noRecvLink_[static_cast<size_t>(p)].c_str());
    }
  CHORUS_TRY(s.bootstrap->allGather(verdicts.data(), sizeof(SetupVerdict)));
  if (!local.ok()) return Status::ok();  // the caller returns its own failure
  for (int r = 0; r < n; ++r) CHORUS_TRY(verdicts[static_cast<size_t>(r)].check(rank_, r));
  // One missing link anywhere and no rank runs device sends and receives between ranks: the
  // transfers of a group involve ranks that cannot know what the others were refused, so they
  // are refused alike everywhere rather than leave some waiting.
  for (int r = 0; r < n && p2pRefusal_.empty(); ++r) {
    const SetupVerdict& v = verdicts[static_cast<size_t>(r)];
    if (v.noLinkFrom >= 0)
      p2pRefusal_ =
          formatString("rank %d to rank %d has no P2P link (%s)", v.noLinkFrom, r, v.reason);
  }
  if (!p2pRefusal_.empty())
    LOG_WARN(kSubsysInit,
             "rank %d: device sends and receives between ranks will be refused: %s, and this "
             "communicator has no host transports for device links",
             rank_, p2pRefusal_.c_str());
  return Status::ok();
}

template <class Body>
Status CudaDeviceComm::ordered(void* stream, Body body) {
  int previous = -1;
  CHORUS_CUDA_TRY(cudaGetDevice(&previous), "cudaGetDevice");
  if (previous != device_) CHORUS_CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
  // Kernels of this communicator run one after another, also across streams. A stream being
  // captured into a graph is not joined to launches outside it: the graph's launches are
  // ordered when it is replayed, as with NCCL.
  auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  Status result = Status::ok();
  cudaError_t err = cudaStreamIsCapturing(s, &capture);
  if (err != cudaSuccess) result = cudaFailure(err, "cudaStreamIsCapturing");
  const bool inOrder = result.isOk() && capture == cudaStreamCaptureStatusNone;
  if (inOrder && launched_ && stream != lastStream_) {
    err = cudaStreamWaitEvent(s, lastLaunch_, 0);
    if (err != cudaSuccess) result = cudaFailure(err, "cudaStreamWaitEvent");
  }
  if (result.isOk()) result = body(s);
  // Links through host memory have new work: the proxy looks at once.
  if (result.isOk() && proxy_) proxy_->kick();
  if (result.isOk() && inOrder) {
    err = cudaEventRecord(lastLaunch_, s);
    if (err != cudaSuccess) {
      result = cudaFailure(err, "cudaEventRecord");
    } else {
      __atomic_store_n(&launched_, true, __ATOMIC_RELEASE);
      lastStream_ = stream;
    }
  }
  if (previous != device_) cudaSetDevice(previous);
  return result;
}

Status CudaDeviceComm::launchAll(const std::vector<Launch>& launches, void* stream) {
  if (launches.empty()) return Status::ok();
  return ordered(stream, [&](cudaStream_t) {
    Status result = Status::ok();
    for (const Launch& l : launches) {
      result = launchOnStream(l, l.p2p != 0 ? l.nworks : nchannels_, nthreads_, stream);
      if (!result.isOk()) break;
    }
    return result;
  });
}

Status CudaDeviceComm::enqueueAlone(const DeviceCall* calls, size_t n, void* stream) {
  // Every collective of one rank is out = op(in) over count elements; only PreMulSum changes
  // the values (the sum, product, extremes and average of one value are that value).
  bool anyWork = false;
  for (size_t i = 0; i < n && !anyWork; ++i)
    anyWork = calls[i].count > 0 &&
              (calls[i].sendbuff != calls[i].recvbuff || calls[i].op.kind == RedKind::kPreMulSum);
  if (!anyWork) return Status::ok();
  return ordered(stream, [&](cudaStream_t s) {
    for (size_t i = 0; i < n; ++i) {
      const DeviceCall& c = calls[i];
      if (c.count == 0) continue;
      const bool copyOnly = c.coll == Collective::kAllGather || c.coll == Collective::kBroadcast ||
                            c.op.kind != RedKind::kPreMulSum;
      if (copyOnly) {
        if (c.sendbuff == c.recvbuff) continue;
        cudaError_t err = cudaMemcpyAsync(c.recvbuff, c.sendbuff, deviceCallBytes(c, 1),
                                          cudaMemcpyDeviceToDevice, s);
        if (err != cudaSuccess) return cudaFailure(err, "cudaMemcpyAsync");
        continue;
      }
      std::vector<Launch> launches;
      CHORUS_TRY(encodeLaunches(shape_, commDev_, &c, 1, &launches));
      for (const Launch& l : launches) CHORUS_TRY(launchOnStream(l, nchannels_, nthreads_, s));
    }
    return Status::ok();
  });
}

Status CudaDeviceComm::checkStream(void* stream) const {
  if (proxy_) {
    const std::string closed = proxy_->closedLink();
    if (!closed.empty())
      return remoteError(
          "rank %d: %s (the peer destroyed its communicator or exited): this communicator "
          "cannot run more work",
          rank_, closed.c_str());
  }
  if (sharesGpuInProcess_ && (stream == nullptr || stream == cudaStreamLegacy))
    return invalidUsage(
        "rank %d: ranks that share GPU %d in one process need a stream each "
        "(cudaStreamCreate): on the legacy default stream their kernels run one after "
        "another, and each waits for the others",
        rank_, device_);
  return Status::ok();
}

Status CudaDeviceComm::enqueue(const DeviceCall* calls, size_t n, void* stream) {
  CHORUS_TRY(checkStream(stream));
  if (shape_.nranks == 1) return enqueueAlone(calls, n, stream);
  std::vector<Launch> launches;
  CHORUS_TRY(encodeLaunches(shape_, commDev_, calls, n, &launches));
  return launchAll(launches, stream);
}

Status CudaDeviceComm::enqueueP2p(const DeviceP2p* ops, size_t n, void* stream) {
  CHORUS_TRY(checkStream(stream));
  for (size_t i = 0; i < n && !p2pRefusal_.empty(); ++i) {
    const DeviceP2p& op = ops[i];
    if (op.peer < 0 || op.peer >= shape_.nranks || op.peer == rank_ || op.bytes == 0) continue;
    return invalidUsage(
        "rank %d: %s rank %d: this communicator runs no device sends and receives between "
        "ranks, since %s, and it has no host transports for device links",
        rank_, op.isSend ? "ncclSend to" : "ncclRecv from", op.peer, p2pRefusal_.c_str());
  }
  // Sends that overlap receives of the group are read from a copy taken first, in
  // stream-ordered memory (cudaMallocAsync), which a CUDA graph may capture.
  std::vector<size_t> stageAt;
  const size_t stageBytes = planSendCopies(ops, n, &stageAt);
  if (stageBytes == 0) {
    std::vector<Launch> launches;
    CHORUS_TRY(encodeP2pLaunches(shape_, commDev_, rank_, ops, n, &launches));
    return launchAll(launches, stream);
  }
  std::vector<DeviceP2p> staged(ops, ops + n);
  return ordered(stream, [&](cudaStream_t s) {
    char* copy = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&copy), stageBytes, s);
    if (err != cudaSuccess)
      return cudaFailure(err, formatString("rank %d: cudaMallocAsync of %zu bytes for the sends "
                                           "that overlap receives of the group",
                                           rank_, stageBytes));
    Status result = Status::ok();
    for (size_t i = 0; i < n && result.isOk(); ++i) {
      if (stageAt[i] == SIZE_MAX) continue;
      err = cudaMemcpyAsync(copy + stageAt[i], ops[i].sendbuff, ops[i].bytes,
                            cudaMemcpyDeviceToDevice, s);
      if (err != cudaSuccess) result = cudaFailure(err, "cudaMemcpyAsync");
      staged[i].sendbuff = copy + stageAt[i];
    }
    std::vector<Launch> launches;
    if (result.isOk())
      result = encodeP2pLaunches(shape_, commDev_, rank_, staged.data(), n, &launches);
    for (size_t i = 0; i < launches.size() && result.isOk(); ++i)
      result = launchOnStream(launches[i], launches[i].nworks, nthreads_, s);
    err = cudaFreeAsync(copy, s);
    if (result.isOk() && err != cudaSuccess) result = cudaFailure(err, "cudaFreeAsync");
    return result;
  });
}

}  // namespace cuda_comm

using cuda_comm::CudaDeviceComm;
using cuda_comm::cudaFailure;

bool cudaBuilt() {
  return true;
}

Result<int> usableDevices() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return cudaFailure(err, "no usable CUDA device: cudaGetDeviceCount");
  }
  if (count < 1) return invalidUsage("no usable CUDA device: cudaGetDeviceCount reports none");
  return count;
}

Result<int> currentDevice() {
  Result<int> count = usableDevices();
  if (!count.isOk()) return count.status();
  int device = -1;
  CHORUS_CUDA_TRY(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

Status setCurrentDevice(int device) {
  CHORUS_CUDA_TRY(cudaSetDevice(device), formatString("cudaSetDevice(%d)", device));
  return Status::ok();
}

Result<std::unique_ptr<DeviceComm>> DeviceComm::create(const DeviceCommSetup& setup) {
  std::unique_ptr<CudaDeviceComm> c(new CudaDeviceComm());
  Status s = c->init(setup);
  if (!s.isOk()) return s;
  return std::unique_ptr<DeviceComm>(c.release());
}

}  // namespace dev
}  // namespace chorus
