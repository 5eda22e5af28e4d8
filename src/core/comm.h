// Communicator: one rank's membership of a clique, with the bootstrap, the transports and the
// ring channels it built at init, and the state shared with its proxy threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/selector.h"
#include "bootstrap/bootstrap.h"
#include "core/peer_watch.h"
#include "cuda/dev_comm.h"
#include "common/status.h"
#include "common/wait.h"
#include "exec/host_executor.h"
#include "exec/host_launch.h"
#include "exec/host_tree.h"
#include "exec/workers.h"
#include "exec/reduce.h"
#include "transport/transport.h"

namespace chorus {

struct CommOptions {
  bool host = true;      // host memory communicator (device ones need a CUDA build)
  int cudaDev = -1;      // the CUDA device of a device communicator
  bool blocking = true;  // ncclConfig_t.blocking
  std::string name;      // ncclConfig_t.commName
  // A phase of the hierarchical algorithm: CHORUS_ALGO's list less "hier" (all algorithms when
  // nothing else is named) chooses its algorithms.
  bool hierPhase = false;
  // A phase's shape as its parent's model prices it (selector.h, hierLocalInfo/hierCrossInfo):
  // every rank of a host runs the phase at once, so the phase shares the cores, and across
  // hosts the link, with the parent's other ranks (0: what the phase's own ranks show).
  double phaseCoresPerRank = 0;
  double phaseNetLinkGBps = 0;
  // Made from another communicator, whose rank that made the id already listens for the
  // others (BootstrapOptions::rootListening).
  bool derived = false;
  const char* logLabel = "";  // follows "channel N" in its INIT lines (phases say which)
};

class Communicator;

// Lets another thread stop a communicator's init (ncclCommAbort on a handle whose init runs):
// create attaches the communicator it builds, and cancel raises its abort flag, so that every
// wait of the init returns. A cancel before the init started makes it fail at once.
class InitCancel {
 public:
  // false when cancel came first (the init must not start).
  bool attach(Communicator* comm);
  void detach();
  // Raises the abort flag of the attached communicator; true when an init was running (it
  // returns promptly), false when none was (a later attach fails).
  bool cancel();
  bool cancelled() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return cancelled_;
  }
  // Blocks until no init is attached, at most timeoutSeconds; false on timeout.
  bool waitDetached(double timeoutSeconds);

 private:
  mutable std::mutex mutex_;
  std::condition_variable detached_;
  Communicator* comm_ = nullptr;
  bool cancelled_ = false;
};

// A user reduction operator made by ncclRedOpCreatePreMulSum.
struct UserRedOp {
  bool live = false;
  DataType type = DataType::kFloat32;
  RedOp op;
  const void* scalarPtr = nullptr;  // read at each call (ncclScalarDevice on a host comm)
};

class Communicator final : public ErrorSink {
 public:
  ~Communicator() override;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Joins the clique described by id and builds every connector; blocks until all ranks did.
  // cancel (may be null) lets another thread end the waiting (ncclCommAbort during init).
  static Result<std::unique_ptr<Communicator>> create(const UniqueIdInfo& id, int nranks, int rank,
                                                      const CommOptions& options,
                                                      InitCancel* cancel = nullptr);

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int cudaDev() const { return options_.cudaDev; }
  // Host connectors for the device links that have no P2P path (dev::ConnectHostFn): what a
  // device communicator's proxy drives; the CPU tests join emulated kernels with them.
  Status connectDeviceHost(int channel, const std::vector<int>& recvFrom,
                           const std::vector<int>& sendTo, dev::HostLinks* links);
  // For device links to `peer` through host connectors: whether their FIFOs may sit in GPU
  // memory (Transport::gpuDirect of the transport that carries them).
  Result<NetGdr> deviceGpuDirect(int peer);
  bool isHost() const { return options_.host; }

  // Compressed all-reduce (comm_compress.cc): the wire format of float32/float64 sum and
  // average all-reduces (Compression values; CHORUS_COMPRESS at init), and the bytes this rank
  // sent in them against what the same messages take uncompressed.
  void setCompression(int mode) { compression_.store(mode); }
  void compressionStats(uint64_t* rawBytes, uint64_t* wireBytes) const {
    *rawBytes = compressRaw_.load();
    *wireBytes = compressWire_.load();
  }

  // Resolves an ncclRedOp_t value for a given type (built-in or made by createPreMulSum).
  // On a device communicator an operator whose scalar lives in device memory
  // (ncclScalarDevice) leaves it there: *deviceScalar gets its address (null otherwise).
  Status resolveOp(int op, DataType type, RedOp* out, const void** deviceScalar = nullptr) const;
  Result<int> createPreMulSum(const void* scalar, DataType type, bool scalarIsImmediate);
  Status destroyOp(int op);

  // Runs collectives on host buffers as one launch, in order; the selector fills in each work's
  // algorithm and channel count, and links they need are connected on first use.
  Status run(HostWork* works, size_t n);
  Status run(std::vector<HostWork>& works) { return run(works.data(), works.size()); }
  // What the selector picks for one call of coll moving `bytes` (the nccl-tests size).
  Decision decide(Collective coll, size_t bytes) const;
  const TuningInfo& tuningInfo() const { return tuning_; }
  // Hosts, the transport and bandwidth between every pair of ranks, the ring and both trees:
  // text like `nvidia-smi topo -m`, or Graphviz DOT.
  std::string topologyReport(bool dot) const;
  // Collective: registers [buff, buff + size) of every rank as one window (flags: NCCL_WIN_*).
  // When every rank's range lies in memory from ncclMemAlloc and the ranks share a host, each
  // rank maps the others' ranges, and collectives whose buffers lie in windows read them in
  // place (host_window.h); otherwise the window is only recorded.
  Result<const HostWindow*> registerWindow(void* buff, size_t size, int flags);
  // Forgets a window of this communicator (and unmaps the peers' ranges).
  Status deregisterWindow(const HostWindow* window);
  // Runs a group's point-to-point ops, connecting to new peers first.
  Status p2p(const std::vector<P2pOp>& ops);

  // ncclCommSplit's exchange, which every rank of this communicator calls: the ranks passing
  // one color (>= 0) learn their rank and the size of the new communicator (ordered by key,
  // then by rank here) and get the unique id its first rank made; color < 0
  // (NCCL_SPLIT_NOCOLOR) takes part and gets newRank -1.
  struct SplitPlan {
    int newRank = -1;
    int newSize = 0;
    UniqueIdInfo id{};
    int idRank = -1;  // the rank (of this communicator) that made id and hosts its rendezvous
  };
  Result<SplitPlan> planSplit(int color, int key);
  // ncclCommShrink's exchange among the ranks not in `excluded` (sorted, distinct, valid, not
  // this rank), which every such rank calls with the same list, also after a peer failed: the
  // first of them makes the new communicator's id and sends it to the others. abortFirst
  // (NCCL_SHRINK_ABORT) first stops whatever waits in this communicator.
  Result<SplitPlan> planShrink(const std::vector<int>& excluded, bool abortFirst);

  // Fails when the communicator was aborted, finalized or hit an asynchronous error.
  Status checkUsable() const;
  Status asyncError() const;
  void reportAsyncError(const Status& status) override;
  std::string failureText() const override;
  bool failurePublished() const override {
    return failurePublished_.load(std::memory_order_acquire);
  }
  void abort() {
    abort_.raise();
    if (device_) device_->abort();
    abortHier();
  }
  // ncclCommRevoke: stops every wait like abort, and from then on refuses all calls but
  // destroy, split and shrink (whose exchanges wait on flags of their own).
  void revoke() {
    revoked_.store(true);
    abort();
  }
  bool revoked() const { return revoked_.load(std::memory_order_relaxed); }
  Status finalize();

  void setLastError(const std::string& message);
  std::string lastError() const;

  // This rank's pending operations as text (the collective it is in, and for each thread of the
  // call the algorithm, step, peer it waits on and bytes done), for CHORUS_DUMP and
  // tools/chorus-waitfor; `reason` says what asked for it, `error` the failure (if any; else
  // the communicator's asynchronous error).
  std::string dumpText(const char* reason, const std::string& error) const;
  // Writes dumpText to CHORUS_DUMP's directory, when set (comm_dump.cc).
  void writeDump(const char* reason, const std::string& error = std::string()) const;

 private:
  enum Activity : uint32_t { kIdle = 0, kCollective = 1, kP2p = 2 };
  Communicator(int rank, int nranks, const CommOptions& options);
  Status init(const UniqueIdInfo& id);
  // Ring channels [channels_.size(), n): every rank calls this at the same point.
  Status connectRing(int n);
  Status ensureDirect();
  // Device communicators: the FIFOs in GPU memory and the enqueue on the caller's stream.
  Status initDevice(const LocalTopology& topo);
  Status runDevice(const HostWork* works, size_t n);
  Status runDeviceP2p(const std::vector<P2pOp>& ops);
  void logDecision(Collective coll, size_t bytes, const Decision& d);
  // shareDirections: a peer in both lists may get one connection for both directions.
  Status connectPairs(const std::vector<int>& recvFrom, const std::vector<int>& sendTo, int channel,
                      int tag, bool shareDirections, std::vector<P2pConnection>* conns);
  Status connectRd();
  // The hierarchical algorithm (comm_hier.cc): its two communicators, made by every rank at
  // the same call when the selector first picks it; a work run through them; and the abort
  // that reaches them.
  Status ensureHier();
  Status runHier(const HostWork& w);
  void abortHier();
  // A failure of this communicator fails those two as well: their peers, waiting in a phase,
  // learn it through their connections and local boards.
  void failHier(const Status& failure);
  // The compressed all-reduce (comm_compress.cc): whether a work is one, and its run.
  bool compresses(const HostWork& w) const;
  Status runCompressed(const HostWork& w);
  // A group's point-to-point ops on connected peers, tagged for mismatch detection.
  Status runP2p(const std::vector<P2pOp>& ops);
  // Links to the parent and children of both trees, both directions (tree all-reduce).
  Status connectTrees();
  Status connectP2p(const std::vector<P2pOp>& ops);
  Transport* transportFor(const PeerInfo& peer);
  void failIfOutOfStep(const Status& failure, bool connecting = false);
  // Unlinks the shared-memory names of this communicator still in /dev/shm that ranks which died
  // made (a rank may die between making a name and the exchange that removes it): every rank's
  // names once the communicator failed (or its init did), else those of the local peers seen
  // gone without destroying theirs.
  void removeLeftNames() const;
  // Turns an executor failure into the error the user should see (the async cause first).
  Status explain(const Status& failure) const;
  Status startPeerWatch(bool anyShmDisabled);
  // Records the call this rank starts, for dumps and the peer watch; currentCall reads it.
  void noteCall(const CallTag& tag, Activity activity);
  CallTag currentCall() const;
  // Numbers the launch about to run (its threads' wait notes carry the number).
  void nextLaunch() {
    exec_.launch = launch_.load(std::memory_order_relaxed) + 1;
    launch_.store(exec_.launch, std::memory_order_relaxed);
  }
  // Marks w windowed (with its buffers' places) when its buffers lie in shared windows and the
  // call is one that reads them in place; bytes is the nccl-tests size.
  bool useWindows(HostWork& w, size_t bytes);
  WindowRef findWindow(const void* p, size_t bytes) const;

  int rank_;
  int nranks_;
  CommOptions options_;
  AbortFlag abort_;
  std::atomic<bool> finalized_{false};
  std::atomic<bool> revoked_{false};
  double timeoutSeconds_ = 0;
  int64_t spinCount_ = 0;

  std::unique_ptr<Bootstrap> bootstrap_;
  std::vector<PeerInfo> peers_;
  TransportContext transportCtx_;
  std::unique_ptr<Transport> shm_;
  std::unique_ptr<Transport> socket_;
  std::unique_ptr<Transport> net_;  // through the net plugin (netPlugin_), when peers share one
  NetPlugin* netPlugin_ = nullptr;
  std::vector<HostChannel> channels_;
  std::vector<int> ringRanks_;           // rank at each ring position, hosts contiguous
  std::vector<std::vector<int>> hosts_;  // ranks of each host, hosts by lowest rank
  TuningInfo tuning_;  // what the selector knows, including CHORUS_ALGO and channel bounds
  uint64_t loggedClasses_[static_cast<int>(Collective::kCount)] = {};  // TUNING lines printed
  struct CachedDecision {
    bool valid = false;
    size_t bytes = 0;
    Decision decision;
  };
  CachedDecision lastDecision_[static_cast<int>(Collective::kCount)];
  std::unique_ptr<ChannelWorkers> workers_;
  // Device communicators only: the host connectors of links without a P2P path (by device
  // host channel, then by peer), which the device communicator's proxy drives, and the device
  // communicator itself (destroyed first).
  std::vector<std::vector<P2pConnection>> deviceHostConns_;
  std::unique_ptr<dev::DeviceComm> device_;
  std::unique_ptr<PeerWatch> peerWatch_;  // the ranks on this host (null: none, or not watched)
  TreeLinks trees_;                       // connected when the selector first picks the tree
  bool treesConnected_ = false;
  std::unique_ptr<DirectRegion> direct_;
  SlotStreamPolicy directStores_;  // how this rank writes direct_'s buffers  // made when a direct
                                   // algorithm is first picked
  std::vector<P2pConnection> p2pConns_;  // by peer; connectors built on first use
  // Mismatch detection (call_tag.h): collectives made so far, and sends to / receives from
  // each peer so far.
  uint64_t collectiveCalls_ = 0;
  std::vector<uint64_t> sendCalls_, recvCalls_;
  // What this rank is doing, for dumps (read by other threads): kIdle, kCollective or kP2p,
  // the first collective of the current (or last) launch, and the channels it uses.
  std::atomic<uint32_t> activity_{kIdle};
  std::atomic<uint32_t> callVersion_{0};  // a seqlock over the three below (noteCall)
  std::atomic<uint64_t> callSeq_{0}, callCount_{0}, callWhatRoot_{0};
  std::atomic<int> callChannels_{0};
  std::atomic<uint64_t> launch_{0};     // launches so far (exec_.launch: the current one)
  WaitNote notes_[kMaxChannels];        // exec_.notes: one per ring channel
  std::vector<P2pConnection> rdConns_;  // by peer: recursive-doubling partners, on first use
  // The hierarchical algorithm's communicators: the ranks of this rank's host (by local index)
  // and the ranks of every host with this rank's local index (by host). hierMutex_ guards the
  // pointers against abort from other threads; hierCancel_ ends their init.
  std::mutex hierMutex_;
  InitCancel hierCancel_;
  std::unique_ptr<Communicator> hierLocal_, hierCross_;
  bool hierFailed_ = false;
  std::vector<char> hierStage_;  // staging: reordered blocks, or a buffer padded to L blocks
  // Compressed all-reduce: the mode, the byte counts, what each send buffer's encodings lost
  // (error feedback; the least recently used of kMaxFeedback buffers is dropped), staging.
  std::atomic<int> compression_{0};
  std::atomic<uint64_t> compressRaw_{0}, compressWire_{0};
  struct Feedback {
    const void* buff = nullptr;
    size_t count = 0;
    DataType type = DataType::kFloat32;
    int mode = 0;
    std::vector<char> input;  // count elements: what encoding this rank's input lost
    std::vector<char> block;  // this rank's block: what encoding its reduced block lost
    uint64_t lastUse = 0;
  };
  std::vector<Feedback> feedback_;
  uint64_t feedbackClock_ = 0;
  std::vector<char> compressStage_;
  uint64_t compressLogged_ = 0;  // power-of-two size classes whose first call was logged
  ExecContext exec_;

  std::vector<UserRedOp> userOps_;

  HostWindowList windows_;
  uint32_t nextWindowId_ = 0;
  bool windowsInPlace_ = false;  // CHORUS_WINDOW and one host: windows may be read in place
  size_t windowMinBytes_ = 0;    // CHORUS_WINDOW_MIN_BYTES
  uint32_t windowLogged_ = 0;    // collectives whose first in-place call was logged

  // The last call failed on a peer (failIfOutOfStep) and why, for failureText; cleared by the
  // next call.
  std::atomic<bool> lastCallFailed_{false};
  std::atomic<bool> failurePublished_{false};  // on the peer watch's board
  bool initFailed_ = false;
  Status lastFailure_;        // guarded by mutex_
  mutable std::mutex mutex_;  // guards asyncError_, lastFailure_ and lastError_
  Status asyncError_;
  std::atomic<bool> hasAsyncError_{false};  // set once asyncError_ holds an error
  std::string lastError_;
};

// CHORUS_DUMP (comm_dump.cc): the directory dumps go to ("": none), and the communicators that
// SIGUSR1 makes write one.
std::string dumpDirectory();
void dumpRegister(const Communicator* comm);
void dumpUnregister(const Communicator* comm);

}  // namespace chorus
