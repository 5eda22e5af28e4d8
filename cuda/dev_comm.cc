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
  int32_t usable;  // 0: the owner has none to offer (no link, or its set-up failed)
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

bool isP2p(DevicePathKind k) {
  return k == DevicePathKind::kP2pSameGpu || k == DevicePathKind::kP2pNvlink ||
         k == DevicePathKind::kP2pPcie;
}

// Bytes to allocate for a region: whole 2 MiB granules when another process maps it, since a
// CUDA IPC handle maps the granules an allocation lies in, which a small allocation may share
// with others of its process.
size_t allocationBytes(size_t bytes, bool exported) {
  constexpr size_t kGranule = size_t(2) << 20;
  return exported ? (bytes + kGranule - 1) / kGranule * kGranule : bytes;
}

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
                      const RegionLayout& layout, cudaStream_t setup, SetupFailure* local);
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
  int nthreads_ = 512;  // threads of each block
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
  std::vector<std::string> noRecvLink_;
  // Why device sends and receives between ranks are refused (empty: they run).
  std::string p2pRefusal_;
  bool warnedCrossContext_ = false;
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

  // Who is where: every rank's GPU, for the transport to each ring neighbour; and whether
  // every rank got this far (all stop here, alike, if one did not).
  struct Arrival {
    DeviceEndpoint end;
    SetupVerdict verdict;
  };
  std::vector<Arrival> arrivals(static_cast<size_t>(s.nranks));
  Arrival& mine = arrivals[static_cast<size_t>(rank_)];
  mine.end = makeDeviceEndpoint(s.hostId, getpid(), device_, bus);
  mine.verdict = local.verdict();
  CHORUS_TRY(s.bootstrap->allGather(arrivals.data(), sizeof(Arrival)));
  if (!local.ok()) return local.status();
  for (int r = 0; r < s.nranks; ++r)
    CHORUS_TRY(arrivals[static_cast<size_t>(r)].verdict.check(rank_, r));
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
  // A collective runs a block per channel, a group's sends and receives up to a block each.
  const int blocksEach = std::max(nchannels_, s.nranks > 1 ? kMaxLaunchWorks : 1);
  if (local.ok() && resident < sameGpuHere * blocksEach)
    local.note(invalidUsage(
        "rank %d: %d ranks of this process share GPU %d and each runs up to %d blocks at once "
        "(%d channels, up to %d for sends and receives), but the GPU holds only %d "
        "collective-kernel blocks at once (%d per multiprocessor x %d); use fewer ranks per GPU%s",
        rank_, sameGpuHere, device_, blocksEach, nchannels_, kMaxLaunchWorks, resident, blocksPerSm,
        sms, nchannels_ > kMaxLaunchWorks ? " or lower CHORUS_DEVICE_CHANNELS" : ""));

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
    // An IPC handle only for a predecessor in another process (IPC is missing on some
    // platforms where threads of one process still work).
    const DeviceEndpoint& before = ends[static_cast<size_t>(prev)];
    const bool exported = before.pid != me.pid || before.hostId != me.hostId;
    const size_t regionBytes = allocationBytes(layout.totalBytes(), exported);
    if (local.ok() && local.cuda(cudaMalloc(reinterpret_cast<void**>(&recvRegion_), regionBytes),
                                 formatString("rank %d: cudaMalloc of %zu bytes of receive FIFOs",
                                              rank_, regionBytes)))
      // Fresh LL lines must carry no step's flag, and counters start at zero.
      local.cuda(cudaMemsetAsync(recvRegion_, 0, regionBytes, setup), "cudaMemsetAsync") &&
          local.cuda(cudaStreamSynchronize(setup), "cudaStreamSynchronize");

    const DevicePath toNext =
        chooseDevicePath(*s.topo, me, ends[static_cast<size_t>(next)], s.paths);
    const DevicePath fromPrev =
        chooseDevicePath(*s.topo, ends[static_cast<size_t>(prev)], me, s.paths);
    for (const DevicePath* path : {&toNext, &fromPrev}) {
      if (!isP2p(path->kind)) {
        local.note(invalidUsage(
            "rank %d: the ring needs the %s device transport to rank %d (%s), which this "
            "version of Chorus does not implement yet; device communicators run over P2P "
            "(ranks on one GPU, NVLink, or PCIe with peer access)",
            rank_, devicePathName(path->kind), path == &toNext ? next : prev,
            path->reason.c_str()));
      } else if (path->crossContext) {
        warnCrossContext();
      }
    }

    RegionInfo mine{};
    mine.owner = me;
    mine.layout = layout;
    mine.address = reinterpret_cast<uint64_t>(recvRegion_);
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
      else
        mapRegion(me, theirs, next, "FIFOs", &local, &sendRegion_, &sendRegionIpc_);
    }
    description_ = formatString("rank %d (GPU %d): to rank %d %s (%s), from rank %d %s", rank_,
                                device_, next, devicePathName(toNext.kind), toNext.reason.c_str(),
                                prev, devicePathName(fromPrev.kind));
    RegionLayout linkLayout = layout;
    linkLayout.nchannels = 1;
    CHORUS_TRY(connectPeers(s, ends, linkLayout, setup, &local));
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
  if (local.ok()) {
    host.barrier = state_ + stateWords - 1;
    for (int c = 0; c < nchannels_ && n > 1; ++c)
      for (int p = 0; p < kNumProtos; ++p) {
        uint64_t* steps = state_ + (static_cast<size_t>(c) * kNumProtos + p) * 2;
        host.channels[c].send[p] = layout.fifo(sendRegion_, c, p, steps);
        host.channels[c].recv[p] = layout.fifo(recvRegion_, c, p, steps + 1);
      }
    if (local.cuda(cudaMalloc(reinterpret_cast<void**>(&ringRanksDev_), sizeof(int32_t) * n),
                   "cudaMalloc") &&
        local.cuda(cudaMemcpyAsync(ringRanksDev_, ringRanks_.data(), sizeof(int32_t) * n,
                                   cudaMemcpyHostToDevice, setup),
                   "cudaMemcpyAsync"))
      host.ringRanks = ringRanksDev_;
  }
  if (local.ok() && n > 1 &&
      local.cuda(cudaMalloc(reinterpret_cast<void**>(&peersDev_), sizeof(Channel) * n),
                 "cudaMalloc") &&
      local.cuda(cudaMemcpyAsync(peersDev_, peersHost_.data(), sizeof(Channel) * n,
                                 cudaMemcpyHostToDevice, setup),
                 "cudaMemcpyAsync"))
    host.peers = peersDev_;
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
             "rank %d: device sends and receives between ranks will be refused: %s, a device "
             "transport this version of Chorus does not implement yet",
             rank_, p2pRefusal_.c_str());
  return Status::ok();
}

Status CudaDeviceComm::connectPeers(const DeviceCommSetup& s,
                                    const std::vector<DeviceEndpoint>& ends,
                                    const RegionLayout& layout, cudaStream_t setup,
                                    SetupFailure* local) {
  const int n = s.nranks;
  const DeviceEndpoint& me = ends[static_cast<size_t>(rank_)];
  peerRecv_.assign(static_cast<size_t>(n), nullptr);
  peerSend_.assign(static_cast<size_t>(n), nullptr);
  peerSendIpc_.assign(static_cast<size_t>(n), false);
  noRecvLink_.assign(static_cast<size_t>(n), "");
  peersHost_.assign(static_cast<size_t>(n), Channel());
  // Per peer and protocol: the send step, the receive step.
  const size_t stateWords = static_cast<size_t>(n) * kNumProtos * 2;
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
    P2pLinkInfo info{};
    if (!isP2p(path.kind)) {
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
    if (!(theirs.region.layout == layout)) {
      local->note(invalidUsage(
          "rank %d: rank %d uses other device FIFO sizes (CHORUS_BUFFSIZE or CHORUS_STEPS differ "
          "between the ranks); set them alike on every rank",
          rank_, p));
      continue;
    }
    bool ipc = false;
    mapRegion(me, theirs.region, p, "receive FIFO", local, &peerSend_[static_cast<size_t>(p)],
              &ipc);
    peerSendIpc_[static_cast<size_t>(p)] = ipc;
  }
  for (int p = 0; p < n; ++p)
    for (int q = 0; q < kNumProtos && peerState_ != nullptr; ++q) {
      uint64_t* steps = peerState_ + (static_cast<size_t>(p) * kNumProtos + q) * 2;
      Channel& link = peersHost_[static_cast<size_t>(p)];
      if (char* out = peerSend_[static_cast<size_t>(p)])
        link.send[q] = layout.fifo(out, 0, q, steps);
      if (char* in = peerRecv_[static_cast<size_t>(p)])
        link.recv[q] = layout.fifo(in, 0, q, steps + 1);
    }
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
  if (result.isOk() && inOrder) {
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
        "ranks, since %s, which needs a device transport this version of Chorus does not "
        "implement yet (sends and receives run over P2P: ranks on one GPU, NVLink, or PCIe "
        "with peer access)",
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
