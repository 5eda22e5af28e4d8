// The net plugin transport: ranks on different hosts through an NCCL net plugin. As with the
// socket transport, each connector is a FIFO in local memory whose far end is this
// communicator's proxy; here the proxy moves slots with the plugin's isend/irecv/test. Each slot
// travels as two messages, its 32-byte SlotInfo (size and call) and its data, both from memory
// registered with the plugin once per connection, tagged 2r and 2r + 1 by their sender r; at
// most kInFlight slots per connection are posted at a time (the plugin's request limit is far
// above). Receives are posted ahead into free slots, a slot's two as one grouped receive where
// the device takes them (maxRecvs of 2 or more). Setup never blocks on the plugin: connect and
// accept are retried by whoever drives progress (finishRecv's wait, the proxy), so two ranks that
// connect to each other before accepting do not wait on each other. The receiver chooses its device
// and tells the sender its rail and plane (v12 properties); the sender takes a device of the same
// rail and plane, so a link never joins two rails of a fabric whose rails do not reach each other.
// Idle, the proxy naps (a plugin has nothing to sleep on), or, over a network that names its
// descriptors (NetPlugin::pollFds: Chorus's socket network), sleeps in poll on them.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/net_plugin/net_conn.h"
#include "transport/net_plugin/net_plugin.h"
#include "transport/transport.h"

namespace chorus {

namespace {

using namespace net_detail;

class NetTransport final : public Transport, public ProxyLink {
 public:
  NetTransport(const TransportContext& ctx, NetPlugin* plugin) : ctx_(ctx), plugin_(plugin) {
    doorbellFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::vector<pollfd> none;
    onFds_ = plugin_->pollFds(nullptr, &none);
    chooseDevices();
  }

  ~NetTransport() override {
    stop_.store(true);
    if (doorbellFd >= 0) ring();
    if (proxy_.joinable()) proxy_.join();
    for (auto& c : conns_) close(*c);
    if (doorbellFd >= 0) ::close(doorbellFd);
  }

  const char* name() const override { return "net"; }

  void holdReceives(bool on) override {
    std::lock_guard<std::mutex> lock(mutex_);
    holding_ = on;
  }

  // GPU memory where every device a link may use reaches it (NCCL_PTR_CUDA, or a dma-buf)
  // within NET_GDR_LEVEL of the GPU: for receives this rank's channels' devices, flushed; for
  // sends also the devices of rails none of those is on (sendDevice may take them).
  Result<NetGdr> gpuDirect() override {
    NetGdrOptions o;
    CHORUS_ASSIGN_OR_RETURN(o, netGdrOptionsFromEnv());
    // A device of another rank's rail (and plane) that none of this rank's devices is on.
    std::vector<int> senders = devices_;
    auto covered = [&](size_t d) {
      for (int own : devices_)
        if (rails_[static_cast<size_t>(own)] == rails_[d] &&
            planes_[static_cast<size_t>(own)] == planes_[d])
          return true;
      return false;
    };
    for (size_t d = 0; d < rails_.size(); ++d)
      if (rails_[d] >= 0 && !covered(d)) senders.push_back(static_cast<int>(d));
    const NetGdr recv = chooseNetGdr(o, gdrDevices(devices_));
    const NetGdr send = chooseNetGdr(o, gdrDevices(senders));
    NetGdr g;
    g.recv = recv.recv;
    g.send = send.send;
    g.dmabufOnly = (g.recv && recv.dmabufOnly) || (g.send && send.dmabufOnly);
    g.why = senders.size() == devices_.size()
                ? recv.why
                : formatString("receives: %s; sends, also through other rails' devices: %s",
                               recv.why.c_str(), send.why.c_str());
    return g;
  }

  Result<bool> placeSlots(const void* fifo, const SlotMemory* mem) override {
    std::lock_guard<std::mutex> lock(mutex_);
    NetConn* c = nullptr;
    for (auto& conn : conns_)
      if (conn->fifo == fifo) c = conn.get();
    if (c == nullptr) return internalError("net plugin transport: no connection has that FIFO");
    if (c->held) ring();  // its receives may be posted now
    c->held = false;
    if (mem == nullptr || c->placed || c->posted != 0 ||
        c->fifo->tail.load(std::memory_order_acquire) != 0 || paramInt("NET_PLACE_SLOTS") == 0 ||
        mem->nslots != ctx_.geometry.nslots || mem->slotBytes == 0 ||
        mem->slotBytes > ctx_.geometry.slotBytes || mem->data == nullptr)
      return false;
    NetPlugin::Properties p;
    if (!plugin_->properties(c->dev, &p).isOk()) return false;
    // GPU memory by address, or as the dma-buf it comes with.
    const bool reaches = !mem->device
                             ? (p.ptrSupport & NCCL_PTR_HOST) != 0
                             : (p.ptrSupport & NCCL_PTR_CUDA) != 0 ||
                                   (mem->dmabufFd >= 0 && (p.ptrSupport & NCCL_PTR_DMABUF) != 0);
    if (!reaches || (mem->device && !c->isSend && !plugin_->flushesDevice())) return false;
    c->placed = true;
    c->place = *mem;
    if (c->comm != nullptr) {
      Status st = registerPlaced(*c);
      if (!st.isOk()) {
        fail(*c, st);
        return st;
      }
    }
    return true;
  }

  Status setupRecv(int peer, int channel, bool sendsBack, ConnectInfo* info,
                   RecvConnector* conn) override {
    std::unique_ptr<NetConn> c =
        newConn(false, peer, channel, devices_[static_cast<size_t>(channel) % devices_.size()]);
    c->awaitsShare = sendsBack && plugin_->bothWays();
    NetInfo ni{};
    ni.magic = kInfoMagic;
    ni.sendsBack = c->awaitsShare ? 1 : 0;
    ni.rail = static_cast<int16_t>(rails_[static_cast<size_t>(c->dev)]);
    ni.plane = static_cast<int16_t>(planes_[static_cast<size_t>(c->dev)]);
    CHORUS_TRY(plugin_->listen(c->dev, ni.handle, &c->listenComm)
                   .withContext(formatString("net plugin transport: listening for rank %d", peer)));
    memcpy(info->bytes, &ni, sizeof ni);
    *conn = RecvConnector(c->memory.get());
    return addConn(std::move(c));
  }

  Status connectSend(int peer, int channel, const ConnectInfo& info, SendConnector* conn) override {
    NetInfo ni;
    memcpy(&ni, info.bytes, sizeof ni);
    if (ni.magic != kInfoMagic)
      return remoteError("net plugin transport: rank %d's connection info is not a plugin's", peer);
    // The device is this host's; the receiver's rail and plane say which of them reach it.
    std::unique_ptr<NetConn> c =
        newConn(true, peer, channel, sendDevice(peer, channel, ni.rail, ni.plane));
    memcpy(c->handle, ni.handle, sizeof c->handle);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& r : conns_) {
        if (r->isSend || r->peer != peer || r->channel != channel || !r->awaitsShare) continue;
        r->awaitsShare = false;
        if (ni.sendsBack == 0) break;
        // The lower rank connects the pair's connection, the higher accepts it.
        c->share = ctx_.rank < peer ? NetConn::kMakes : NetConn::kWaits;
        r->share = ctx_.rank < peer ? NetConn::kWaits : NetConn::kMakes;
        c->twin = r.get();
        r->twin = c.get();
        break;
      }
    }
    *conn = SendConnector(c->memory.get());
    return addConn(std::move(c));
  }

  // Drives every pending connect and accept until peer's sender connected on channel.
  Status finishRecv(int peer, int channel) override {
    Waiter waiter(ctx_.timeoutSeconds, ctx_.abort, 200);
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto& c : conns_) {
          if (c->isSend || c->peer != peer || c->channel != channel) continue;
          setup(*c);
          if (c->failed) return remoteError("net plugin transport: accepting rank %d failed", peer);
          if (c->comm != nullptr) return Status::ok();
        }
        for (auto& c : conns_) setup(*c);
      }
      Code code = waiter.pauseAny();
      if (code != Code::kInProgress)
        return Status(code,
                      formatString("net plugin transport: waiting for rank %d to connect "
                                   "(channel %d)%s",
                                   peer, channel, code == Code::kRemoteError ? ": timed out" : ""));
    }
  }

  void tryProgress(const void* recvFifo) override {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (lock.owns_lock()) progress(false, recvFifo);
  }
  void tryProgressAll() override {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (lock.owns_lock()) progress(true, nullptr);
  }
  bool progressNeedsProxy() override {
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return true;
    progress(false, nullptr);
    for (auto& c : conns_) {
      if (c->failed) continue;
      if (!onFds_) {
        if (c->isSend && c->posted < c->fifo->tail.load(std::memory_order_acquire)) return true;
        continue;
      }
      // On descriptors: whatever a connection now waits on that the sleeping proxy does not
      // watch (receives left to the drivers aside), as the socket transport compares.
      if (c->comm == nullptr) return true;
      if (!c->isSend && recvLeftToDrivers_) continue;
      scratchFds_.clear();
      plugin_->pollFds(c->comm, &scratchFds_);
      for (const pollfd& want : scratchFds_) {
        bool watched = false;
        for (const pollfd& w : c->watched)
          watched = watched || (w.fd == want.fd && (want.events & ~w.events) == 0);
        if (!watched) return true;
      }
    }
    return false;
  }

 private:
  // The devices this rank's channels take in turn: those on its NUMA node, if any (a host with
  // a NIC per socket, or per GPU, keeps each rank's traffic off the other socket), else all.
  void chooseDevices() {
    std::vector<int> nodes;
    std::string where;
    for (int d = 0; d < plugin_->devices(); ++d) {
      NetPlugin::Properties p;
      const bool ok = plugin_->properties(d, &p).isOk();
      nodes.push_back(ok ? netDeviceNumaNode(p.pciPath) : -1);
      buses_.push_back(ok ? netDeviceBusId(p.pciPath) : "");
      rails_.push_back(ok && p.railId >= 0 ? p.railId : -1);
      planes_.push_back(ok && p.railId >= 0 ? p.planeId : -1);
      where += formatString("%s%d %s(NUMA node %d%s)", d == 0 ? "" : ", ", d,
                            ok ? (p.name + " ").c_str() : "", nodes.back(), railText(d).c_str());
    }
    if (rails_.empty()) {
      rails_.push_back(-1);
      planes_.push_back(-1);
    }
    const bool known = ctx_.peers != nullptr && ctx_.rank >= 0 &&
                       static_cast<size_t>(ctx_.rank) < ctx_.peers->size();
    const int node = known ? (*ctx_.peers)[ctx_.rank].numaNode : -1;
    const NetDeviceChoice choice = chooseNetDevices(nodes, buses_, ctx_.topo, node, ctx_.gpuBusId);
    devices_ = choice.devices;
    std::string chosen;
    for (int d : devices_) chosen += formatString("%s%d", chosen.empty() ? "" : ",", d);
    const std::string why =
        choice.nearGpu    ? formatString("this rank's GPU %s is %s to them", ctx_.gpuBusId.c_str(),
                                         pciDistanceName(choice.gpuDistance))
        : choice.node < 0 ? std::string("placement by NUMA node is off")
                          : formatString("this rank is on NUMA node %d", node);
    LOG_INFO(kSubsysNet, "rank %d: net plugin %s devices %s; %s: its channels use device%s %s",
             ctx_.rank, plugin_->name(), where.c_str(), why.c_str(),
             devices_.size() == 1 ? "" : "s", chosen.c_str());
  }

  // What the devices `devs` offer GPU memory: the pointers all take, the farthest of their
  // distances to this rank's GPU, whether the plugin flushes.
  NetGdrDevices gdrDevices(const std::vector<int>& devs) {
    NetGdrDevices d;
    d.count = static_cast<int>(devs.size());
    d.ptrSupport = ~0;
    d.distance = PciDistance::kSelf;
    d.flush = plugin_->flushesDevice();
    std::lock_guard<std::mutex> lock(mutex_);
    for (int dev : devs) {
      NetPlugin::Properties p;
      d.ptrSupport &= plugin_->properties(dev, &p).isOk() ? p.ptrSupport : 0;
      // (A plugin that lists no device leaves device 0 without a bus id.)
      const std::string bus =
          static_cast<size_t>(dev) < buses_.size() ? buses_[static_cast<size_t>(dev)] : "";
      const PciDistance dist = ctx_.topo != nullptr && !bus.empty() && !ctx_.gpuBusId.empty()
                                   ? pciDistance(*ctx_.topo, ctx_.gpuBusId, bus)
                                   : PciDistance::kUnknown;
      d.distance = std::max(d.distance, dist);
    }
    return d;
  }

  std::string railText(int dev) const {
    const size_t d = static_cast<size_t>(dev);
    return rails_[d] < 0 ? std::string()
                         : formatString(", rail %d plane %d", rails_[d], planes_[d]);
  }

  // The device that sends to a receiver whose device is on (rail, plane): this rank's own
  // choice for the channel when that is on it or the rail is unknown; else, in turn by channel,
  // its chosen devices on it, then any device on it; none: its own choice, with a warning.
  int sendDevice(int peer, int channel, int rail, int plane) const {
    const size_t ch = static_cast<size_t>(channel);
    const int own = devices_[ch % devices_.size()];
    auto on = [&](int d) {
      return rails_[static_cast<size_t>(d)] == rail && planes_[static_cast<size_t>(d)] == plane;
    };
    if (rail < 0 || rails_[static_cast<size_t>(own)] < 0 || on(own)) return own;
    std::vector<int> near, any;
    for (int d : devices_)
      if (on(d)) near.push_back(d);
    for (int d = 0; d < static_cast<int>(rails_.size()); ++d)
      if (on(d)) any.push_back(d);
    if (!near.empty()) return near[ch % near.size()];
    if (!any.empty()) return any[ch % any.size()];
    LOG_WARN(kSubsysNet,
             "rank %d: net plugin %s has no device on rail %d plane %d, where rank %d receives "
             "channel %d: sending through device %d%s",
             ctx_.rank, plugin_->name(), rail, plane, peer, channel, own, railText(own).c_str());
    return own;
  }

  void retireSlots(const void* fifo) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& c : conns_) {
      if (c->fifo != fifo || !c->placed) continue;
      // The plugin has no way to take back a posted receive: the connection ends with it.
      close(*c);
      c->failed = true;
      c->placed = false;
      LOG_INFO(kSubsysNet, "rank %d: %s rank %d channel %d: closed with the device FIFO's memory",
               ctx_.rank, c->isSend ? "sending to" : "receiving from", c->peer, c->channel);
    }
  }

  std::unique_ptr<NetConn> newConn(bool isSend, int peer, int channel, int dev) {
    auto c = std::make_unique<NetConn>();
    c->isSend = isSend;
    c->held = !isSend && holding_;
    c->peer = peer;
    c->channel = channel;
    c->dev = dev;
    NetPlugin::Properties p;
    c->grouped = !isSend && paramInt("NET_GROUPED_RECVS") != 0 &&
                 plugin_->properties(dev, &p).isOk() && p.maxRecvs >= 2;
    c->memory = allocLocalFifo(ctx_.geometry, this, &c->fifo, &c->data);
    return c;
  }

  Status addConn(std::unique_ptr<NetConn> c) {
    if (doorbellFd < 0) return errnoError(EMFILE, "net plugin transport: eventfd for the proxy");
    std::lock_guard<std::mutex> lock(mutex_);
    if (c->isSend) setup(*c);
    conns_.push_back(std::move(c));
    if (!proxy_.joinable())
      proxy_ = std::thread([this] { proxyLoop(); });
    else
      ring();  // a proxy asleep on descriptors has the new connection to set up
    return Status::ok();
  }

  // A receive that fails ends the waits on its FIFO with the reason, and nothing more: a peer
  // that finished and closed its connections looks the same to a plugin as one that died, and
  // is no error unless this rank still waits for it. A failed send loses data: the
  // communicator fails.
  void fail(NetConn& c, const Status& s) {
    if (c.failed) return;
    c.failed = true;
    Status st =
        s.withContext(formatString("net plugin %s: %s rank %d (channel %d)", plugin_->name(),
                                   c.isSend ? "sending to" : "receiving from", c.peer, c.channel));
    if (!c.isSend) {
      LOG_INFO(kSubsysNet, "%s", st.message().c_str());
      closeFromPeer(c.fifo, st.message());
      return;
    }
    LOG_WARN(kSubsysNet, "%s", st.message().c_str());
    // Nothing more leaves: a party waiting for its slots to be sent stops waiting.
    c.fifo->peerClosed.store(1, std::memory_order_release);
    ctx_.errors->reportAsyncError(remoteError("%s", st.message().c_str()));
  }

  // The party's memory a placed connection moves slots from or into: through its dma-buf
  // where it has one and the device takes them, else by address (GPU memory as NCCL_PTR_CUDA).
  Status registerPlaced(NetConn& c) {
    NetPlugin::Properties p;
    CHORUS_TRY(plugin_->properties(c.dev, &p));
    const SlotMemory& m = c.place;
    const size_t bytes = size_t(m.nslots) * m.slotBytes;
    const bool dmabuf = m.dmabufFd >= 0 && (p.ptrSupport & NCCL_PTR_DMABUF) != 0;
    Status s = dmabuf     ? plugin_->regMrDmaBuf(c.comm, m.data, bytes,
                                             m.device ? NCCL_PTR_CUDA : NCCL_PTR_HOST,
                                                 m.dmabufOffset, m.dmabufFd, &c.placedMr)
               : m.device ? plugin_->regMrDevice(c.comm, m.data, bytes, &c.placedMr)
                          : plugin_->regMr(c.comm, m.data, bytes, &c.placedMr);
    if (s.isOk())
      LOG_INFO(kSubsysNet, "rank %d: %s rank %d channel %d: the device FIFO's %s memory itself%s",
               ctx_.rank, c.isSend ? "sending to" : "receiving from", c.peer, c.channel,
               m.device ? "GPU" : "host", dmabuf ? ", as a dma-buf" : "");
    return s.withContext("registering the device FIFO's slots");
  }

  // One non-blocking try at the connection of c; registers its memory once connected.
  void setup(NetConn& c) {
    if (c.comm != nullptr || c.failed || c.awaitsShare) return;
    Status s = Status::ok();
    if (c.share == NetConn::kOwn) {
      s = c.isSend ? plugin_->connect(c.dev, c.handle, &c.comm)
                   : plugin_->accept(c.listenComm, &c.comm);
    } else if (c.share == NetConn::kMakes) {
      void* other = nullptr;
      s = c.isSend ? plugin_->connectBoth(c.dev, c.handle, &c.comm, &other)
                   : plugin_->acceptBoth(c.listenComm, &c.comm, &other);
      if (s.isOk() && c.comm != nullptr) c.twin->given = other;
    } else {
      // The twin makes the connection of both directions.
      if (c.given == nullptr && !c.twin->failed) setup(*c.twin);
      if (c.given == nullptr && c.twin->failed)
        s = remoteError("the connection of both directions failed");
      c.comm = c.given;
      c.given = nullptr;
    }
    if (s.isOk() && c.comm != nullptr) {
      s = plugin_->regMr(c.comm, c.data, size_t(ctx_.geometry.nslots) * ctx_.geometry.slotBytes,
                         &c.dataMr);
      if (s.isOk())
        s = plugin_->regMr(c.comm, c.slotHeads.get(), sizeof(SlotInfo) * kMaxFifoSlots, &c.headMr);
      if (s.isOk() && c.placed) s = registerPlaced(c);
      if (s.isOk() && !c.isSend) {
        s = plugin_->closeListen(c.listenComm);
        c.listenComm = nullptr;
      }
      if (s.isOk())
        LOG_INFO(kSubsysNet,
                 "rank %d: %s rank %d channel %d through net plugin %s (device %d%s)%s%s",
                 ctx_.rank, c.isSend ? "sending to" : "receiving from", c.peer, c.channel,
                 plugin_->name(), c.dev, railText(c.dev).c_str(),
                 c.grouped ? ", a slot's header and data in one grouped receive" : "",
                 c.share != NetConn::kOwn ? ", one connection both ways" : "");
    }
    if (!s.isOk()) fail(c, s);
  }

  // Completes what finished and posts what c can post, then completes again the sends the
  // network finished as it took the posts (one that sends at once); true when something moved.
  bool progressConn(NetConn& c) {
    if (c.comm == nullptr) {
      setup(c);
      if (c.comm == nullptr) return false;
    }
    bool moved = completeConn(c);
    if (c.failed) return true;
    if (postConn(c)) {
      moved = true;
      if (c.isSend && !c.failed) completeConn(c);
    }
    return moved;
  }

  // Completes, in order, the requests of c that finished; true when something moved.
  bool completeConn(NetConn& c) {
    const uint32_t nslots = ctx_.geometry.nslots;
    const size_t slotBytes = ctx_.geometry.slotBytes;
    bool moved = false;
    // Complete, in order, before posting more: a post that finds the connection broken must
    // not lose what already arrived.
    while (c.done < c.posted) {
      NetConn::Req& r = c.reqs[c.done % kInFlight];
      const uint64_t slot = c.done % nslots;
      // A request is tested until it completes, never after (the plugin may reuse it): what
      // it gave is kept in r while a flush is waited for.
      if (c.grouped && !r.headDone) {
        size_t sizes[2] = {0, 0};
        Status s = plugin_->testGroup(r.head, 2, &r.headDone, sizes);
        if (!s.isOk()) {
          fail(c, s);
          return true;
        }
        if (!r.headDone) break;
        r.headBytes = sizes[0];
        r.got = sizes[1];
      } else if (!c.grouped && !r.dataDone) {
        if (!r.headDone) {
          Status s = plugin_->test(r.head, &r.headDone, nullptr);
          if (!s.isOk()) {
            fail(c, s);
            return true;
          }
          if (!r.headDone) break;
        }
        Status s = plugin_->test(r.data, &r.dataDone, &r.got);
        if (!s.isOk()) {
          fail(c, s);
          return true;
        }
        if (!r.dataDone) break;
      }
      const size_t got = r.got;
      if (!c.isSend && c.placed && c.place.device && !r.flushed) {
        // What the network wrote into GPU memory reaches the GPU before the kernel reads it.
        if (r.flush == nullptr) {
          void* buf = c.slot(slot, slotBytes);
          size_t n = got;
          Status s = plugin_->iflush(c.comm, 1, &buf, &n, &c.placedMr, &r.flush);
          if (!s.isOk()) {
            fail(c, s.withContext("flushing a receive into GPU memory"));
            return true;
          }
          r.flushed = r.flush == nullptr;
        }
        if (!r.flushed) {
          Status s = plugin_->test(r.flush, &r.flushed, nullptr);
          if (!s.isOk()) {
            fail(c, s.withContext("flushing a receive into GPU memory"));
            return true;
          }
          if (!r.flushed) break;
        }
      }
      const size_t capacity = c.capacity(slotBytes);
      if (!c.isSend && c.slotHeads[slot].tag.what == kFailNoticeKind) {
        // Not data: the peer's communicator failed and says why; nothing more will come.
        const bool readable = !(c.placed && c.place.device) && got < kPeerErrorBytes;
        c.failed = true;
        closeFromPeer(c.fifo, readable ? std::string(c.slot(slot, slotBytes), got)
                                       : formatString("rank %d's communicator failed", c.peer));
        LOG_INFO(kSubsysNet, "rank %d: rank %d closed its connection (channel %d): %s", ctx_.rank,
                 c.peer, c.channel, c.fifo->peerError);
        return true;
      }
      if (!c.isSend &&
          (r.headBytes != sizeof(SlotInfo) || got != c.slotHeads[slot].bytes || got > capacity)) {
        fail(c,
             internalError("a message of %zu bytes where its header (%zu bytes) said %llu", got,
                           r.headBytes, static_cast<unsigned long long>(c.slotHeads[slot].bytes)));
        return true;
      }
      r = NetConn::Req{};
      ++c.done;
      moved = true;
      if (c.isSend) {
        c.fifo->head.store(c.done, std::memory_order_release);
        wakeSleepers(c.fifo->head, c.fifo->headSleepers);
      } else {
        c.fifo->slots[slot] = c.slotHeads[slot];
        c.fifo->tail.store(c.done, std::memory_order_release);
        wakeSleepers(c.fifo->tail, c.fifo->tailSleepers);
      }
    }
    return moved;
  }

  // Posts a send for each slot the executor published, a receive for each free slot; true
  // when something was posted.
  bool postConn(NetConn& c) {
    const uint32_t nslots = ctx_.geometry.nslots;
    const size_t slotBytes = ctx_.geometry.slotBytes;
    const int sender = c.isSend ? ctx_.rank : c.peer;
    int tags[2] = {2 * sender, 2 * sender + 1};  // the header's, the data's
    bool moved = false;
    if (c.held) return moved;
    const uint64_t limit = c.isSend ? c.fifo->tail.load(std::memory_order_acquire)
                                    : c.fifo->head.load(std::memory_order_acquire) + nslots;
    const size_t capacity = c.capacity(slotBytes);
    void* const dataMr = c.placed ? c.placedMr : c.dataMr;
    while (c.posted < limit && c.posted - c.done < kInFlight) {
      const uint64_t slot = c.posted % nslots;
      NetConn::Req& r = c.reqs[c.posted % kInFlight];
      char* slotData = c.slot(slot, slotBytes);
      Status s = Status::ok();
      if (c.grouped) {
        void* bufs[2] = {&c.slotHeads[slot], slotData};
        const size_t sizes[2] = {sizeof(SlotInfo), capacity};
        void* mrs[2] = {c.headMr, dataMr};
        s = plugin_->irecvGroup(c.comm, 2, bufs, sizes, tags, mrs, &r.head);
        if (!s.isOk()) {
          fail(c, s);
          return true;
        }
        if (r.head == nullptr) break;
      } else {
        if (r.head == nullptr) {
          if (c.isSend) {
            c.slotHeads[slot] = c.fifo->slots[slot];
            s = plugin_->isend(c.comm, &c.slotHeads[slot], sizeof(SlotInfo), tags[0], c.headMr,
                               &r.head);
          } else {
            s = plugin_->irecv(c.comm, &c.slotHeads[slot], sizeof(SlotInfo), tags[0], c.headMr,
                               &r.head);
          }
          if (!s.isOk()) {
            fail(c, s);
            return true;
          }
          if (r.head == nullptr) break;
        }
        s = c.isSend ? plugin_->isend(c.comm, slotData, c.slotHeads[slot].bytes, tags[1], dataMr,
                                      &r.data)
                     : plugin_->irecv(c.comm, slotData, capacity, tags[1], dataMr, &r.data);
        if (!s.isOk()) {
          fail(c, s);
          return true;
        }
        if (r.data == nullptr) break;
      }
      ++c.posted;
      moved = true;
    }
    return moved;
  }

  // Callers hold mutex_.
  bool progress(bool everyRecv, const void* recvFifo) {
    bool moved = false;
    for (auto& c : conns_) {
      if (c->failed) continue;
      if (c->isSend || everyRecv || recvFifo == c->fifo) moved |= progressConn(*c);
    }
    return moved;
  }

  bool sendsDrained() const {
    for (const auto& c : conns_)
      if (c->isSend && !c->failed && c->comm != nullptr &&
          c->done < c->fifo->tail.load(std::memory_order_acquire))
        return false;
    return true;
  }

  // A communicator that failed or was aborted ends its connections at once, as the socket
  // transport does: peers waiting on them fail promptly (and in turn end theirs) instead of
  // waiting for their timeout. Each peer that receives from this rank first gets a notice
  // saying why: a slot of its own kind (kFailNoticeKind) holding the text, sent from the
  // FIFO's registered memory where nothing is in flight on the connection (best effort, for a
  // few milliseconds), so that its own error names the cause. Callers hold mutex_.
  void endAll() {
    std::string why = ctx_.errors != nullptr ? ctx_.errors->failureText() : std::string();
    if (why.empty()) why = formatString("rank %d: the communicator was aborted", ctx_.rank);
    why.resize(std::min(why.size(), kPeerErrorBytes - 1));
    std::vector<void*> requests;
    for (auto& c : conns_) {
      if (!c->isSend || c->failed || c->comm == nullptr || c->posted != c->done) continue;
      const uint64_t slot = c->done % ctx_.geometry.nslots;
      char* text = c->data + slot * ctx_.geometry.slotBytes;
      memcpy(text, why.data(), why.size());
      SlotInfo& head = c->slotHeads[slot];
      head = SlotInfo{};
      head.bytes = why.size();
      head.tag.what = kFailNoticeKind;
      void *h = nullptr, *d = nullptr;
      if (!plugin_->isend(c->comm, &head, sizeof head, 2 * ctx_.rank, c->headMr, &h).isOk() ||
          h == nullptr)
        continue;
      requests.push_back(h);
      if (plugin_->isend(c->comm, text, why.size(), 2 * ctx_.rank + 1, c->dataMr, &d).isOk() &&
          d != nullptr)
        requests.push_back(d);
    }
    const Clock::time_point until = Clock::now() + std::chrono::milliseconds(20);
    auto finished = [this](void* r) {
      bool done = false;
      return !plugin_->test(r, &done, nullptr).isOk() || done;
    };
    while (!requests.empty() && Clock::now() < until)
      requests.erase(std::remove_if(requests.begin(), requests.end(), finished), requests.end());
    for (auto& c : conns_) {
      close(*c);
      c->failed = true;
    }
  }

  void close(NetConn& c) {
    if (c.comm != nullptr) {
      if (c.dataMr != nullptr) (void)plugin_->deregMr(c.comm, c.dataMr);
      if (c.placedMr != nullptr) (void)plugin_->deregMr(c.comm, c.placedMr);
      if (c.headMr != nullptr) (void)plugin_->deregMr(c.comm, c.headMr);
      (void)(c.isSend ? plugin_->closeSend(c.comm) : plugin_->closeRecv(c.comm));
    }
    if (c.listenComm != nullptr) (void)plugin_->closeListen(c.listenComm);
    if (c.isSend && c.comm == nullptr && c.share != NetConn::kWaits)
      plugin_->abandonConnect(c.handle);
    // A comm the twin made for this side that it never took.
    if (c.given != nullptr)
      (void)(c.isSend ? plugin_->closeSend(c.given) : plugin_->closeRecv(c.given));
    c.comm = c.listenComm = c.given = nullptr;
    c.dataMr = c.headMr = c.placedMr = nullptr;
  }

  // The proxy's sleep on a network's descriptors (NetPlugin::pollFds): those its connections'
  // requests wait on, and the doorbell. As the socket transport's, it leaves the receiving
  // connections to the threads that drive them while one does or did since its last sleep
  // (an arriving message then wakes nobody), looking again within kDrivenSleepMs; a driver
  // about to sleep in the kernel rings it. False when it did not sleep: something moved at
  // the last look, or a connection being set up has nothing to wait on yet (then it naps).
  bool sleepOnFds(std::unique_lock<std::mutex>& lock) {
    // Raised before the last look, so that a change after it rings the doorbell.
    sleeping.store(kAsleepDriven, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (progress(true, nullptr)) {
      sleeping.store(kAwake, std::memory_order_relaxed);
      return true;
    }
    const bool leftToDrivers = receivesLeftToDrivers();
    fds_.assign(1, pollfd{doorbellFd, POLLIN, 0});
    for (auto& c : conns_) {
      if (c->failed) continue;
      if (c->comm == nullptr) {
        sleeping.store(kAwake, std::memory_order_relaxed);
        return false;
      }
      const size_t before = fds_.size();
      plugin_->pollFds(c->comm, &fds_);
      if (!c->isSend && leftToDrivers) fds_.resize(before);
      c->watched.assign(fds_.begin() + static_cast<std::ptrdiff_t>(before), fds_.end());
    }
    recvLeftToDrivers_ = leftToDrivers;
    if (!leftToDrivers) sleeping.store(kAsleep, std::memory_order_seq_cst);
    lock.unlock();
    poll(fds_.data(), fds_.size(), leftToDrivers ? kDrivenSleepMs : 100);
    uint64_t drained;
    while (read(doorbellFd, &drained, sizeof(drained)) > 0) {
    }
    lock.lock();
    sleeping.store(kAwake, std::memory_order_relaxed);
    return true;
  }

  void proxyLoop() {
    std::unique_lock<std::mutex> lock(mutex_);
    int64_t idleNs = 0;
    Clock::time_point drainDeadline{};
    bool draining = false;
    while (true) {
      const bool moved = progress(true, nullptr);
      if (ctx_.abort->isRaised()) {
        endAll();
        return;
      }
      if (stop_.load(std::memory_order_relaxed)) {
        // Deliver what was posted before the communicator went away, within a bound.
        if (!draining) {
          draining = true;
          drainDeadline = Clock::now() + std::chrono::seconds(10);
          // Destroyed after a call failed: the others may wait on this rank, so it tells them
          // why as it closes, rather than looking like a rank that just left.
          if (ctx_.errors != nullptr && !ctx_.errors->failureText().empty()) {
            endAll();
            return;
          }
        }
        if (sendsDrained() || Clock::now() > drainDeadline) return;
      }
      if (moved) {
        idleNs = 0;
        continue;
      }
      if (onFds_ && sleepOnFds(lock)) {
        idleNs = 0;
        continue;
      }
      // The plugin has no descriptor to sleep on: nap, longer while nothing moves (threads
      // that wait on a FIFO move its data themselves meanwhile), woken early by the doorbell.
      idleNs = std::min<int64_t>(idleNs == 0 ? 20000 : idleNs * 2, 2000000);
      sleeping.store(kAsleep, std::memory_order_seq_cst);
      lock.unlock();
      pollfd fd{doorbellFd, POLLIN, 0};
      timespec ts{0, static_cast<long>(idleNs)};
      ppoll(&fd, 1, &ts, nullptr);
      uint64_t drained;
      while (read(doorbellFd, &drained, sizeof(drained)) > 0) {
      }
      lock.lock();
      sleeping.store(kAwake, std::memory_order_relaxed);
    }
  }

  TransportContext ctx_;
  NetPlugin* plugin_;
  std::vector<int> devices_;  // chooseDevices(): this rank's, in the order channels take them
  std::vector<int> rails_;    // every device's rail and plane (-1: not reported)
  std::vector<int> planes_;
  std::vector<std::string> buses_;  // every device's bus id ("": unknown)
  std::mutex mutex_;                // one thread at a time calls the plugin
  std::vector<std::unique_ptr<NetConn>> conns_;
  std::thread proxy_;
  std::atomic<bool> stop_{false};
  bool holding_ = false;  // under mutex_: holdReceives
  // The network progresses on descriptors (NetPlugin::pollFds): the proxy sleeps on them.
  bool onFds_ = false;
  std::vector<pollfd> fds_;         // the proxy's poll set
  std::vector<pollfd> scratchFds_;  // under mutex_: progressNeedsProxy's
  bool recvLeftToDrivers_ = false;  // the proxy's sleep leaves the receives to the drivers
};

}  // namespace

std::unique_ptr<Transport> makeNetPluginTransport(const TransportContext& ctx, NetPlugin* plugin) {
  return std::make_unique<NetTransport>(ctx, plugin);
}

}  // namespace chorus
