#include "core/comm.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "algorithms/cost_model.h"
#include "bootstrap/root.h"
#include "algorithms/topo_graph.h"
#include "common/param.h"
#include "transport/net_plugin/net_plugin.h"
#include "core/peer_cpus.h"
#include "core/peer_net.h"
#include "core/topo_report.h"
#include "exec/call_tag.h"
#include "exec/compress.h"
#include "exec/host_rd.h"
#include "exec/stream_copy.h"
#include "topo/hca_filter.h"
#include "topo/host_id.h"
#include "transport/shm/direct_region.h"

namespace chorus {

namespace {

constexpr int kTagRingSetup = 1000;
constexpr int kTagP2pSetup = 1100;
// Channel number of point-to-point connectors (ring channels count from 0).
constexpr int kP2pChannel = 100;
// Tree links: channel 200 + 2*tree carries partial results up (child to parent), 201 + 2*tree
// final results down, so the two directions between a pair never share a FIFO name or a
// socket match. Each receiver's description travels with tag kTagTreeSetup + (channel - 200).
constexpr int kTreeChannelBase = 200;
constexpr int kTagTreeSetup = 1200;
int treeUpChannel(int tree) {
  return kTreeChannelBase + 2 * tree;
}
int treeDownChannel(int tree) {
  return kTreeChannelBase + 2 * tree + 1;
}
int treeSetupTag(int channel) {
  return kTagTreeSetup + channel - kTreeChannelBase;
}
// Recursive-doubling links: one connector each way between partners.
constexpr int kRdChannel = 300;
constexpr int kTagRdSetup = 1300;

uint64_t randomNonce() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v)))
    v = static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull ^
        static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  return v;
}

// "4 KiB" style label of the power-of-two size class that bytes falls in.
std::string sizeClassLabel(int log2Bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = std::min(log2Bytes / 10, 4);
  return formatString("%llu %s", 1ull << (log2Bytes - 10 * unit), units[unit]);
}

std::string hex64(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

Communicator::Communicator(int rank, int nranks, const CommOptions& options)
    : rank_(rank), nranks_(nranks), options_(options) {}

Communicator::~Communicator() {
  dumpUnregister(this);
  std::unique_ptr<Communicator> hierLocal, hierCross;
  {
    // The hierarchical algorithm's communicators first: they finish on their own.
    std::lock_guard<std::mutex> lock(hierMutex_);
    hierLocal = std::move(hierLocal_);
    hierCross = std::move(hierCross_);
  }
  hierCross.reset();
  hierLocal.reset();
  removeLeftNames();  // those a peer that died made before its peers could remove them
  // The watch first: it reports into this communicator. Then idle channel workers. The
  // proxies then deliver what was posted (peers may still be receiving the end of the last
  // collective), and stop before the members they report errors to go away.
  std::unique_ptr<PeerWatch> watch;
  {
    // Threads that report errors look at peerWatch_ under the lock.
    std::lock_guard<std::mutex> lock(mutex_);
    watch = std::move(peerWatch_);
  }
  watch.reset();
  workers_.reset();
  direct_.reset();
  // A device communicator's proxy drives host connectors: it stops before they go.
  device_.reset();
  net_.reset();
  socket_.reset();
  shm_.reset();
}

Result<std::unique_ptr<Communicator>> Communicator::create(const UniqueIdInfo& id, int nranks,
                                                           int rank, const CommOptions& options,
                                                           InitCancel* cancel) {
  std::unique_ptr<Communicator> comm(new Communicator(rank, nranks, options));
  if (cancel != nullptr && !cancel->attach(comm.get()))
    return invalidUsage("rank %d init: aborted by ncclCommAbort before it started", rank);
  Status s = comm->init(id);
  if (cancel != nullptr) {
    // The communicator must not be aborted through cancel once it is handed over or freed.
    const bool aborted = cancel->cancelled();
    cancel->detach();
    if (aborted) s = invalidUsage("rank %d init: aborted by ncclCommAbort", rank);
  }
  if (!s.isOk()) {
    comm->initFailed_ = true;  // its peers' names may be left (removeLeftNames)
    // A communicator made from another: the ranks waiting at a rendezvous this process hosts
    // learn at once that it cannot form.
    if (options.derived || options.hierPhase)
      abandonRendezvousRoot(id, remoteError("rank %d of the new communicator gave up its init: %s",
                                            rank, s.message().c_str()));
    return s;
  }
  dumpRegister(comm.get());
  return comm;
}

Status Communicator::init(const UniqueIdInfo& id) {
  // A bad override fails before this rank waits for anyone.
  Result<AlgorithmMask> mask = algorithmOverride();
  if (!mask.isOk()) return mask.status().withContext(formatString("rank %d init", rank_));
  tuning_.allowed = mask.value();
  const ParamValue compress = paramRaw("COMPRESS");
  Result<Compression> compression = parseCompression(compress.value, compress.source);
  if (!compression.isOk())
    return compression.status().withContext(formatString("rank %d init", rank_));
  if (options_.hierPhase) {
    tuning_.allowed.bits &= ~(1u << static_cast<int>(Algorithm::kHier));
    if (tuning_.allowed.bits == 0) tuning_.allowed = AlgorithmMask();
  } else {
    compression_.store(static_cast<int>(compression.value()));
  }
  Status bounds = channelBounds(&tuning_.minChannels, &tuning_.maxChannels);
  if (!bounds.isOk()) return bounds.withContext(formatString("rank %d init", rank_));
  int64_t directBytes = paramInt("DIRECT_BUFFSIZE");
  if (directBytes < 4096 || directBytes > (int64_t(1) << 30))
    return invalidArgument("rank %d init: %s=%lld is outside [4096, 1 GiB]", rank_,
                           paramRaw("DIRECT_BUFFSIZE").source.c_str(),
                           static_cast<long long>(directBytes));
  tuning_.directChunkBytes = static_cast<size_t>(directBytes);
  const int64_t slotStream = paramInt("SLOT_STREAM");
  if (slotStream < -1 || slotStream > 1)
    return invalidArgument(
        "rank %d init: %s=%lld is not -1 (measured), 0 (cached) or 1 (streaming)", rank_,
        paramRaw("SLOT_STREAM").source.c_str(), static_cast<long long>(slotStream));
  exec_.slotStream = static_cast<SlotStreamMode>(slotStream);
  const int64_t linkMbps = paramInt("SOCKET_LINK_MBPS");
  if (linkMbps < 0 || linkMbps > INT32_MAX)
    return invalidArgument("rank %d init: %s=%lld is not a link speed in Mb/s (0: as reported)",
                           rank_, paramRaw("SOCKET_LINK_MBPS").source.c_str(),
                           static_cast<long long>(linkMbps));
  timeoutSeconds_ = static_cast<double>(paramInt("TIMEOUT"));
  // A tuning file (CHORUS_TUNING_FILE) or topology file that cannot be used fails before waiting.
  CHORUS_TRY(costModelStatus().withContext(formatString("rank %d init", rank_)));
  Result<const LocalTopology*> topo = processTopology();
  if (!topo.isOk()) return topo.status().withContext(formatString("rank %d init", rank_));
  // The HCA filter and GID policy are checked against the topology's HCAs, whatever network.
  Result<std::vector<HcaPort>> hcas = selectHcaPortsFromEnvironment(*topo.value());
  if (!hcas.isOk()) return hcas.status().withContext(formatString("rank %d init", rank_));
  Result<std::vector<int>> gids = selectGidsFromEnvironment(*topo.value(), hcas.value());
  if (!gids.isOk()) return gids.status().withContext(formatString("rank %d init", rank_));
  // An NCCL net plugin (NCCL_NET_PLUGIN): ranks on different hosts that loaded the same one
  // talk through it.
  Result<NetPlugin*> plugin = processNetPlugin();
  if (!plugin.isOk()) return plugin.status().withContext(formatString("rank %d init", rank_));
  netPlugin_ = plugin.value();
  BootstrapOptions bo;
  bo.preferredInterfaces = interfacesByLocality(*topo.value(), processCpus());
  bo.initTimeoutSeconds = static_cast<double>(paramInt("INIT_TIMEOUT"));
  // A phase communicator is made inside a collective call, among ranks that are all in it: the
  // call's bound (CHORUS_TIMEOUT) holds for its rendezvous too.
  if (options_.hierPhase && timeoutSeconds_ > 0)
    bo.initTimeoutSeconds = bo.initTimeoutSeconds > 0
                                ? std::min(bo.initTimeoutSeconds, timeoutSeconds_)
                                : timeoutSeconds_;
  bo.timeoutSeconds = timeoutSeconds_;
  bo.abort = &abort_;
  bo.rootListening = options_.derived;
  Result<std::unique_ptr<Bootstrap>> boot = Bootstrap::init(id, rank_, nranks_, bo);
  if (!boot.isOk()) return boot.status().withContext(formatString("rank %d init", rank_));
  bootstrap_ = boot.take();
  // Everyone learns who shares a host with whom; rank 0's nonce names this communicator.
  peers_.assign(nranks_, PeerInfo{});
  PeerInfo& me = peers_[rank_];
  me.rank = rank_;
  me.pid = getpid();
  me.hostId = localHostId();
  me.machineId = localMachineId();
  me.shmDisabled = paramInt("SHM_DISABLE") != 0 ? 1 : 0;
  describeCpus(&me);
  me.nonce = randomNonce();
  me.address = bootstrap_->localAddress();
  describeLocalPlacement(me.address, *topo.value(), &me);
  if (linkMbps > 0) me.ifSpeedMbps = static_cast<int32_t>(linkMbps);
  describeExtraInterfaces(bo.preferredInterfaces, &me);
  if (netPlugin_ != nullptr) snprintf(me.netName, sizeof me.netName, "%s", netPlugin_->name());
  describeNetDevices(netPlugin_, topo.value(), &me);
  CHORUS_TRY(bootstrap_->allGather(peers_.data(), sizeof(PeerInfo)));
  for (int r = 0; r < nranks_; ++r)
    if (peers_[r].rank != r)
      return internalError("rank %d: peer table is corrupt (slot %d holds rank %d)", rank_, r,
                           peers_[r].rank);
  Result<FifoGeometry> geometry = fifoGeometry(paramInt("BUFFSIZE"), paramInt("STEPS"));
  if (!geometry.isOk()) return geometry.status();
  transportCtx_.rank = rank_;
  transportCtx_.nranks = nranks_;
  transportCtx_.commTag = hex64(peers_[0].nonce);
  transportCtx_.secret = id.secret ^ peers_[0].nonce;
  transportCtx_.geometry = geometry.value();
  transportCtx_.peers = &peers_;
  transportCtx_.bootstrap = bootstrap_.get();
  transportCtx_.abort = &abort_;
  transportCtx_.errors = this;
  transportCtx_.timeoutSeconds = timeoutSeconds_;
  transportCtx_.topo = topo.value();

  // What the selector knows: hosts, ranks per host, cores per rank, shared memory.
  tuning_.nranks = nranks_;
  std::vector<uint64_t> hosts;
  bool anyShmDisabled = false;
  for (const PeerInfo& p : peers_) {
    anyShmDisabled = anyShmDisabled || p.shmDisabled != 0;
    if (std::find(hosts.begin(), hosts.end(), p.hostId) == hosts.end()) hosts.push_back(p.hostId);
  }
  tuning_.nnodes = static_cast<int>(hosts.size());
  for (uint64_t h : hosts) {
    int local = 0;
    for (const PeerInfo& p : peers_) local += p.hostId == h ? 1 : 0;
    tuning_.localRanks = std::max(tuning_.localRanks, local);
  }
  // Cores are counted per machine: hosts that are network namespaces or containers of one
  // machine share its CPUs.
  tuning_.coresPerRank = fewestCoresPerRank(peers_);
  if (options_.phaseCoresPerRank > 0)
    tuning_.coresPerRank = std::min(tuning_.coresPerRank, options_.phaseCoresPerRank);
  tuning_.shm = !anyShmDisabled;
  // Spinning pays while every rank has a core; with more ranks than cores a waiting rank holds
  // the core its peer needs, so it spins briefly and then yields (CHORUS_SPIN_YIELD_US).
  spinCount_ = paramInt("SPIN_COUNT");
  if (spinCount_ < 0) spinCount_ = tuning_.coresPerRank < 1.0 ? 20 : 2000;
  // The network's figures: through a net plugin, the speeds of the devices the ranks use (a
  // host's devices added up), which move the bytes themselves; else the slowest link speed of
  // any rank's bootstrap interface, the sockets' own.
  if (tuning_.nnodes > 1 || anyShmDisabled) {
    tuning_.netDevice = netPluginBetweenHosts(peers_);
    int slowest = 0;
    for (const PeerInfo& p : peers_)
      if (p.ifSpeedMbps > 0 && (slowest == 0 || p.ifSpeedMbps < slowest)) slowest = p.ifSpeedMbps;
    tuning_.netLinkGBps = slowest / 8000.0;
    if (tuning_.netDevice) {
      const NetDeviceLinks links = netDeviceLinks(peers_);
      tuning_.netLinkGBps = links.rankGBps;
      tuning_.netHostGBps = links.hostGBps;
    }
    if (options_.phaseNetLinkGBps > 0) {
      tuning_.netLinkGBps = options_.phaseNetLinkGBps;
      tuning_.netHostGBps = 0;
    }
  }
  tuning_.directPossible = tuning_.nnodes == 1 && !anyShmDisabled && nranks_ > 1;
  // The hierarchical algorithm wants the same number of ranks (two or more) on every host.
  if (options_.host && tuning_.nnodes > 1 && nranks_ % tuning_.nnodes == 0 &&
      tuning_.localRanks == nranks_ / tuning_.nnodes && tuning_.localRanks > 1)
    tuning_.hierRanksPerHost = tuning_.localRanks;
  if (nranks_ > 1) CHORUS_TRY(startPeerWatch(anyShmDisabled));
  // Rings and trees keep each host's ranks together.
  std::vector<uint64_t> hostOfRank(nranks_);
  for (int r = 0; r < nranks_; ++r) hostOfRank[r] = peers_[r].hostId;
  hosts_ = groupRanksByHost(hostOfRank);
  ringRanks_ = hostContiguousRing(hosts_);
  if (rank_ == 0 && logEnabled(LogLevel::kInfo, kSubsysGraph)) {
    std::string ring;
    for (int r : ringRanks_) ring += formatString(" %d", r);
    LOG_INFO(kSubsysGraph, "ring:%s (%d host%s)", ring.c_str(), tuning_.nnodes,
             tuning_.nnodes == 1 ? "" : "s");
  }
  if (!options_.host) {
    CHORUS_TRY(initDevice(*topo.value()));
    LOG_INFO(kSubsysInit, "rank %d of %d ready (device memory, GPU %d, comm %s)", rank_, nranks_,
             options_.cudaDev, transportCtx_.commTag.c_str());
    return Status::ok();
  }
  // One ring channel and the direct region (small: it serves the latency-bound calls, which
  // should not pay for setup) now; more channels and the trees when first chosen.
  if (nranks_ > 1) CHORUS_TRY(connectRing(1));
  if (tuning_.directPossible &&
      (tuning_.allowed.allows(Algorithm::kOneShot) || tuning_.allowed.allows(Algorithm::kTwoShot)))
    CHORUS_TRY(ensureDirect());
  if (rank_ == 0) {
    std::string net = "none";
    if (tuning_.nnodes > 1 || anyShmDisabled)
      net = formatString("%s, %s", tuning_.netDevice ? peers_[0].netName : "sockets",
                         tuning_.netLinkGBps <= 0 ? "link speed unknown"
                         : tuning_.netDevice
                             ? formatString("%.3g GB/s per rank, %.3g per host",
                                            tuning_.netLinkGBps, tuning_.netHostGBps)
                                   .c_str()
                             : formatString("%.3g GB/s per host", tuning_.netLinkGBps).c_str());
    LOG_INFO(kSubsysTuning,
             "%d ranks on %d host(s), at most %d per host, %.2f cores per rank; network %s; "
             "channels %d..%d; algorithms %s",
             nranks_, tuning_.nnodes, tuning_.localRanks, tuning_.coresPerRank, net.c_str(),
             tuning_.minChannels, tuning_.maxChannels,
             tuning_.allowed.isSet ? tuning_.allowed.text.c_str() : "chosen by the cost model");
  }

  // Windows are read in place unless the user chose the algorithms or turned them off.
  windowsInPlace_ = paramInt("WINDOW") != 0 && tuning_.directPossible && !tuning_.allowed.isSet;
  windowMinBytes_ = static_cast<size_t>(std::max<int64_t>(paramInt("WINDOW_MIN_BYTES"), 0));
  const int64_t inPlaceBytes = paramInt("WINDOW_INPLACE_BYTES");
  exec_.windowInPlaceBytes = inPlaceBytes < 0 ? SIZE_MAX : static_cast<size_t>(inPlaceBytes);

  exec_.rank = rank_;
  exec_.nranks = nranks_;
  exec_.ringIndex =
      static_cast<int>(std::find(ringRanks_.begin(), ringRanks_.end(), rank_) - ringRanks_.begin());
  exec_.ringRanks = ringRanks_.data();
  exec_.channels = &channels_;
  workers_.reset(new ChannelWorkers(spinCount_));
  exec_.workers = workers_.get();
  exec_.abort = &abort_;
  exec_.errors = this;
  exec_.notes = notes_;
  exec_.checkCalls = paramInt("CHECK_CALLS") != 0;
  exec_.timeoutSeconds = timeoutSeconds_;
  exec_.spinCount = spinCount_;
  exec_.yieldMicros = paramInt("SPIN_YIELD_US");
  // The largest cache of the highest level this host reports.
  int llcLevel = 0;
  uint64_t llc = 0;
  for (const CacheSummary& c : topo.value()->caches)
    if (c.level > llcLevel || (c.level == llcLevel && c.sizeBytes > llc)) {
      llcLevel = c.level;
      llc = c.sizeBytes;
    }
  exec_.streamBytes = paramInt("STREAM_BYTES");
  if (exec_.streamBytes < 0) exec_.streamBytes = defaultStreamBytes(llc);
  // A one-shot window all-reduce reads every rank's input: while they fit in a quarter of the
  // last-level cache (8 MiB when unknown) beside the output.
  exec_.windowOneShotBytes = llc > 0 ? llc / 4 : size_t{8} << 20;
  LOG_INFO(kSubsysInit,
           "rank %d of %d ready (%s memory, comm %s; ring outputs from %lld B streamed)", rank_,
           nranks_, options_.host ? "host" : "device", transportCtx_.commTag.c_str(),
           static_cast<long long>(exec_.streamBytes));
  return Status::ok();
}

Transport* Communicator::transportFor(const PeerInfo& peer) {
  if (useShm(peers_[rank_], peer)) {
    if (!shm_) shm_ = makeShmTransport(transportCtx_);
    return shm_.get();
  }
  if (useNetPlugin(peers_[rank_], peer)) {
    if (!net_) net_ = makeNetPluginTransport(transportCtx_, netPlugin_);
    return net_.get();
  }
  if (!socket_) socket_ = makeSocketTransport(transportCtx_);
  return socket_.get();
}

Status Communicator::connectRing(int n) {
  // Called on every collective: nothing to do unless more channels are wanted.
  int first = static_cast<int>(channels_.size());
  if (n <= first) return Status::ok();
  const int pos =
      static_cast<int>(std::find(ringRanks_.begin(), ringRanks_.end(), rank_) - ringRanks_.begin());
  const int next = ringRanks_[(pos + 1) % nranks_];
  const int prev = ringRanks_[(pos + nranks_ - 1) % nranks_];
  channels_.resize(n);
  for (int c = first; c < n; ++c) {
    HostChannel& ch = channels_[c];
    ch.nextRank = next;
    ch.prevRank = prev;
    Transport* recvT = transportFor(peers_[prev]);
    Transport* sendT = transportFor(peers_[next]);
    ch.recvTransport = recvT->name();
    ch.sendTransport = sendT->name();
    ConnectInfo mine = {};
    ConnectInfo theirs = {};
    // Ring steps move bulk: each direction keeps connections of its own.
    CHORUS_TRY(recvT->setupRecv(prev, c, false, &mine, &ch.recv));
    CHORUS_TRY(bootstrap_->send(prev, kTagRingSetup + c, &mine, sizeof(mine)));
    CHORUS_TRY(bootstrap_->recv(next, kTagRingSetup + c, &theirs, sizeof(theirs)));
    CHORUS_TRY(sendT->connectSend(next, c, theirs, &ch.send));
    CHORUS_TRY(recvT->finishRecv(prev, c));
    LOG_INFO(kSubsysInit, "channel %d%s: %d -> %d via %s, %d -> %d via %s", c, options_.logLabel,
             prev, rank_, ch.recvTransport, rank_, next, ch.sendTransport);
  }
  // All senders attached: transports may now release names and start their proxies.
  CHORUS_TRY(bootstrap_->barrier());
  if (shm_) CHORUS_TRY(shm_->afterSetup());
  if (socket_) CHORUS_TRY(socket_->afterSetup());
  return Status::ok();
}

Status Communicator::connectTrees() {
  if (treesConnected_) return Status::ok();
  treesConnected_ = true;
  trees_.fifoSlots = static_cast<int>(transportCtx_.geometry.nslots);
  for (int t = 0; t < kNumTrees; ++t) {
    HostTree& tree = trees_.trees[t];
    tree.node = hostTreeNode(hosts_, rank_, t);
    tree.parent.peer = tree.node.parent;
    for (int c = 0; c < tree.node.nchildren; ++c) tree.children[c].peer = tree.node.children[c];
  }
  // Every receive FIFO first, its description sent at once, so that no rank blocks on a peer
  // before publishing its own: any order of peers is then free of deadlock.
  auto setupRecv = [&](HostTreeLink& link, int channel) -> Status {
    Transport* t = transportFor(peers_[link.peer]);
    link.recvTransport = t->name();
    ConnectInfo info = {};
    // Up and down links use different channels: never one connection.
    CHORUS_TRY(t->setupRecv(link.peer, channel, false, &info, &link.recv));
    return bootstrap_->send(link.peer, treeSetupTag(channel), &info, sizeof(info));
  };
  auto connectSend = [&](HostTreeLink& link, int channel) -> Status {
    Transport* t = transportFor(peers_[link.peer]);
    link.sendTransport = t->name();
    ConnectInfo info = {};
    CHORUS_TRY(bootstrap_->recv(link.peer, treeSetupTag(channel), &info, sizeof(info)));
    return t->connectSend(link.peer, channel, info, &link.send);
  };
  for (int t = 0; t < kNumTrees; ++t) {
    HostTree& tree = trees_.trees[t];
    if (tree.node.parent >= 0) CHORUS_TRY(setupRecv(tree.parent, treeDownChannel(t)));
    for (int c = 0; c < tree.node.nchildren; ++c)
      CHORUS_TRY(setupRecv(tree.children[c], treeUpChannel(t)));
  }
  for (int t = 0; t < kNumTrees; ++t) {
    HostTree& tree = trees_.trees[t];
    if (tree.node.parent >= 0) CHORUS_TRY(connectSend(tree.parent, treeUpChannel(t)));
    for (int c = 0; c < tree.node.nchildren; ++c)
      CHORUS_TRY(connectSend(tree.children[c], treeDownChannel(t)));
  }
  for (int t = 0; t < kNumTrees; ++t) {
    HostTree& tree = trees_.trees[t];
    if (tree.node.parent >= 0)
      CHORUS_TRY(
          transportFor(peers_[tree.parent.peer])->finishRecv(tree.parent.peer, treeDownChannel(t)));
    for (int c = 0; c < tree.node.nchildren; ++c)
      CHORUS_TRY(transportFor(peers_[tree.children[c].peer])
                     ->finishRecv(tree.children[c].peer, treeUpChannel(t)));
    LOG_INFO(kSubsysInit, "tree %d: rank %d parent %d children %d %d (depth %d)", t, rank_,
             tree.node.parent, tree.node.nchildren > 0 ? tree.node.children[0] : -1,
             tree.node.nchildren > 1 ? tree.node.children[1] : -1, tree.node.depth);
  }
  // Every tree sender attached; the transports check that nothing is left half-connected.
  CHORUS_TRY(bootstrap_->barrier());
  if (shm_) CHORUS_TRY(shm_->afterSetup());
  if (socket_) CHORUS_TRY(socket_->afterSetup());
  return Status::ok();
}

Status Communicator::resolveOp(int op, DataType type, RedOp* out, const void** deviceScalar) const {
  if (deviceScalar != nullptr) *deviceScalar = nullptr;
  RedOp& r = *out;
  r.nranks = nranks_;
  if (op >= 0 && op <= static_cast<int>(RedKind::kAvg)) {
    r.kind = static_cast<RedKind>(op);
    return Status::ok();
  }
  size_t index = static_cast<size_t>(op) - 5;
  if (op < 5 || index >= userOps_.size() || !userOps_[index].live)
    return invalidArgument(
        "op %d is neither a built-in reduction nor a live operator of this "
        "communicator",
        op);
  const UserRedOp& u = userOps_[index];
  if (u.type != type)
    return invalidArgument("op %d was created for datatype %s but is used with %s", op,
                           dataTypeName(u.type), dataTypeName(type));
  r = u.op;
  if (u.scalarPtr != nullptr && !options_.host) {
    // Read by the kernel when it runs, as NCCL does with a device scalar.
    if (deviceScalar == nullptr)
      return invalidUsage("op %d reads its scalar from device memory, which this call cannot", op);
    *deviceScalar = u.scalarPtr;
  } else if (u.scalarPtr != nullptr) {
    memcpy(r.scalar, u.scalarPtr, dataTypeSize(type));
  }
  return Status::ok();
}

Result<int> Communicator::createPreMulSum(const void* scalar, DataType type,
                                          bool scalarIsImmediate) {
  UserRedOp u;
  u.live = true;
  u.type = type;
  u.op.kind = RedKind::kPreMulSum;
  u.op.nranks = nranks_;
  if (scalarIsImmediate)
    memcpy(u.op.scalar, scalar, dataTypeSize(type));
  else
    u.scalarPtr = scalar;
  for (size_t i = 0; i < userOps_.size(); ++i) {
    if (!userOps_[i].live) {
      userOps_[i] = u;
      return static_cast<int>(i) + 5;
    }
  }
  userOps_.push_back(u);
  return static_cast<int>(userOps_.size()) + 4;
}

Status Communicator::destroyOp(int op) {
  size_t index = static_cast<size_t>(op) - 5;
  if (op < 5 || index >= userOps_.size() || !userOps_[index].live)
    return invalidArgument("op %d is not a live operator created on this communicator", op);
  userOps_[index].live = false;
  return Status::ok();
}

std::string Communicator::topologyReport(bool dot) const {
  TopoReportInput in;
  in.peers = &peers_;
  in.hosts = &hosts_;
  in.ring = &ringRanks_;
  for (int t = 0; t < kNumTrees; ++t) {
    std::vector<int> parent(nranks_);
    for (int r = 0; r < nranks_; ++r) parent[r] = hostTreeNode(hosts_, r, t).parent;
    in.treeParent.push_back(parent);
  }
  in.shmGBps = costModel().shmGBps;
  in.netGBps = tuning_.netLinkGBps > 0 ? tuning_.netLinkGBps : costModel().netGBps;
  in.shmLatencyUs = costModel().shmStepUs;
  in.netLatencyUs = costModel().netStepUs;
  return dot ? topologyDot(in) : topologyText(in);
}

Decision Communicator::decide(Collective coll, size_t bytes) const {
  return selectAlgorithm(tuning_, coll, bytes);
}

void Communicator::logDecision(Collective coll, size_t bytes, const Decision& d) {
  int sizeClass = 0;
  while (sizeClass < 63 && (uint64_t(2) << sizeClass) <= bytes) ++sizeClass;
  uint64_t& logged = loggedClasses_[static_cast<int>(coll)];
  if (logged & (uint64_t(1) << sizeClass)) return;
  logged |= uint64_t(1) << sizeClass;
  if (rank_ != 0 || !logEnabled(LogLevel::kInfo, kSubsysTuning)) return;
  std::string choice =
      d.algo == Algorithm::kRing
          ? formatString("ring with %d channel%s", d.nchannels, d.nchannels == 1 ? "" : "s")
          : std::string(algorithmName(d.algo));
  LOG_INFO(
      kSubsysTuning, "%s %s class (%zu B): %s, predicted %.1f us%s; alternatives: %s",
      collectiveName(coll), sizeClassLabel(sizeClass).c_str(), bytes, choice.c_str(), d.us,
      d.overrideIgnored
          ? formatString(" (%s names nothing that applies)", tuning_.allowed.text.c_str()).c_str()
          : "",
      describeAlternatives(d).c_str());
}

// Receive connectors from recvFrom and send connectors to sendTo on one channel, into
// (*conns)[peer]. Every receive side is set up and its description sent before this rank waits
// for any peer's, so no order of peers deadlocks; the peers make the matching calls.
Status Communicator::connectPairs(const std::vector<int>& recvFrom, const std::vector<int>& sendTo,
                                  int channel, int tag, bool shareDirections,
                                  std::vector<P2pConnection>* conns) {
  for (int peer : recvFrom) {
    Transport* t = transportFor(peers_[peer]);
    ConnectInfo info = {};
    const bool sendsBack =
        shareDirections && std::find(sendTo.begin(), sendTo.end(), peer) != sendTo.end();
    CHORUS_TRY(t->setupRecv(peer, channel, sendsBack, &info, &(*conns)[peer].recv));
    (*conns)[peer].recvTransport = t->name();
    CHORUS_TRY(bootstrap_->send(peer, tag, &info, sizeof(info)));
  }
  for (int peer : sendTo) {
    Transport* t = transportFor(peers_[peer]);
    ConnectInfo info = {};
    CHORUS_TRY(bootstrap_->recv(peer, tag, &info, sizeof(info)));
    CHORUS_TRY(t->connectSend(peer, channel, info, &(*conns)[peer].send));
    (*conns)[peer].sendTransport = t->name();
  }
  for (int peer : recvFrom) CHORUS_TRY(transportFor(peers_[peer])->finishRecv(peer, channel));
  return Status::ok();
}

// Every rank connects to all its partners in the same call (the selector decides alike on
// every rank).
Status Communicator::connectRd() {
  if (!rdConns_.empty()) return Status::ok();
  std::vector<P2pConnection> conns(static_cast<size_t>(nranks_));
  const std::vector<int> partners = rdPartners(nranks_, rank_);
  // Small messages both ways between the same partners: one connection for both directions
  // where the transport can (over TCP the exchange then takes two segments, not four).
  CHORUS_TRY(connectPairs(partners, partners, kRdChannel, kTagRdSetup, true, &conns));
  LOG_INFO(kSubsysInit, "rank %d: recursive-doubling links to %zu partner(s)", rank_,
           partners.size());
  rdConns_ = std::move(conns);
  return Status::ok();
}

Status Communicator::ensureDirect() {
  if (direct_ && !direct_->broken()) return Status::ok();
  if (direct_)
    return internalError("rank %d: the direct region is unusable after a failure", rank_);
  Result<std::unique_ptr<DirectRegion>> region =
      DirectRegion::create(transportCtx_, tuning_.directChunkBytes);
  if (!region.isOk()) return region.status();
  direct_ = region.take();
  return Status::ok();
}

Status Communicator::run(HostWork* works, size_t n) {
  CHORUS_TRY(checkUsable());
  if (lastCallFailed_.load(std::memory_order_relaxed))
    lastCallFailed_.store(false, std::memory_order_relaxed);
  for (size_t k = 0; k < n; ++k)
    works[k].args.tag = collectiveTag(works[k].coll, works[k].args, ++collectiveCalls_);
  // For dumps and the local peers' watch.
  if (n > 0) noteCall(works[0].args.tag, kCollective);
  struct Idle {
    std::atomic<uint32_t>& activity;
    ~Idle() { activity.store(kIdle, std::memory_order_relaxed); }
  } idle{activity_};
  if (device_) return runDevice(works, n);
  int channels = 1;
  bool tree = false, direct = false, rd = false, hier = false;
  for (size_t k = 0; k < n; ++k) {
    HostWork& w = works[k];
    if (compresses(w)) continue;  // its own exchange (comm_compress.cc)
    const size_t elt = dataTypeSize(w.args.type);
    size_t bytes = w.args.count * elt;
    if (w.coll == Collective::kAllGather || w.coll == Collective::kReduceScatter)
      bytes *= static_cast<size_t>(nranks_);
    // A window call meets on the direct region, and may fall back to the decision below.
    const bool windowed = windowsInPlace_ && !windows_.empty() && useWindows(w, bytes);
    direct = direct || windowed;
    // Calls repeat sizes: the last decision per collective is kept.
    CachedDecision& cached = lastDecision_[static_cast<int>(w.coll)];
    if (!cached.valid || cached.bytes != bytes) {
      cached.decision = decide(w.coll, bytes);
      cached.bytes = bytes;
      cached.valid = true;
      if (w.args.count > 0) logDecision(w.coll, bytes, cached.decision);
    }
    const Decision& d = cached.decision;
    w.algo = d.algo;
    w.args.nchannels = d.algo == Algorithm::kRing && !windowed ? d.nchannels : 1;
    channels = std::max(channels, w.args.nchannels);
    tree = tree || (d.algo == Algorithm::kTree && w.args.count > 0);
    rd = rd || (d.algo == Algorithm::kRd && w.args.count > 0);
    hier = hier || (d.algo == Algorithm::kHier && w.args.count > 0);
    direct = direct ||
             ((d.algo == Algorithm::kOneShot || d.algo == Algorithm::kTwoShot) && w.args.count > 0);
  }
  if (nranks_ > 1) {
    // Every rank reaches the same decisions, so all connect the same links here together.
    Status s = connectRing(channels);
    if (s.isOk() && tree) s = connectTrees();
    if (s.isOk() && direct) s = ensureDirect();
    if (s.isOk() && rd) s = connectRd();
    if (s.isOk() && hier) s = ensureHier();
    if (!s.isOk()) {
      s = s.withContext(formatString("rank %d: connecting for a collective", rank_));
      // Ranks that connected go on to wait for this one: the communicator fails.
      failIfOutOfStep(s);
      return explain(s);
    }
  }
  LaunchResources resources;
  resources.trees = treesConnected_ ? &trees_ : nullptr;
  resources.direct = direct_.get();
  resources.directStores = &directStores_;
  resources.rd = rdConns_.empty() ? nullptr : &rdConns_;
  resources.windows = &windows_;
  callChannels_.store(channels, std::memory_order_relaxed);
  // Hierarchical works run on their own communicators and compressed ones as exchanges of
  // their own, between launches of the others (in order, as in one launch).
  auto apart = [&](size_t k) {
    return compresses(works[k]) ||
           (works[k].algo == Algorithm::kHier && works[k].args.count > 0 && nranks_ > 1);
  };
  Status s = Status::ok();
  for (size_t k = 0; k < n && s.isOk(); ++k) {
    if (apart(k)) {
      s = compresses(works[k]) ? runCompressed(works[k]) : runHier(works[k]);
      continue;
    }
    size_t end = k;
    while (end < n && !apart(end)) ++end;
    nextLaunch();
    s = hostLaunch(exec_, works + k, end - k, resources);
    k = end - 1;
  }
  if (!s.isOk()) {
    writeDump("failure", s.message());
    failIfOutOfStep(s);
    return explain(s);
  }
  return s;
}

// Both ends of a new pair run this in the same group, so the receiver's description is sent
// before anyone blocks on a peer's: no ordering of peers can deadlock.
Status Communicator::connectP2p(const std::vector<P2pOp>& ops) {
  if (p2pConns_.empty()) p2pConns_.resize(nranks_);
  std::vector<int> newRecv, newSend;
  for (const P2pOp& op : ops) {
    if (op.peer == rank_ || op.bytes == 0) continue;
    P2pConnection& c = p2pConns_[op.peer];
    std::vector<int>& list = op.isSend ? newSend : newRecv;
    bool ready = op.isSend ? c.send.valid() : c.recv.valid();
    if (!ready && std::find(list.begin(), list.end(), op.peer) == list.end())
      list.push_back(op.peer);
  }
  CHORUS_TRY(connectPairs(newRecv, newSend, kP2pChannel, kTagP2pSetup, false, &p2pConns_));
  if (!newRecv.empty() || !newSend.empty())
    LOG_INFO(kSubsysP2p, "rank %d: connected %zu new receive and %zu new send peers", rank_,
             newRecv.size(), newSend.size());
  return Status::ok();
}

Status Communicator::runP2p(const std::vector<P2pOp>& ops) {
  // Each transfer says which send between its two ranks it is (call_tag.h).
  std::vector<P2pOp> tagged = ops;
  if (sendCalls_.empty()) {
    sendCalls_.assign(nranks_, 0);
    recvCalls_.assign(nranks_, 0);
  }
  for (P2pOp& op : tagged)
    if (op.peer != rank_)
      op.tag = sendTag(++(op.isSend ? sendCalls_ : recvCalls_)[op.peer], op.bytes);
  callChannels_.store(1, std::memory_order_relaxed);
  nextLaunch();
  return hostP2p(exec_, tagged, p2pConns_);
}

Status Communicator::p2p(const std::vector<P2pOp>& ops) {
  CHORUS_TRY(checkUsable());
  if (lastCallFailed_.load(std::memory_order_relaxed))
    lastCallFailed_.store(false, std::memory_order_relaxed);
  if (device_) return runDeviceP2p(ops);
  Status s = connectP2p(ops);
  if (!s.isOk()) {
    std::string peers;
    for (const P2pOp& op : ops) {
      if (op.peer == rank_) continue;
      peers += formatString("%s%s rank %d", peers.empty() ? "" : ", ",
                            op.isSend ? "ncclSend to" : "ncclRecv from", op.peer);
    }
    s = s.withContext(formatString(
        "rank %d: connecting for %s (each peer must post its matching calls, in a group when "
        "several depend on each other)",
        rank_, peers.c_str()));
    failIfOutOfStep(s, true);
  }
  if (s.isOk()) {
    activity_.store(kP2p, std::memory_order_relaxed);
    s = runP2p(ops);
    if (!s.isOk()) {
      writeDump("failure", s.message());
      failIfOutOfStep(s);
    }
    activity_.store(kIdle, std::memory_order_relaxed);
  }
  if (!s.isOk()) return explain(s);
  return s;
}

Status Communicator::finalize() {
  CHORUS_TRY(checkUsable());
  // Collectives complete before returning on host communicators, so nothing is in flight; the
  // barrier keeps peers from tearing down connections another rank still drains.
  if (bootstrap_ && nranks_ > 1) CHORUS_TRY(bootstrap_->barrier());
  finalized_.store(true);
  return Status::ok();
}

void Communicator::setLastError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = message;
}

std::string Communicator::lastError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lastError_;
}

}  // namespace chorus
