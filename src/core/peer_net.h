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
// channels take (chooseNetDevices, by me->numaNode, or by the GPU gpuBusId names); zeros
// without a plugin.
void describeNetDevices(NetPlugin* plugin, const LocalTopology* topo, const std::string& gpuBusId,
                        PeerInfo* me);

// Whether a net plugin carries every link between ranks that do not share memory: there is
// such a pair, and every rank loaded the same plugin.
bool netPluginBetweenHosts(const std::vector<PeerInfo>& peers);

// The slowest host's link through the plugin, in GB/s: per host, every device one of its ranks
// uses counted once (at the highest speed its ranks report for it), summed. 0 when a host's
// devices report no speed (the model's own figures then).
double netDeviceLinkGBps(const std::vector<PeerInfo>& peers);

}  // namespace chorus
