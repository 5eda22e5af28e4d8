// Recursive-doubling all-reduce on host buffers (algorithms/rd_allreduce.h) over connectors to
// this rank's exchange partners.
#pragma once

#include <vector>

#include "common/status.h"
#include "exec/host_executor.h"

namespace chorus {

// The ranks this rank exchanges with in a recursive-doubling all-reduce of nranks ranks: its
// partner in every round and, when nranks is not a power of two, the rank it folds with.
std::vector<int> rdPartners(int nranks, int rank);

// Runs the all-reduce; conns[peer] is connected both ways for every peer in rdPartners.
Status hostAllReduceRd(const ExecContext& ctx, const CollArgs& args,
                       std::vector<P2pConnection>& conns);

}  // namespace chorus
