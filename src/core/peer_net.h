// The network between hosts as the cost model counts it when an NCCL net plugin (or Chorus's IB
// network, behind the same interface) carries it: each rank tells its peers the speed of the
// devices its channels use, and a host's link is what the devices of its ranks add up to.
#pragma once

#include <string>
#include <vector>

#include "transport/transport.h"

namespace chorus {

class NetPlugin;

// Fills me->netDevMbps: the speed each device of `plugin` reports, for the devices this rank's
// channels take (chooseNetDevices by me->numaNode: the GPU of a device communicator is not
// known yet when ranks describe themselves); zeros without a plugin.
void describeNetDevices(NetPlugin* plugin, const LocalTopology* topo, PeerInfo* me);

// Whether a net plugin carries every link between ranks that do not share memory: there is
// such a pair, and every rank loaded the same plugin. Not for Chorus's socket network, which
// the model prices as sockets.
bool netPluginBetweenHosts(const std::vector<PeerInfo>& peers);

// The links through the plugin, in GB/s: a rank's is what its own devices add up to, and the
// slowest rank's is what a ring or tree crossing between hosts gets (one rank of a host sends
// to the next host); a host's counts every device one of its ranks uses once (at the highest
// speed its ranks report for it), and the slowest host's is what the ranks of a host share
// when they all cross at once. 0 where a rank's devices report no speed (the model's own
// figures then).
struct NetDeviceLinks {
  double rankGBps = 0;
  double hostGBps = 0;
};
NetDeviceLinks netDeviceLinks(const std::vector<PeerInfo>& peers);

}  // namespace chorus
