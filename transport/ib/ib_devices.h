// The HCA ports the IB network uses: every RDMA device verbs lists, described as the topology
// describes them (ports, state, link layer, rate, GIDs with their types), then filtered by
// NCCL_IB_HCA, ports that are not ACTIVE left out, and each port's GID chosen by the GID policy
// (NCCL_IB_GID_INDEX, NCCL_IB_ROCE_VERSION_NUM, NCCL_IB_ADDR_FAMILY).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topo/topology.h"
#include "transport/ib/ib_logic.h"
#include "transport/ib/verbs.h"

namespace chorus {

struct IbPortChoice {
  std::string device;          // "mlx5_0"
  ibv_context* ctx = nullptr;  // open; shared by the ports of one device
  ib::LocalPort local;
  uint8_t gid[16] = {};  // the GID at local.gidIndex
  double gbps = 0;
};

// The devices as verbs describes them, and their open contexts (in the same order).
Result<LocalTopology> describeIbDevices(const VerbsApi* v, std::vector<ibv_context*>* contexts);

// The ports chosen, best first in verbs' order; the contexts of devices with no chosen port are
// closed. An error names why none can be used.
Result<std::vector<IbPortChoice>> discoverIbPorts(const VerbsApi* v);

}  // namespace chorus
