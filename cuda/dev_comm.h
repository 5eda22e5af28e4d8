// A rank's device communicator state: the ring channels' FIFOs in GPU memory, connected to the
// ring neighbours through CUDA IPC (or directly within one process), a FIFO link to every other
// rank for sends and receives, the communicator as its kernels see it (dev_work.h) in device
// memory, and the enqueue of planned launches on the caller's stream. Usable from code built
// without the CUDA headers; in a build without CUDA every entry point reports that CUDA support was
// not built.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "common/status.h"
#include "cuda/dev_plan.h"
#include "topo/topology.h"
#include "transport/connector.h"
#include "transport/device_path.h"
#include "transport/net_plugin/net_gdr.h"

namespace chorus {
namespace dev {

// Whether this build has the CUDA kernels and runtime.
bool cudaBuilt();

// The number of CUDA devices usable by this process, or an error that says why none is (no
// driver, no device, or a CUDA build without support).
Result<int> usableDevices();
// The calling thread's current device (cudaGetDevice), as NCCL binds a rank to it.
Result<int> currentDevice();
Status setCurrentDevice(int device);

// Host connectors for device links that are not peer-to-peer (shared memory, sockets, a net
// plugin), by rank: null where this rank has none to or from that rank.
struct HostLinks {
  std::vector<SendConnector*> send;
  std::vector<RecvConnector*> recv;
};

// Host device channels: ring channel c with protocol p is 2c + p; link `part` of a pair (the
// point-to-point parts, the tree links, the recursive-doubling links) with protocol p is
// kHostP2pChannel + 2 part + p.
constexpr int kHostP2pChannel = 2 * kMaxChannels;
constexpr int kHostChannels =
    kHostP2pChannel + (kP2pParts + 2 * kMaxTreeChannels + kMaxRdChannels) * kNumProtos;
static_assert(kNumProtos == 2, "host ring channels are numbered 2c + p");
inline int hostRingChannel(int channel, int proto) {
  return 2 * channel + proto;
}
inline int hostP2pChannel(int part, int proto) {
  return kHostP2pChannel + 2 * part + proto;
}

// Builds host connectors on device channel `channel` (in [0, kHostChannels)): receive
// connectors from every rank of recvFrom and send connectors to every rank of sendTo, through
// the communicator's own host transports; each peer makes the matching call. The connectors
// live as long as the communicator.
using ConnectHostFn = std::function<Status(int channel, const std::vector<int>& recvFrom,
                                           const std::vector<int>& sendTo, HostLinks* links)>;

struct DeviceCommSetup {
  int rank = 0;
  int nranks = 1;
  const std::vector<int>* ringRanks = nullptr;  // rank at each ring position
  Bootstrap* bootstrap = nullptr;
  const LocalTopology* topo = nullptr;
  uint64_t hostId = 0;
  DevicePathOptions paths;
  int nchannels = 4;
  int nthreads = 512;  // per block: a multiple of 32 in [kMinBlockThreads, kBlockThreads]
  uint32_t nslots[kNumProtos] = {8, 8};
  uint32_t slotBytes[kNumProtos] = {16384, 131072};  // LL lines, Simple data
  // Bytes of each direct all-reduce buffer per channel (dev_work.h: Direct; a multiple of 256),
  // 0: no direct all-reduce.
  uint32_t directBytes = 65536;
  DeviceShape shape;  // channel bounds, protocols and algorithms
  // Links without a P2P path go through host memory, a proxy thread and these connectors;
  // null: such links are refused at init.
  ConnectHostFn connectHost;
  // Told this rank's GPU's bus id once it is known, before the first connectHost.
  std::function<void(const std::string& busId)> gpuFound;
  // After gpuFound: whether the FIFOs of links to `peer` through host connectors may sit in
  // GPU memory, the network moving their Simple slots in place (GPUDirect RDMA); null: never.
  std::function<Result<NetGdr>(int peer)> gpuDirect;
};

class DeviceComm {
 public:
  virtual ~DeviceComm() = default;
  // Collective: every rank calls it at the same point of its init, on its device.
  static Result<std::unique_ptr<DeviceComm>> create(const DeviceCommSetup& setup);

  virtual int cudaDev() const = 0;
  // Plans calls[0..n) and queues their launches on `stream` (a cudaStream_t); returns at once.
  virtual Status enqueue(const DeviceCall* calls, size_t n, void* stream) = 0;
  // Plans one group's sends and receives (encodeP2pLaunches) and queues their launches on
  // `stream`; returns at once.
  virtual Status enqueueP2p(const DeviceP2p* ops, size_t n, void* stream) = 0;
  // Raises the flag the kernels poll: waiting blocks stop.
  virtual void abort() = 0;
  // An error a kernel reported (it stopped on abort), else ok.
  virtual Status asyncError() const = 0;
  // The transport each ring neighbour got, for logs.
  virtual std::string describe() const = 0;
};

}  // namespace dev
}  // namespace chorus
