#include "algorithms/topo_graph.h"

#include <algorithm>

namespace chorus {

std::vector<std::vector<int>> groupRanksByHost(const std::vector<uint64_t>& hostOfRank) {
  std::vector<std::vector<int>> hosts;
  std::vector<uint64_t> ids;
  for (int r = 0; r < static_cast<int>(hostOfRank.size()); ++r) {
    auto it = std::find(ids.begin(), ids.end(), hostOfRank[r]);
    if (it == ids.end()) {
      ids.push_back(hostOfRank[r]);
      hosts.emplace_back();
      hosts.back().push_back(r);
    } else {
      hosts[it - ids.begin()].push_back(r);
    }
  }
  return hosts;
}

std::vector<int> hostContiguousRing(const std::vector<std::vector<int>>& hosts) {
  std::vector<int> ring;
  for (const auto& h : hosts) ring.insert(ring.end(), h.begin(), h.end());
  return ring;
}

namespace {

// The chain of host h in tree t: its ranks, reversed in tree 1.
std::vector<int> chainOf(const std::vector<std::vector<int>>& hosts, int h, int tree) {
  std::vector<int> chain = hosts[h];
  if (tree == 1) std::reverse(chain.begin(), chain.end());
  return chain;
}

}  // namespace

TreeNode hostTreeNode(const std::vector<std::vector<int>>& hosts, int rank, int tree) {
  const int nhosts = static_cast<int>(hosts.size());
  int nranks = 0;
  for (const auto& h : hosts) nranks += static_cast<int>(h.size());
  if (nhosts <= 1 || nhosts == nranks) {
    // No host structure to follow: the double binary tree over ranks (in host order).
    std::vector<int> order = hostContiguousRing(hosts);
    int pos = static_cast<int>(std::find(order.begin(), order.end(), rank) - order.begin());
    TreeNode byPos = treeNode(nranks, pos, tree);
    TreeNode node = byPos;
    if (byPos.parent >= 0) node.parent = order[byPos.parent];
    for (int c = 0; c < byPos.nchildren; ++c) node.children[c] = order[byPos.children[c]];
    return node;
  }
  int host = -1, index = -1;
  for (int h = 0; h < nhosts && host < 0; ++h) {
    std::vector<int> chain = chainOf(hosts, h, tree);
    auto it = std::find(chain.begin(), chain.end(), rank);
    if (it != chain.end()) {
      host = h;
      index = static_cast<int>(it - chain.begin());
    }
  }
  TreeNode node;
  if (host < 0) return node;
  const std::vector<int> chain = chainOf(hosts, host, tree);
  const TreeNode hostNode = treeNode(nhosts, host, tree);
  // Up: the previous rank of the chain, or the parent host's tail for the head.
  if (index > 0)
    node.parent = chain[index - 1];
  else if (hostNode.parent >= 0)
    node.parent = chainOf(hosts, hostNode.parent, tree).back();
  // Down: the next rank of the chain, or the child hosts' heads for the tail.
  if (index + 1 < static_cast<int>(chain.size())) {
    node.children[node.nchildren++] = chain[index + 1];
  } else {
    for (int c = 0; c < hostNode.nchildren; ++c)
      node.children[node.nchildren++] = chainOf(hosts, hostNode.children[c], tree).front();
  }
  // Depth: the edges up to the root, through the chains of every host above.
  int depth = index;
  for (int h = hostNode.parent, below = host; h >= 0;) {
    depth += static_cast<int>(hosts[h].size());
    below = h;
    h = treeNode(nhosts, below, tree).parent;
  }
  node.depth = depth;
  return node;
}

namespace {

// Closeness of two GPUs: NVLinks first, then the PCIe path (PIX best); larger is closer.
int gpuCloseness(const LocalTopology& topo, int a, int b) {
  const Gpu& ga = topo.gpus[a];
  int links = b < static_cast<int>(ga.nvlinks.size()) ? ga.nvlinks[b] : 0;
  if (nvlinkConnected(topo, a, b)) links = std::max(links, 1);
  PciDistance d = pciDistance(topo, ga.pciBusId, topo.gpus[b].pciBusId);
  int path =
      d == PciDistance::kUnknown ? 0 : static_cast<int>(PciDistance::kSys) - static_cast<int>(d);
  return links * 16 + path;
}

}  // namespace

std::vector<int> localRingOrder(const LocalTopology& topo) {
  std::vector<int> order;
  const int ngpus = static_cast<int>(topo.gpus.size());
  if (ngpus == 0) {
    for (const NumaNode& n : topo.numaNodes) order.push_back(n.osIndex);
    return order;
  }
  std::vector<bool> used(ngpus, false);
  int current = 0;
  for (int step = 0; step < ngpus; ++step) {
    order.push_back(current);
    used[current] = true;
    int best = -1;
    for (int g = 0; g < ngpus; ++g)
      if (!used[g] &&
          (best < 0 || gpuCloseness(topo, current, g) > gpuCloseness(topo, current, best)))
        best = g;
    if (best < 0) break;
    current = best;
  }
  return order;
}

}  // namespace chorus
