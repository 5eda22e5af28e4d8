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

// Which GID of a port a connection uses (NCCL_IB_GID_INDEX, NCCL_IB_ROCE_VERSION_NUM,
// NCCL_IB_ADDR_FAMILY).
struct GidPolicy {
  int index = -1;       // -1: chosen as below
  int roceVersion = 2;  // 1 or 2
  int family = 2;       // AF_INET (2) or AF_INET6 (10)
  std::string source;   // the variable that set index, for messages
};
// An InfiniBand port uses index 0 (or the one asked for). A RoCE (Ethernet) port with no index
// asked for takes the lowest index whose type is the RoCE version wanted and whose address is
// of the family wanted (IPv4: an IPv4-mapped GID; IPv6: any other that is not link-local), then
// the lowest of that version whatever the family, then the lowest of any version that is not
// link-local, then link-local ones; a port with no GID, or an index asked for that the port does
// not have, is an error naming the port and the GIDs it has.
Result<int> selectGidIndex(const std::string& device, const IbPort& port, const GidPolicy& policy);
// The policy from the environment (values outside their range are errors naming the variable).
Result<GidPolicy> gidPolicyFromEnvironment();
// The GID index of each of ports (from selectHcaPorts) under the environment's policy, logged.
Result<std::vector<int>> selectGidsFromEnvironment(const LocalTopology& topo,
                                                   const std::vector<HcaPort>& ports);

}  // namespace chorus
