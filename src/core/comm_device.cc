// Device communicators: the part of Communicator that sets up the GPU FIFOs (cuda/dev_comm.h)
// and queues collectives on the caller's streams.
#include <algorithm>

#include "common/log.h"
#include "common/param.h"
#include "core/comm.h"

namespace chorus {

namespace {
// Host connectors of device links (dev::ConnectHostFn): channels and bootstrap tags of their own.
constexpr int kDeviceHostChannelBase = 400;
constexpr int kTagDeviceHostSetup = 1500;
}  // namespace

Status Communicator::initDevice(const LocalTopology& topo) {
  dev::DeviceCommSetup s;
  s.rank = rank_;
  s.nranks = nranks_;
  s.ringRanks = &ringRanks_;
  s.bootstrap = bootstrap_.get();
  s.topo = &topo;
  s.hostId = peers_[rank_].hostId;
  Result<DevicePathOptions> paths = devicePathOptionsFromEnv();
  if (!paths.isOk()) return paths.status().withContext(formatString("rank %d init", rank_));
  s.paths = paths.value();
  Result<dev::ProtoMask> protos = dev::protoOverride();
  if (!protos.isOk()) return protos.status().withContext(formatString("rank %d init", rank_));
  s.shape.protos = protos.value();
  s.shape.algos = tuning_.allowed;
  s.shape.minChannels = tuning_.minChannels;
  s.shape.maxChannels = tuning_.maxChannels;
  s.nthreads = static_cast<int>(paramInt("DEVICE_THREADS"));
  if (s.nthreads < dev::kMinBlockThreads || s.nthreads > dev::kBlockThreads || s.nthreads % 32 != 0)
    return invalidArgument("rank %d init: %s=%d is not a multiple of 32 in [%d, %d]", rank_,
                           paramRaw("DEVICE_THREADS").source.c_str(), s.nthreads,
                           dev::kMinBlockThreads, dev::kBlockThreads);
  s.nchannels = static_cast<int>(paramInt("DEVICE_CHANNELS"));
  if (s.nchannels < 1 || s.nchannels > dev::kMaxChannels)
    return invalidArgument("rank %d init: %s=%d is outside [1, %d]", rank_,
                           paramRaw("DEVICE_CHANNELS").source.c_str(), s.nchannels,
                           dev::kMaxChannels);
  const int64_t direct = paramInt("DEVICE_DIRECT_BUFFSIZE");
  if (direct < 0 || direct > (int64_t(16) << 20) || direct % 256 != 0)
    return invalidArgument("rank %d init: %s=%lld is not 0 or a multiple of 256 up to 16 MiB",
                           rank_, paramRaw("DEVICE_DIRECT_BUFFSIZE").source.c_str(),
                           static_cast<long long>(direct));
  s.directBytes = static_cast<uint32_t>(direct);
  // Simple slots hold the FIFO's share of BUFFSIZE; LL slots an eighth of that in lines.
  const FifoGeometry& g = transportCtx_.geometry;
  for (int p = 0; p < dev::kNumProtos; ++p) s.nslots[p] = g.nslots;
  s.slotBytes[static_cast<int>(dev::Proto::kSimple)] = g.slotBytes / 16 * 16;
  s.slotBytes[static_cast<int>(dev::Proto::kLl)] =
      std::max<uint32_t>(g.slotBytes / 8 / 16 * 16, 256);
  s.connectHost = [this](int channel, const std::vector<int>& recvFrom,
                         const std::vector<int>& sendTo, dev::HostLinks* links) {
    return connectDeviceHost(channel, recvFrom, sendTo, links);
  };
  // Network links choose their NICs near the GPU (net plugin transport).
  s.gpuFound = [this](const std::string& busId) { transportCtx_.gpuBusId = busId; };
  s.gpuDirect = [this](int peer) { return deviceGpuDirect(peer); };
  Result<std::unique_ptr<dev::DeviceComm>> d = dev::DeviceComm::create(s);
  if (!d.isOk()) return d.status().withContext(formatString("rank %d init", rank_));
  device_ = d.take();
  // Every host connector is attached by now (creation ends with all ranks agreeing).
  if (socket_) CHORUS_TRY(socket_->afterSetup());
  if (shm_) CHORUS_TRY(shm_->afterSetup());
  options_.cudaDev = device_->cudaDev();
  return Status::ok();
}

Result<NetGdr> Communicator::deviceGpuDirect(int peer) {
  if (peer < 0 || peer >= nranks_ || peer == rank_)
    return internalError("rank %d: no device link to rank %d", rank_, peer);
  return transportFor(peers_[peer])->gpuDirect();
}

Status Communicator::connectDeviceHost(int channel, const std::vector<int>& recvFrom,
                                       const std::vector<int>& sendTo, dev::HostLinks* links) {
  if (channel < 0 || channel >= dev::kHostChannels)
    return internalError("rank %d: device host channel %d is outside [0, %d)", rank_, channel,
                         dev::kHostChannels);
  if (deviceHostConns_.empty()) deviceHostConns_.resize(dev::kHostChannels);
  std::vector<P2pConnection>& conns = deviceHostConns_[static_cast<size_t>(channel)];
  if (conns.empty()) conns.resize(static_cast<size_t>(nranks_));
  // The device communicator's proxy may place a link's slots in the device FIFO's own memory
  // (DeviceProxy::addRecv): until it says, the receiving end posts nothing.
  for (int peer : recvFrom) transportFor(peers_[peer])->holdReceives(true);
  // Channel numbers and bootstrap tags of their own, apart from the host collectives'.
  Status s = connectPairs(recvFrom, sendTo, kDeviceHostChannelBase + channel,
                          kTagDeviceHostSetup + channel, false, &conns);
  for (int peer : recvFrom) transportFor(peers_[peer])->holdReceives(false);
  CHORUS_TRY(s);
  links->send.assign(static_cast<size_t>(nranks_), nullptr);
  links->recv.assign(static_cast<size_t>(nranks_), nullptr);
  for (int peer : sendTo) links->send[static_cast<size_t>(peer)] = &conns[peer].send;
  for (int peer : recvFrom) links->recv[static_cast<size_t>(peer)] = &conns[peer].recv;
  LOG_INFO(kSubsysInit, "rank %d: device host channel %d: %zu send and %zu receive connector(s)",
           rank_, channel, sendTo.size(), recvFrom.size());
  return Status::ok();
}

Status Communicator::runDevice(const HostWork* works, size_t n) {
  // Consecutive calls on one stream are planned together (one launch per kernel they need).
  std::vector<dev::DeviceCall> calls;
  size_t k = 0;
  while (k < n) {
    void* stream = works[k].stream;
    calls.clear();
    for (; k < n && works[k].stream == stream; ++k) {
      const HostWork& w = works[k];
      dev::DeviceCall c;
      c.coll = w.coll;
      c.type = w.args.type;
      c.op = w.args.op;
      c.count = w.args.count;
      c.sendbuff = w.args.sendbuff;
      c.recvbuff = w.args.recvbuff;
      c.root = w.args.root;
      c.scalarDevice = w.args.scalarDevice;
      calls.push_back(c);
    }
    Status s = device_->enqueue(calls.data(), calls.size(), stream);
    if (!s.isOk()) return s.withContext(formatString("rank %d", rank_));
  }
  return Status::ok();
}

Status Communicator::runDeviceP2p(const std::vector<P2pOp>& ops) {
  if (ops.empty()) return Status::ok();
  // One group's transfers run as launches that meet the peers' launches in a fixed order
  // (encodeP2pLaunches), so they share one stream.
  void* stream = ops[0].stream;
  std::vector<dev::DeviceP2p> list;
  list.reserve(ops.size());
  for (const P2pOp& op : ops) {
    if (op.stream != stream)
      return invalidUsage(
          "rank %d: the sends and receives of one group on a device communicator must use one "
          "stream; this group names stream %p and stream %p",
          rank_, stream, op.stream);
    dev::DeviceP2p d;
    d.isSend = op.isSend;
    d.peer = op.peer;
    d.sendbuff = op.sendbuff;
    d.recvbuff = op.recvbuff;
    d.bytes = op.bytes;
    list.push_back(d);
  }
  Status s = device_->enqueueP2p(list.data(), list.size(), stream);
  if (!s.isOk()) return explain(s);
  return s;
}

}  // namespace chorus
