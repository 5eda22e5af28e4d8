// The CPUs of the ranks, as the cost model and the spin policy count them: what each process
// may run on (sent to its peers in its PeerInfo), and the cores per rank of the busiest machine.
#pragma once

#include <vector>

#include "transport/transport.h"

namespace chorus {

// The CPUs this process may run on: their count, and which of the first kCpuMaskBits they are.
void describeCpus(PeerInfo* me);
// The fewest cores per rank of any machine (ranks that share a kernel, whichever host each is
// to the transports), each machine counted once.
double fewestCoresPerRank(const std::vector<PeerInfo>& peers);

}  // namespace chorus
