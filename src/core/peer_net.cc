#include "core/peer_net.h"

#include <algorithm>
#include <cstring>

#include "transport/net_plugin/net_plugin.h"
#include "transport/socket/socket_net.h"

namespace chorus {

void describeNetDevices(NetPlugin* plugin, const LocalTopology* topo, PeerInfo* me) {
  std::memset(me->netDevMbps, 0, sizeof(me->netDevMbps));
  if (plugin == nullptr) return;
  std::vector<int> nodes, speeds;
  std::vector<std::string> buses;
  for (int d = 0; d < plugin->devices(); ++d) {
    NetPlugin::Properties p;
    const bool ok = plugin->properties(d, &p).isOk();
    nodes.push_back(ok ? netDeviceNumaNode(p.pciPath) : -1);
    buses.push_back(ok ? netDeviceBusId(p.pciPath) : "");
    speeds.push_back(ok ? std::max(0, p.speedMbps) : 0);
  }
  const NetDeviceChoice choice = chooseNetDevices(nodes, buses, topo, me->numaNode, "");
  for (int d : choice.devices)
    if (d >= 0 && d < kMaxNetDevices && static_cast<size_t>(d) < speeds.size())
      me->netDevMbps[d] = speeds[static_cast<size_t>(d)];
}

bool netPluginBetweenHosts(const std::vector<PeerInfo>& peers) {
  // The socket network moves bytes as the socket transport does: the sockets' figures hold.
  if (strncmp(peers[0].netName, kSocketNetName, sizeof peers[0].netName) == 0) return false;
  bool crossing = false;
  for (const PeerInfo& p : peers) {
    if (p.netName[0] == '\0' || strncmp(p.netName, peers[0].netName, sizeof p.netName) != 0)
      return false;
    crossing = crossing || !useShm(peers[0], p);
  }
  return crossing;
}

NetDeviceLinks netDeviceLinks(const std::vector<PeerInfo>& peers) {
  NetDeviceLinks links;
  double slowestRank = 0, slowestHost = 0;
  std::vector<uint64_t> hosts;
  for (const PeerInfo& p : peers) {
    double mbps = 0;
    for (int d = 0; d < kMaxNetDevices; ++d) mbps += p.netDevMbps[d];
    if (mbps <= 0) return links;
    if (slowestRank == 0 || mbps < slowestRank) slowestRank = mbps;
    if (std::find(hosts.begin(), hosts.end(), p.hostId) == hosts.end()) hosts.push_back(p.hostId);
  }
  for (uint64_t h : hosts) {
    double mbps = 0;
    for (int d = 0; d < kMaxNetDevices; ++d) {
      int32_t fastest = 0;
      for (const PeerInfo& p : peers)
        if (p.hostId == h) fastest = std::max(fastest, p.netDevMbps[d]);
      mbps += fastest;
    }
    if (slowestHost == 0 || mbps < slowestHost) slowestHost = mbps;
  }
  links.rankGBps = slowestRank / 8000.0;
  links.hostGBps = slowestHost / 8000.0;
  return links;
}

}  // namespace chorus
