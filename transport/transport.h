// Transport interface: how a pair of ranks builds the connectors of one channel. The receiver
// prepares the FIFO memory and describes it in a ConnectInfo, the sender attaches to it from
// that description, then the receiver completes. One Transport object per communicator owns
// every resource it created (segments, sockets, proxy thread).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>

#include "bootstrap/bootstrap.h"
#include "common/status.h"
#include "common/wait.h"
#include "transport/connector.h"
#include "transport/net_plugin/net_gdr.h"

namespace chorus {

constexpr int kMaxExtraAddrs = 3;

// CPUs a PeerInfo's mask describes.
constexpr int kCpuMaskBits = 1024;
// Net plugin devices a PeerInfo describes the speed of.
constexpr int kMaxNetDevices = 32;

// What every rank publishes about itself at init (exchanged with allGather; plain data).
struct PeerInfo {
  int32_t rank;
  int32_t pid;
  uint64_t hostId;
  uint64_t machineId;  // ranks sharing CPUs (topo/host_id.h localMachineId())
  int32_t shmDisabled;
  int32_t cpus;  // CPU cores this process may run on
  // Which of CPUs 0..kCpuMaskBits-1 those are (one bit per CPU); cpuMaskComplete is 0 when it
  // may also run on CPUs past them.
  uint64_t cpuMask[kCpuMaskBits / 64];
  int32_t cpuMaskComplete;
  uint64_t nonce;            // random; rank 0's names the communicator
  sockaddr_storage address;  // the interface the bootstrap chose (data listeners bind here)
  char ifname[16];           // that interface's name ("" when unknown)
  int32_t ifSpeedMbps;       // its link speed from /sys (-1 unknown)
  int32_t numaNode;          // NUMA node of the first CPU this process may run on (-1 unknown)
  // Further interfaces data connections may use (channels spread over them where the peer has
  // an interface in the same subnet), with their netmasks.
  int32_t extraAddrs;
  sockaddr_storage extraAddr[kMaxExtraAddrs];
  sockaddr_storage extraMask[kMaxExtraAddrs];
  // The NCCL net plugin this rank loaded (its table's name; "" when none): two ranks on
  // different hosts that name the same one talk through it.
  char netName[32];
  // The speed (Mbit/s) of each of that plugin's devices this rank's channels use (0: not used,
  // or not reported), for the cost model's figure of each host's link.
  int32_t netDevMbps[kMaxNetDevices];
};

// Receives errors found off the calling thread (the proxy), e.g. a peer that went away.
class ErrorSink {
 public:
  virtual ~ErrorSink() = default;
  virtual void reportAsyncError(const Status& status) = 0;
  // Why the communicator stopped (its error, or that it was aborted), for the notice a network
  // transport sends its peers as it closes its connections.
  virtual std::string failureText() const { return std::string(); }
  // Whether the ranks on this host learn of the communicator's failure from its board
  // (core/peer_watch.h), which then says it first, instead of from its closed connections.
  virtual bool failurePublished() const { return false; }
};

struct LocalTopology;

struct TransportContext {
  int rank = 0;
  int nranks = 0;
  std::string commTag;  // unique per communicator, names its shared memory
  uint64_t secret = 0;  // presented on every data connection
  FifoGeometry geometry{};
  const std::vector<PeerInfo>* peers = nullptr;
  Bootstrap* bootstrap = nullptr;
  const AbortFlag* abort = nullptr;
  ErrorSink* errors = nullptr;
  double timeoutSeconds = 0;
  const LocalTopology* topo = nullptr;  // this host's (lives as long as the process)
  std::string gpuBusId;  // a device communicator's GPU ("dddd:bb:dd.f"; "" for host memory)
};

// Opaque description of a receive FIFO, sent from receiver to sender over the bootstrap.
struct ConnectInfo {
  uint8_t bytes[256];
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Receiver side: creates the FIFO fed by peer on this channel. sendsBack: this rank also
  // connects a send connector to peer on this channel in the same setup (connectSend before
  // any finishRecv of the setup); when both ends say so a transport may carry the two
  // directions on one connection.
  virtual Status setupRecv(int peer, int channel, bool sendsBack, ConnectInfo* info,
                           RecvConnector* conn) = 0;
  // Sender side: attaches to the receiver's FIFO.
  virtual Status connectSend(int peer, int channel, const ConnectInfo& info,
                             SendConnector* conn) = 0;
  // Receiver side: completes once the sender has attached.
  virtual Status finishRecv(int peer, int channel) = 0;
  // While on, receiving connections this transport sets up post no receives until
  // ProxyLink::placeSlots says where their data goes (device links, whose slots may be
  // placed). Transports that do not place slots ignore it.
  virtual void holdReceives(bool on) { (void)on; }
  // GPUDirect RDMA: whether a device communicator's FIFOs for links through this transport
  // may sit in GPU memory, its network moving their Simple slots in place (placeSlots). Only a
  // network that takes GPU memory near enough the GPU does; an error names a bad knob.
  virtual Result<NetGdr> gpuDirect() {
    NetGdr g;
    g.why = formatString("the %s transport moves no GPU memory", name());
    return g;
  }
  // Called once every connector of the communicator is built.
  virtual Status afterSetup() { return Status::ok(); }
};

std::unique_ptr<Transport> makeShmTransport(const TransportContext& ctx);
std::unique_ptr<Transport> makeSocketTransport(const TransportContext& ctx);
class NetPlugin;
// Through an NCCL net plugin (net_plugin/net_plugin.h), which outlives the transport.
std::unique_ptr<Transport> makeNetPluginTransport(const TransportContext& ctx, NetPlugin* plugin);

// Same host and neither side disabled shared memory: both ends must reach the same verdict
// from the same data, so this looks only at the exchanged PeerInfo.
inline bool useShm(const PeerInfo& a, const PeerInfo& b) {
  return a.hostId == b.hostId && !a.shmDisabled && !b.shmDisabled;
}

// Not shared memory, and both ranks loaded the same net plugin.
inline bool useNetPlugin(const PeerInfo& a, const PeerInfo& b) {
  return !useShm(a, b) && a.netName[0] != '\0' &&
         strncmp(a.netName, b.netName, sizeof a.netName) == 0;
}

}  // namespace chorus
