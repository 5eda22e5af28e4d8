// The device communicator on the CUDA runtime. Each rank allocates the receive FIFOs of its
// ring channels in its GPU's memory and describes them to its ring predecessor, which maps them
// (a device pointer within one process, a CUDA IPC handle across processes) and writes into
// them; likewise one receive FIFO per other rank for point-to-point transfers, each in an
// allocation of its own (an IPC handle is opened once, by the one process that writes into it).
// The steps of each FIFO end and the grid barrier live in the rank's own device memory, the
// abort and error flags in mapped pinned host memory.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "cuda/dev_comm.h"
#include "cuda/dev_launch.h"

namespace chorus {
namespace dev {

namespace {

constexpr int kTagDeviceRing = 2000;
constexpr int kTagDeviceP2p = 2001;
constexpr size_t kLine = 128;  // counters each on a line of their own

Status cudaFailure(cudaError_t err, const std::string& what) {
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
};

// What a rank tells each other rank about its receive FIFO for that rank's sends: the region,
// or why there is none (the receiver decides, so both ends agree).
struct P2pLinkInfo {
  RegionInfo region;
  int32_t linked;
  char reason[160];
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
  // The point-to-point links to every other rank; fills peersHost_.
  Status connectPeers(const DeviceCommSetup& s, const std::vector<DeviceEndpoint>& ends,
                      const RegionLayout& layout, cudaStream_t setup);
  Status checkStream(void* stream) const;
  // Queues launches on stream, after this communicator's earlier ones.
  Status launchAll(const std::vector<Launch>& launches, void* stream);

  int rank_ = 0;
  int device_ = -1;
  int nchannels_ = 1;
  bool sharesGpuInProcess_ = false;
  DeviceShape shape_;
  std::vector<int32_t> ringRanks_;
  char* recvRegion_ = nullptr;  // this rank's receive FIFOs (device memory)
  char* sendRegion_ = nullptr;  // the ring successor's receive FIFOs, mapped
  bool sendRegionIpc_ = false;  // opened from an IPC handle (closed at the end)
  uint64_t* state_ = nullptr;   // FIFO ends' steps and the grid barrier (device memory)
  int32_t* ringRanksDev_ = nullptr;
  Comm* commDev_ = nullptr;
  // Point-to-point, by rank: this rank's receive FIFO from it, the mapping of its receive FIFO
  // for this rank's sends, and why a direction has no link (empty: linked).
  std::vector<char*> peerRecv_;
  std::vector<char*> peerSend_;
  std::vector<bool> peerSendIpc_;
  std::vector<std::string> noSendLink_;
  std::vector<std::string> noRecvLink_;
  std::vector<Channel> peersHost_;
  uint64_t* peerState_ = nullptr;  // steps of both ends, per peer and protocol
  Channel* peersDev_ = nullptr;
  uint32_t* abortHost_ = nullptr;  // mapped pinned host memory
  uint32_t* errorHost_ = nullptr;
  // Recorded after this communicator's last launch: a launch on another stream waits for it,
  // since consecutive kernels continue each other's FIFO positions.
  cudaEvent_t lastLaunch_ = nullptr;
  void* lastStream_ = nullptr;
  bool launched_ = false;
  std::string description_;
};

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
  if (sendRegion_ != nullptr && sendRegionIpc_) cudaIpcCloseMemHandle(sendRegion_);
  sendRegion_ = nullptr;
  for (size_t r = 0; r < peerSend_.size(); ++r)
    if (peerSend_[r] != nullptr && peerSendIpc_[r]) cudaIpcCloseMemHandle(peerSend_[r]);
  peerSend_.clear();
  for (char* p : peerRecv_)
    if (p != nullptr) cudaFree(p);
  peerRecv_.clear();
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
  shape_.nchannels = nchannels_;
  for (int p = 0; p < kNumProtos; ++p)
    if (s.slotBytes[p] < 256 || s.slotBytes[p] % 16 != 0 || s.nslots[p] < 2)
      return invalidArgument(
          "rank %d: device FIFO slots of %u bytes x %u (%s) are not usable: slots hold whole "
          "16-byte lines, at least 256 bytes, and a FIFO at least 2 of them",
          rank_, s.slotBytes[p], s.nslots[p], protoName(static_cast<Proto>(p)));
  Result<int> dev = currentDevice();
  if (!dev.isOk()) return dev.status();
  device_ = dev.value();
  Result<int> blocksPerSm = loadedKernels(device_);
  if (!blocksPerSm.isOk()) return blocksPerSm.status().withContext(formatString("rank %d", rank_));
  CHORUS_CUDA_TRY(cudaEventCreateWithFlags(&lastLaunch_, cudaEventDisableTiming),
                  "cudaEventCreateWithFlags");

  // Who is where: every rank's GPU, for the transport to each ring neighbour.
  char bus[32] = {};
  CHORUS_CUDA_TRY(cudaDeviceGetPCIBusId(bus, sizeof bus, device_),
                  formatString("rank %d: cudaDeviceGetPCIBusId(%d)", rank_, device_));
  std::vector<DeviceEndpoint> ends(static_cast<size_t>(s.nranks));
  ends[static_cast<size_t>(rank_)] = makeDeviceEndpoint(s.hostId, getpid(), device_, bus);
  CHORUS_TRY(s.bootstrap->allGather(ends.data(), sizeof(DeviceEndpoint)));
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
  CHORUS_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_),
                  "cudaDeviceGetAttribute");
  const int resident = blocksPerSm.value() * sms;
  // A collective runs a block per channel, a group's sends and receives up to a block each.
  const int blocksEach = std::max(nchannels_, s.nranks > 1 ? kMaxLaunchWorks : 1);
  if (resident < sameGpuHere * blocksEach)
    return invalidUsage(
        "rank %d: %d ranks of this process share GPU %d and each runs up to %d blocks at once "
        "(%d channels, up to %d for sends and receives), but the GPU holds only %d "
        "collective-kernel blocks at once (%d per multiprocessor x %d); use fewer ranks per GPU%s",
        rank_, sameGpuHere, device_, blocksEach, nchannels_, kMaxLaunchWorks, resident,
        blocksPerSm.value(), sms,
        nchannels_ > kMaxLaunchWorks ? " or lower CHORUS_DEVICE_CHANNELS" : "");

  const std::vector<int>& ring = *s.ringRanks;
  ringRanks_.assign(ring.begin(), ring.end());
  const int n = s.nranks;
  const int pos = static_cast<int>(std::find(ring.begin(), ring.end(), rank_) - ring.begin());
  const int next = ring[static_cast<size_t>((pos + 1) % n)];
  const int prev = ring[static_cast<size_t>((pos + n - 1) % n)];

  // Flags the host raises and the kernels report through.
  CHORUS_CUDA_TRY(cudaHostAlloc(reinterpret_cast<void**>(&abortHost_), 2 * kLine,
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  formatString("rank %d: cudaHostAlloc of the abort flag", rank_));
  std::memset(abortHost_, 0, 2 * kLine);
  errorHost_ = abortHost_ + kLine / sizeof(uint32_t);
  void* abortDev = nullptr;
  void* errorDev = nullptr;
  CHORUS_CUDA_TRY(cudaHostGetDevicePointer(&abortDev, abortHost_, 0), "cudaHostGetDevicePointer");
  CHORUS_CUDA_TRY(cudaHostGetDevicePointer(&errorDev, errorHost_, 0), "cudaHostGetDevicePointer");

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
  CHORUS_CUDA_TRY(cudaStreamCreateWithFlags(&setup, cudaStreamNonBlocking),
                  "cudaStreamCreateWithFlags");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { cudaStreamDestroy(s); }
  } setupGuard{setup};
  CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&state_), stateWords * sizeof(uint64_t)),
                  formatString("rank %d: cudaMalloc of the FIFO state", rank_));
  CHORUS_CUDA_TRY(cudaMemsetAsync(state_, 0, stateWords * sizeof(uint64_t), setup),
                  "cudaMemsetAsync");
  if (n > 1) {
    CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&recvRegion_), layout.totalBytes()),
                    formatString("rank %d: cudaMalloc of %zu bytes of receive FIFOs", rank_,
                                 layout.totalBytes()));
    // Fresh LL lines must carry no step's flag, and counters start at zero.
    CHORUS_CUDA_TRY(cudaMemsetAsync(recvRegion_, 0, layout.totalBytes(), setup), "cudaMemsetAsync");
    CHORUS_CUDA_TRY(cudaStreamSynchronize(setup), "cudaStreamSynchronize");

    const DevicePath toNext =
        chooseDevicePath(*s.topo, me, ends[static_cast<size_t>(next)], s.paths);
    const DevicePath fromPrev =
        chooseDevicePath(*s.topo, ends[static_cast<size_t>(prev)], me, s.paths);
    for (const DevicePath* path : {&toNext, &fromPrev}) {
      const bool p2p = path->kind == DevicePathKind::kP2pSameGpu ||
                       path->kind == DevicePathKind::kP2pNvlink ||
                       path->kind == DevicePathKind::kP2pPcie;
      if (!p2p)
        return invalidUsage(
            "rank %d: the ring needs the %s device transport to rank %d (%s), which this "
            "version of Chorus does not implement yet; device communicators run over P2P "
            "(ranks on one GPU, NVLink, or PCIe with peer access)",
            rank_, devicePathName(path->kind), path == &toNext ? next : prev, path->reason.c_str());
      if (path->crossContext)
        LOG_WARN(kSubsysInit,
                 "rank %d: shares its GPU with a rank of another process; without MPS the GPU "
                 "runs their kernels in turns, and each ring step may wait a time slice (run "
                 "the ranks of one GPU as threads of one process, or start MPS)",
                 rank_);
    }

    RegionInfo mine{};
    mine.owner = me;
    mine.layout = layout;
    mine.address = reinterpret_cast<uint64_t>(recvRegion_);
    // An IPC handle only for a predecessor in another process (IPC is missing on some
    // platforms where threads of one process still work).
    const DeviceEndpoint& before = ends[static_cast<size_t>(prev)];
    if (before.pid != me.pid || before.hostId != me.hostId)
      CHORUS_CUDA_TRY(cudaIpcGetMemHandle(&mine.ipc, recvRegion_),
                      formatString("rank %d: cudaIpcGetMemHandle", rank_));
    RegionInfo theirs;
    CHORUS_TRY(s.bootstrap->send(prev, kTagDeviceRing, &mine, sizeof mine));
    CHORUS_TRY(s.bootstrap->recv(next, kTagDeviceRing, &theirs, sizeof theirs));
    if (!(theirs.layout == layout))
      return invalidUsage(
          "rank %d: rank %d uses other device FIFO sizes (channels, CHORUS_BUFFSIZE or "
          "CHORUS_STEPS differ between the ranks); set them alike on every rank",
          rank_, next);
    if (theirs.owner.pid == me.pid && theirs.owner.hostId == me.hostId) {
      if (theirs.owner.cudaDev != device_) {
        cudaError_t e = cudaDeviceEnablePeerAccess(theirs.owner.cudaDev, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          return cudaFailure(e, formatString("rank %d: cudaDeviceEnablePeerAccess(%d)", rank_,
                                             theirs.owner.cudaDev));
        cudaGetLastError();
      }
      sendRegion_ = reinterpret_cast<char*>(theirs.address);
    } else {
      void* mapped = nullptr;
      CHORUS_CUDA_TRY(
          cudaIpcOpenMemHandle(&mapped, theirs.ipc, cudaIpcMemLazyEnablePeerAccess),
          formatString("rank %d: cudaIpcOpenMemHandle of rank %d's FIFOs", rank_, next));
      sendRegion_ = static_cast<char*>(mapped);
      sendRegionIpc_ = true;
    }
    description_ = formatString("rank %d (GPU %d): to rank %d %s (%s), from rank %d %s", rank_,
                                device_, next, devicePathName(toNext.kind), toNext.reason.c_str(),
                                prev, devicePathName(fromPrev.kind));
    RegionLayout linkLayout = layout;
    linkLayout.nchannels = 1;
    CHORUS_TRY(connectPeers(s, ends, linkLayout, setup));
  } else {
    description_ = formatString("rank %d (GPU %d): alone", rank_, device_);
  }

  Comm host;
  host.rank = rank_;
  host.nranks = n;
  host.ringIndex = pos;
  host.nchannels = nchannels_;
  CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&ringRanksDev_), sizeof(int32_t) * n),
                  "cudaMalloc");
  CHORUS_CUDA_TRY(cudaMemcpyAsync(ringRanksDev_, ringRanks_.data(), sizeof(int32_t) * n,
                                  cudaMemcpyHostToDevice, setup),
                  "cudaMemcpyAsync");
  host.ringRanks = ringRanksDev_;
  host.barrier = state_ + stateWords - 1;
  host.abortFlag = static_cast<const volatile uint32_t*>(abortDev);
  host.errorFlag = static_cast<uint32_t*>(errorDev);
  if (n > 1) {
    CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&peersDev_), sizeof(Channel) * n),
                    "cudaMalloc");
    CHORUS_CUDA_TRY(cudaMemcpyAsync(peersDev_, peersHost_.data(), sizeof(Channel) * n,
                                    cudaMemcpyHostToDevice, setup),
                    "cudaMemcpyAsync");
    host.peers = peersDev_;
  }
  for (int c = 0; c < nchannels_ && n > 1; ++c)
    for (int p = 0; p < kNumProtos; ++p) {
      uint64_t* steps = state_ + (static_cast<size_t>(c) * kNumProtos + p) * 2;
      host.channels[c].send[p] = layout.fifo(sendRegion_, c, p, steps);
      host.channels[c].recv[p] = layout.fifo(recvRegion_, c, p, steps + 1);
    }
  CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&commDev_), sizeof(Comm)), "cudaMalloc");
  CHORUS_CUDA_TRY(cudaMemcpyAsync(commDev_, &host, sizeof(Comm), cudaMemcpyHostToDevice, setup),
                  "cudaMemcpyAsync");
  CHORUS_CUDA_TRY(cudaStreamSynchronize(setup), "cudaStreamSynchronize");
  shape_.ringRanks = ringRanks_.data();
  shape_.nranks = n;
  // Every rank has mapped its successor's FIFOs before any kernel writes into them.
  CHORUS_TRY(s.bootstrap->barrier());
  LOG_INFO(kSubsysInit, "%s; %d channels", description_.c_str(), nchannels_);
  return Status::ok();
}

Status CudaDeviceComm::connectPeers(const DeviceCommSetup& s,
                                    const std::vector<DeviceEndpoint>& ends,
                                    const RegionLayout& layout, cudaStream_t setup) {
  const int n = s.nranks;
  const DeviceEndpoint& me = ends[static_cast<size_t>(rank_)];
  peerRecv_.assign(static_cast<size_t>(n), nullptr);
  peerSend_.assign(static_cast<size_t>(n), nullptr);
  peerSendIpc_.assign(static_cast<size_t>(n), false);
  noSendLink_.assign(static_cast<size_t>(n), "");
  noRecvLink_.assign(static_cast<size_t>(n), "");
  peersHost_.assign(static_cast<size_t>(n), Channel());
  // Per peer and protocol: the send step, the receive step.
  const size_t stateWords = static_cast<size_t>(n) * kNumProtos * 2;
  CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&peerState_), stateWords * sizeof(uint64_t)),
                  formatString("rank %d: cudaMalloc of the point-to-point FIFO state", rank_));
  CHORUS_CUDA_TRY(cudaMemsetAsync(peerState_, 0, stateWords * sizeof(uint64_t), setup),
                  "cudaMemsetAsync");
  // This rank decides each link into its own memory and tells the sender.
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    const DeviceEndpoint& peer = ends[static_cast<size_t>(p)];
    const DevicePath path = chooseDevicePath(*s.topo, peer, me, s.paths);
    const bool p2p = path.kind == DevicePathKind::kP2pSameGpu ||
                     path.kind == DevicePathKind::kP2pNvlink ||
                     path.kind == DevicePathKind::kP2pPcie;
    P2pLinkInfo info{};
    info.linked = p2p ? 1 : 0;
    if (p2p) {
      char* region = nullptr;
      CHORUS_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&region), layout.totalBytes()),
                      formatString("rank %d: cudaMalloc of %zu bytes of receive FIFOs from rank %d",
                                   rank_, layout.totalBytes(), p));
      peerRecv_[static_cast<size_t>(p)] = region;
      CHORUS_CUDA_TRY(cudaMemsetAsync(region, 0, layout.totalBytes(), setup), "cudaMemsetAsync");
      info.region.owner = me;
      info.region.layout = layout;
      info.region.address = reinterpret_cast<uint64_t>(region);
      if (peer.pid != me.pid || peer.hostId != me.hostId)
        CHORUS_CUDA_TRY(cudaIpcGetMemHandle(&info.region.ipc, region),
                        formatString("rank %d: cudaIpcGetMemHandle", rank_));
    } else {
      snprintf(info.reason, sizeof info.reason, "%s: %s", devicePathName(path.kind),
               path.reason.c_str());
      noRecvLink_[static_cast<size_t>(p)] = info.reason;
    }
    CHORUS_TRY(s.bootstrap->send(p, kTagDeviceP2p, &info, sizeof info));
  }
  CHORUS_CUDA_TRY(cudaStreamSynchronize(setup), "cudaStreamSynchronize");
  for (int p = 0; p < n; ++p) {
    if (p == rank_) continue;
    P2pLinkInfo theirs{};
    CHORUS_TRY(s.bootstrap->recv(p, kTagDeviceP2p, &theirs, sizeof theirs));
    theirs.reason[sizeof theirs.reason - 1] = 0;
    if (theirs.linked == 0) {
      noSendLink_[static_cast<size_t>(p)] = theirs.reason;
      continue;
    }
    if (!(theirs.region.layout == layout))
      return invalidUsage(
          "rank %d: rank %d uses other device FIFO sizes (CHORUS_BUFFSIZE or CHORUS_STEPS differ "
          "between the ranks); set them alike on every rank",
          rank_, p);
    const DeviceEndpoint& owner = theirs.region.owner;
    if (owner.pid == me.pid && owner.hostId == me.hostId) {
      if (owner.cudaDev != device_) {
        cudaError_t e = cudaDeviceEnablePeerAccess(owner.cudaDev, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
          return cudaFailure(
              e, formatString("rank %d: cudaDeviceEnablePeerAccess(%d)", rank_, owner.cudaDev));
        cudaGetLastError();
      }
      peerSend_[static_cast<size_t>(p)] = reinterpret_cast<char*>(theirs.region.address);
    } else {
      void* mapped = nullptr;
      CHORUS_CUDA_TRY(
          cudaIpcOpenMemHandle(&mapped, theirs.region.ipc, cudaIpcMemLazyEnablePeerAccess),
          formatString("rank %d: cudaIpcOpenMemHandle of rank %d's receive FIFO", rank_, p));
      peerSend_[static_cast<size_t>(p)] = static_cast<char*>(mapped);
      peerSendIpc_[static_cast<size_t>(p)] = true;
    }
  }
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < kNumProtos; ++q) {
      uint64_t* steps = peerState_ + (static_cast<size_t>(p) * kNumProtos + q) * 2;
      Channel& link = peersHost_[static_cast<size_t>(p)];
      if (char* out = peerSend_[static_cast<size_t>(p)])
        link.send[q] = layout.fifo(out, 0, q, steps);
      if (char* in = peerRecv_[static_cast<size_t>(p)])
        link.recv[q] = layout.fifo(in, 0, q, steps + 1);
    }
  return Status::ok();
}

Status CudaDeviceComm::launchAll(const std::vector<Launch>& launches, void* stream) {
  if (launches.empty()) return Status::ok();
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
  const bool ordered = result.isOk() && capture == cudaStreamCaptureStatusNone;
  if (ordered && launched_ && stream != lastStream_) {
    err = cudaStreamWaitEvent(s, lastLaunch_, 0);
    if (err != cudaSuccess) result = cudaFailure(err, "cudaStreamWaitEvent");
  }
  for (const Launch& l : launches) {
    if (!result.isOk()) break;
    result = launchOnStream(l, l.p2p != 0 ? l.nworks : nchannels_, stream);
  }
  if (result.isOk() && ordered) {
    err = cudaEventRecord(lastLaunch_, s);
    if (err != cudaSuccess) {
      result = cudaFailure(err, "cudaEventRecord");
    } else {
      launched_ = true;
      lastStream_ = stream;
    }
  }
  if (previous != device_) cudaSetDevice(previous);
  return result;
}

Status CudaDeviceComm::checkStream(void* stream) const {
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
  std::vector<Launch> launches;
  CHORUS_TRY(encodeLaunches(shape_, commDev_, calls, n, &launches));
  return launchAll(launches, stream);
}

Status CudaDeviceComm::enqueueP2p(const DeviceP2p* ops, size_t n, void* stream) {
  CHORUS_TRY(checkStream(stream));
  for (size_t i = 0; i < n; ++i) {
    const DeviceP2p& op = ops[i];
    if (op.peer < 0 || op.peer >= shape_.nranks || op.peer == rank_ || op.bytes == 0) continue;
    const std::string& why = (op.isSend ? noSendLink_ : noRecvLink_)[static_cast<size_t>(op.peer)];
    if (!why.empty())
      return invalidUsage(
          "rank %d: %s rank %d needs a device transport this version of Chorus does not "
          "implement yet (%s); device sends and receives run over P2P (ranks on one GPU, "
          "NVLink, or PCIe with peer access)",
          rank_, op.isSend ? "ncclSend to" : "ncclRecv from", op.peer, why.c_str());
  }
  std::vector<Launch> launches;
  CHORUS_TRY(encodeP2pLaunches(shape_, commDev_, rank_, ops, n, &launches));
  return launchAll(launches, stream);
}

}  // namespace

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
