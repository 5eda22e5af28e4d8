// NCCL_IB_HCA / CHORUS_IB_HCA: which InfiniBand HCA ports a rank may use. The list holds
// "name" or "name:port" entries separated by commas, matched as name prefixes unless "=" leads
// the list (exact names); "^" in front excludes the listed ports instead.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topo/topology.h"

namespace chorus {

struct HcaPort {
  std::string device;  // "mlx5_0"
  int port = 1;
};

// The ports of topo the filter allows, in the topology's order. Every port when spec is empty.
// A filter that allows none of the ports present is kInvalidArgument naming source and the
// ports available (with no HCA at all the result is simply empty).
Result<std::vector<HcaPort>> selectHcaPorts(const LocalTopology& topo, const std::string& spec,
                                            const std::string& source);

// The filter from CHORUS_IB_HCA, else NCCL_IB_HCA.
Result<std::vector<HcaPort>> selectHcaPortsFromEnvironment(const LocalTopology& topo);

}  // namespace chorus
