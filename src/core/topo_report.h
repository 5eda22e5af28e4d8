// What a communicator knows of where its ranks live, for chorus-topo and logs: the hosts, the
// transport and expected bandwidth between every pair of ranks, the ring and both trees.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "topo/topology.h"
#include "transport/transport.h"

namespace chorus {

// The local topology of this process (CHORUS_TOPO_FILE, else detected; CHORUS_TOPO_DUMP_FILE
// written), made once per process. A bad topology file is an error every time it is asked for.
Result<const LocalTopology*> processTopology();

// The usable interfaces of topo (up, neither loopback nor virtual) best first for a process on
// cpus: those on the NUMA node holding most of the CPUs, then those of unknown node, then the
// rest; faster first within each group.
std::vector<std::string> interfacesByLocality(const LocalTopology& topo,
                                              const std::vector<int>& cpus);
// The interfaces besides me->address that data connections may use (CHORUS_SOCKET_IFNAME
// applies), preferred ones first, into me->extraAddr; none when me->address is loopback.
void describeExtraInterfaces(const std::vector<std::string>& preferred, PeerInfo* me);
// The CPUs this process may run on.
std::vector<int> processCpus();

// This process's placement for PeerInfo: the name and speed of the interface holding address,
// and the NUMA node of the first CPU the process may run on, from topo (or /sys when topo does
// not know).
void describeLocalPlacement(const sockaddr_storage& address, const LocalTopology& topo,
                            PeerInfo* me);

struct TopoReportInput {
  const std::vector<PeerInfo>* peers = nullptr;
  const std::vector<std::vector<int>>* hosts = nullptr;  // ranks of each host
  const std::vector<int>* ring = nullptr;                // rank at each ring position
  std::vector<std::vector<int>> treeParent;              // [tree][rank]
  double shmGBps = 0;                                    // the cost model's figures
  double netGBps = 0;
  double shmLatencyUs = 0;
  double netLatencyUs = 0;
};

// Text (like `nvidia-smi topo -m`) or Graphviz DOT.
std::string topologyText(const TopoReportInput& in);
std::string topologyDot(const TopoReportInput& in);

}  // namespace chorus
