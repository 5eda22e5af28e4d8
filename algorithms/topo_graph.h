// Rings and trees shaped by where ranks live. Ranks of one host stay together, so a ring crosses
// the network once per host boundary and a tree once per edge between hosts.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/double_binary_tree.h"
#include "topo/topology.h"

namespace chorus {

// Hosts in order of their lowest rank, each with its ranks in ascending order, from the host
// identity of every rank.
std::vector<std::vector<int>> groupRanksByHost(const std::vector<uint64_t>& hostOfRank);

// The ring: every host's ranks contiguous, hosts in the order given.
std::vector<int> hostContiguousRing(const std::vector<std::vector<int>>& hosts);

// This rank's node in one of the two trees. Across hosts the trees are the double binary tree
// over the hosts; inside a host the ranks form a chain, entered at its head from the parent
// host and left at its tail towards the child hosts, so every rank keeps at most two children.
// Tree 1 runs each host's chain in reverse, so different ranks face the network in the two
// trees. With one rank per host, or one host, this is the plain double binary tree over ranks.
TreeNode hostTreeNode(const std::vector<std::vector<int>>& hosts, int rank, int tree);

// The devices of one host in ring order, for one rank per device: GPUs when the host has any
// (each next GPU the closest unvisited one: most NVLinks, then the shortest PCIe path), else
// NUMA nodes in order. Returns indices into topo.gpus, or NUMA node OS indices.
std::vector<int> localRingOrder(const LocalTopology& topo);

}  // namespace chorus
