// What a communicator knows of where its ranks live, for chorus-topo and logs: the hosts, the
// transport and expected bandwidth between every pair of ranks, the ring and both trees.
#pragma once

#include <string>
#include <vector>

#include "transport/transport.h"

namespace chorus {

// This process's interface facts for PeerInfo: the name and speed of the interface holding
// address, and the NUMA node of the first CPU the process may run on.
void describeLocalPlacement(const sockaddr_storage& address, PeerInfo* me);

struct TopoReportInput {
  const std::vector<PeerInfo>* peers = nullptr;
  const std::vector<std::vector<int>>* hosts = nullptr;  // ranks of each host
  const std::vector<int>* ring = nullptr;                // rank at each ring position
  std::vector<std::vector<int>> treeParent;              // [tree][rank]
  double shmGBps = 0;                                    // the cost model's figures
  double netGBps = 0;
};

// Text (like `nvidia-smi topo -m`) or Graphviz DOT.
std::string topologyText(const TopoReportInput& in);
std::string topologyDot(const TopoReportInput& in);

}  // namespace chorus
