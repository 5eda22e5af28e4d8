// GPUDirect RDMA through a network: whether a device communicator's FIFOs for links through
// the network sit in GPU memory, the NIC writing what arrives straight into the GPU (each
// receive flushed before a kernel reads it) and reading what leaves straight out of it, or in
// pinned host memory. Plain data in, plain data out, so that tests reach the same verdict.
#pragma once

#include <string>

#include "common/status.h"
#include "topo/topology.h"
#include "transport/device_path.h"

namespace chorus {

struct NetGdrOptions {
  // NET_GDR_LEVEL: the farthest a rank's GPU and its network devices may be apart (LOC: never;
  // SYS: any distance, also one the topology does not know).
  P2pLevel level = P2pLevel::kPxb;
  bool read = true;   // NET_GDR_READ: sends read GPU memory too (0: receives only)
  bool place = true;  // NET_PLACE_SLOTS: the network moves the FIFOs' slots in place at all
};

// LOC, PIX, PXB, PHB or SYS in any case, or NCCL's numbers 0-5; anything else (NVL included:
// a NIC is not on NVLink) is an invalid argument naming `source`.
Result<P2pLevel> parseNetGdrLevel(const std::string& text, const std::string& source);
// NET_GDR_LEVEL (unset or empty: PXB), NET_GDR_READ and NET_PLACE_SLOTS from the environment.
Result<NetGdrOptions> netGdrOptionsFromEnv();

// What the network devices a rank's channels take offer, over all of them.
struct NetGdrDevices {
  int count = 0;                                 // devices taken (0: no network)
  PciDistance distance = PciDistance::kUnknown;  // the farthest of them from the GPU
  int ptrSupport = 0;                            // NCCL_PTR_* bits every one has
  bool flush = false;  // every one makes receives into GPU memory visible (iflush)
};

struct NetGdr {
  bool recv = false;        // receive FIFOs in GPU memory
  bool send = false;        // send FIFOs in GPU memory
  bool dmabufOnly = false;  // the devices take GPU memory only as a dma-buf (no NCCL_PTR_CUDA)
  std::string why;          // one line for the init log, e.g. "GPU and NIC are PIX apart"
};

// The verdict for a rank whose network devices are d.
NetGdr chooseNetGdr(const NetGdrOptions& o, const NetGdrDevices& d);

// Whether the sending (send) or receiving end of a link goes in GPU memory under verdict g, the
// memory exported as a dma-buf or not (dmabuf): the device communicator's rule, in one place.
inline bool gpuEnd(const NetGdr& g, bool send, bool dmabuf) {
  return (send ? g.send : g.recv) && (!g.dmabufOnly || dmabuf);
}

}  // namespace chorus
