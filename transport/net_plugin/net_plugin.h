// NCCL net plugins in Chorus: the library NCCL_NET_PLUGIN names is loaded with dlopen, its
// newest table (ncclNetPlugin_v12, then v11, v10, v9, v8) is taken, and the calls are wrapped
// behind one interface with size_t sizes, whatever the version. The plugin transport
// (net_transport.cc) moves FIFO slots through it between ranks on different hosts.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/topology.h"

namespace chorus {

class NetPlugin {
 public:
  struct Properties {
    std::string name;
    int speedMbps = 0;
    int maxRecvs = 1;
    int ptrSupport = 0;
    size_t maxMessageBytes = 0;  // the largest isend (v8: 1 GiB, int sizes)
    std::string pciPath;         // the device's directory in /sys ("": virtual or unknown)
    // v12: the rail of the fabric the device is on and its plane within the rail (-1: not
    // reported). Chorus reads devices of different rails or planes as unable to reach each
    // other (a rail-only fabric), so both ends of a link take the same (rail, plane).
    int railId = -1;
    int planeId = -1;
  };
  virtual ~NetPlugin() = default;
  virtual const char* name() const = 0;  // the table's own name (what NCCL_NET matches)
  virtual int version() const = 0;       // 8 to 12
  virtual const std::string& library() const = 0;
  virtual int devices() const = 0;
  virtual Status properties(int dev, Properties* out) = 0;
  // handle: NCCL_NET_HANDLE_MAXSIZE bytes. connect and accept may leave *comm null: call again
  // (connect with the same handle buffer).
  virtual Status listen(int dev, void* handle, void** listenComm) = 0;
  virtual Status connect(int dev, void* handle, void** sendComm) = 0;
  virtual Status accept(void* listenComm, void** recvComm) = 0;
  // A connect that will not be called again with this handle (its connection is given up):
  // what it holds for the connect in progress is released.
  virtual void abandonConnect(void* handle) { (void)handle; }
  // Connections that carry both directions of a pair (Chorus's socket network): connectBoth is
  // connect whose connection also gives the receive comm of the way back (*recvComm, set with
  // *sendComm), acceptBoth is accept whose connection also gives the send comm of the way back.
  // The two ends agree: the one that connects calls connectBoth exactly where the one that
  // accepts calls acceptBoth. A network without them refuses them.
  virtual bool bothWays() const { return false; }
  virtual Status connectBoth(int dev, void* handle, void** sendComm, void** recvComm) {
    (void)dev, (void)handle;
    *sendComm = *recvComm = nullptr;
    return invalidUsage("net %s has no connections of both directions", name());
  }
  virtual Status acceptBoth(void* listenComm, void** recvComm, void** sendComm) {
    (void)listenComm;
    *recvComm = *sendComm = nullptr;
    return invalidUsage("net %s has no connections of both directions", name());
  }
  virtual Status regMr(void* comm, void* data, size_t size, void** mhandle) = 0;  // host memory
  // GPU memory by its address (NCCL_PTR_CUDA in ptrSupport). A network without it refuses it.
  virtual Status regMrDevice(void* comm, void* data, size_t size, void** mhandle) {
    (void)comm, (void)data, (void)size;
    *mhandle = nullptr;
    return invalidUsage("net %s does not register GPU memory", name());
  }
  // Memory another device exports as a dma-buf (GPU memory; NCCL_PTR_DMABUF in ptrSupport):
  // data's size bytes are those at `offset` in the dma-buf `fd`; type is NCCL_PTR_CUDA or
  // NCCL_PTR_HOST. deregMr releases it. A network without the call refuses it.
  virtual Status regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mhandle) {
    (void)comm, (void)data, (void)size, (void)type, (void)offset, (void)fd;
    *mhandle = nullptr;
    return invalidUsage("net %s does not register dma-bufs", name());
  }
  virtual Status deregMr(void* comm, void* mhandle) = 0;
  // *request null: not posted, try again later.
  virtual Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                       void** request) = 0;
  virtual Status irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle,
                       void** request) = 0;
  virtual Status test(void* request, bool* done, size_t* size) = 0;
  // A grouped receive: n buffers (n up to the device's maxRecvs) in one request, each for the
  // message with its tag; it completes when every one has its message. testGroup gives the n
  // sizes (sizes: room for n, or null). Without the plugin's support only n = 1 is taken.
  virtual Status irecvGroup(void* recvComm, int n, void** data, const size_t* sizes,
                            const int* tags, void** mhandles, void** request) {
    if (n != 1) return internalError("net %s takes no grouped receives", name());
    return irecv(recvComm, data[0], sizes[0], tags[0], mhandles[0], request);
  }
  virtual Status testGroup(void* request, int n, bool* done, size_t* sizes) {
    if (n != 1) return internalError("net %s takes no grouped receives", name());
    return test(request, done, sizes);
  }
  // Makes what completed receives wrote into device memory visible to the device before it
  // reads it (n buffers, as received): *request null when nothing is needed, else a request to
  // test to completion. Host memory needs none.
  virtual Status iflush(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles,
                        void** request) {
    (void)recvComm, (void)n, (void)data, (void)sizes, (void)mhandles;
    *request = nullptr;
    return Status::ok();
  }
  // Whether iflush makes receives into GPU memory visible (else none is received there).
  virtual bool flushesDevice() const { return false; }
  // A network that progresses on file descriptors adds to fds those comm's requests wait on
  // (a send or receive comm's), with the events, and returns true: the transport's proxy then
  // sleeps in poll on them. False: none (the proxy naps and looks again). comm null: only
  // whether the network is such.
  virtual bool pollFds(void* comm, std::vector<pollfd>* fds) {
    (void)comm, (void)fds;
    return false;
  }
  virtual Status closeSend(void* sendComm) = 0;
  virtual Status closeRecv(void* recvComm) = 0;
  virtual Status closeListen(void* listenComm) = 0;
};

// The libraries NCCL_NET_PLUGIN's value names, in the order they are tried: for each entry of
// a comma-separated list, the entry as given (a file name or path), then libnccl-net-<entry>.so
// unless it looks like a file name already; unset (null): libnccl-net.so; "none": nothing.
std::vector<std::string> netPluginCandidates(const char* value);

// Loads one library and wraps its newest table; an error says why it is not usable (no table,
// init failed, no device).
Result<std::unique_ptr<NetPlugin>> loadNetPlugin(const std::string& library);

// The network of this process, chosen once from NCCL_NET_PLUGIN and NCCL_NET: a plugin that
// loads, else Chorus's IB network (transport/ib) when an HCA port is active, else Chorus's
// sockets: null (the socket transport), or with CHORUS_SOCKET_NET=1 the socket network behind
// this interface (transport/socket/socket_net.h). A plugin that NCCL_NET_PLUGIN names
// explicitly and that cannot be used, or an NCCL_NET that names no available network, is an
// error.
Result<NetPlugin*> processNetPlugin();

// The NUMA node of a network device from its PCI directory in /sys (-1: unknown, virtual, or a
// machine without NUMA nodes).
int netDeviceNumaNode(const std::string& pciPath);

// The devices a rank on NUMA node `node` sends and receives through, in the order its channels
// take them: the devices on its node when there are any (its own memory and PCIe root), else all
// of them. deviceNodes[d] is device d's node (-1: unknown).
std::vector<int> nearNetDevices(const std::vector<int>& deviceNodes, int node);

// The groups of a plugin's devices to fuse into virtual NICs (makeVDevice, v9 and newer), from
// CHORUS_NET_MERGE's value: "auto" (or empty) the devices that share a PCI path, the ports of
// one NIC; "none" (or "0") no group; else groups by device index, "0,1;2,3". Each group lists
// 2 to maxPerNic devices, in order; groups are ordered by their first member. An error names
// what in the value is wrong.
Result<std::vector<std::vector<int>>> netMergeGroups(const std::string& value,
                                                     const std::vector<std::string>& pciPaths,
                                                     int maxPerNic);

// The bus id ("dddd:bb:dd.f") of a network device from its directory in /sys: the directory's
// own name, else the name of the path it resolves to ("": neither is a bus id).
std::string netDeviceBusId(const std::string& pciPath);

// The devices a rank whose GPU is gpuBusId sends and receives through: those nearest the GPU
// when they sit below a PCIe switch it sits below too (PIX or PXB, so that the traffic between
// them stays off the root complex), in index order; else none, and the rank chooses by NUMA
// node. deviceBusIds[d] is device d's bus id ("": unknown); *distance gets the distance of
// those chosen.
std::vector<int> gpuNearNetDevices(const LocalTopology& topo, const std::string& gpuBusId,
                                   const std::vector<std::string>& deviceBusIds,
                                   PciDistance* distance = nullptr);

// The devices a rank's channels take in turn: those below its GPU's PCIe switch (a device
// communicator's rank, gpuBusId set), else those on its NUMA node `node`, else all; device 0
// where the plugin lists none. CHORUS_NET_NUMA_DEVICES=0 leaves placement out (all devices).
// deviceNodes and deviceBusIds describe each device (netDeviceNumaNode, netDeviceBusId).
struct NetDeviceChoice {
  std::vector<int> devices;
  bool nearGpu = false;  // chosen by the GPU's PCIe switch
  PciDistance gpuDistance = PciDistance::kUnknown;
  int node = -1;  // else the NUMA node the choice went by (-1: none, all devices)
};
NetDeviceChoice chooseNetDevices(const std::vector<int>& deviceNodes,
                                 const std::vector<std::string>& deviceBusIds,
                                 const LocalTopology* topo, int node, const std::string& gpuBusId);

// When processNetPlugin left the sockets although Chorus's IB network was not turned off by
// NCCL_NET: why the IB network could not be used ("" otherwise).
std::string whyNoIbNetwork();

}  // namespace chorus
