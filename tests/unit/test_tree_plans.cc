// Symbolic execution of the double binary tree all-reduce: every rank's algorithm runs with a
// recording primitive set, then a simulator replays all ranks' steps over FIFO links of the
// real capacity (a step runs only when every message it needs has arrived and every link it
// sends on has a free slot), tracking which (rank, input index) contributions each element
// holds. For nranks 1..16, awkward counts, chunk sizes and FIFO depths this proves that every
// output element of every rank holds exactly one contribution from every rank, that message
// sizes match, and that no rank is left waiting (no deadlock with bounded FIFOs).
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "algorithms/double_binary_tree.h"
#include "algorithms/topo_graph.h"
#include "algorithms/tree_allreduce.h"

namespace chorus {
namespace {

enum class Kind { kUp, kRoot, kDown };

struct Step {
  Kind kind;
  int tree;
  size_t in, out, n;
};

struct RecordingTreePrims {
  std::vector<Step> steps;
  bool recvReduceSend(int tree, size_t in, size_t n) {
    steps.push_back(Step{Kind::kUp, tree, in, 0, n});
    return true;
  }
  bool recvReduceCopySend(int tree, size_t in, size_t out, size_t n) {
    steps.push_back(Step{Kind::kRoot, tree, in, out, n});
    return true;
  }
  bool recvCopySend(int tree, size_t out, size_t n) {
    steps.push_back(Step{Kind::kDown, tree, 0, out, n});
    return true;
  }
};

using Value = std::vector<std::pair<int, size_t>>;  // sorted contributions
using Message = std::vector<Value>;
// A one-way link: (tree, from, to, down?) -> FIFO of messages.
using LinkKey = std::tuple<int, int, int, bool>;

Value everyRank(int n, size_t i) {
  Value v;
  for (int q = 0; q < n; ++q) v.push_back({q, i});
  return v;
}

using NodeOf = std::function<TreeNode(int rank, int tree)>;

void runCase(int n, size_t count, size_t chunk, int slots, const NodeOf& nodeOf) {
  std::vector<std::vector<Step>> plans(n);
  std::vector<TreeNode> nodes[kNumTrees];
  for (int t = 0; t < kNumTrees; ++t)
    for (int r = 0; r < n; ++r) nodes[t].push_back(nodeOf(r, t));
  for (int r = 0; r < n; ++r) {
    TreeAllReduceShape s{};
    s.count = count;
    s.chunkElems = chunk;
    s.fifoSlots = slots;
    for (int t = 0; t < kNumTrees; ++t) s.depth[t] = nodes[t][r].depth;
    RecordingTreePrims p;
    ASSERT_TRUE(treeAllReduce(p, s));
    plans[r] = std::move(p.steps);
  }
  std::map<LinkKey, std::deque<Message>> links;
  std::vector<std::vector<Value>> out(n, std::vector<Value>(count));
  std::vector<size_t> pc(n, 0);
  auto hasRoom = [&](const LinkKey& k) { return links[k].size() < static_cast<size_t>(slots); };
  auto ready = [&](const LinkKey& k) { return !links[k].empty(); };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (pc[r] < plans[r].size()) {
        const Step& s = plans[r][pc[r]];
        const TreeNode& node = nodes[s.tree][r];
        std::vector<LinkKey> from, to;
        if (s.kind == Kind::kDown) {
          ASSERT_GE(node.parent, 0) << "rank " << r << " receives down without a parent";
          from.push_back(LinkKey{s.tree, node.parent, r, true});
        } else {
          for (int c = 0; c < node.nchildren; ++c)
            from.push_back(LinkKey{s.tree, node.children[c], r, false});
        }
        if (s.kind == Kind::kUp) {
          ASSERT_GE(node.parent, 0) << "the root of tree " << s.tree << " sends up";
          to.push_back(LinkKey{s.tree, r, node.parent, false});
        } else {
          for (int c = 0; c < node.nchildren; ++c)
            to.push_back(LinkKey{s.tree, r, node.children[c], true});
        }
        if (s.kind == Kind::kRoot) {
          ASSERT_EQ(node.parent, -1) << "rank " << r << " is no root";
        }
        bool can = true;
        for (const LinkKey& k : from) can = can && ready(k);
        for (const LinkKey& k : to) can = can && hasRoom(k);
        if (!can) break;
        Message result(s.n);
        if (s.kind == Kind::kDown) {
          Message got = std::move(links[from[0]].front());
          links[from[0]].pop_front();
          ASSERT_EQ(got.size(), s.n) << "rank " << r << " down message size";
          result = std::move(got);
        } else {
          for (size_t k = 0; k < s.n; ++k) {
            ASSERT_LT(s.in + k, count);
            result[k] = Value{{r, s.in + k}};
          }
          for (const LinkKey& k : from) {
            Message got = std::move(links[k].front());
            links[k].pop_front();
            ASSERT_EQ(got.size(), s.n) << "rank " << r << " up message size";
            for (size_t e = 0; e < s.n; ++e) {
              result[e].insert(result[e].end(), got[e].begin(), got[e].end());
              std::sort(result[e].begin(), result[e].end());
            }
          }
        }
        if (s.kind != Kind::kUp) {
          for (size_t k = 0; k < s.n; ++k) {
            ASSERT_LT(s.out + k, count);
            ASSERT_TRUE(out[r][s.out + k].empty())
                << "rank " << r << " writes element " << s.out + k << " twice";
            out[r][s.out + k] = result[k];
          }
        }
        for (const LinkKey& k : to) links[k].push_back(result);
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(pc[r], plans[r].size()) << "rank " << r << " is stuck (deadlock) n=" << n
                                      << " count=" << count << " chunk=" << chunk;
  for (auto& link : links) ASSERT_TRUE(link.second.empty()) << "a message was never consumed";
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      ASSERT_EQ(out[r][i], everyRank(n, i))
          << "n=" << n << " count=" << count << " chunk=" << chunk << " rank " << r << " elt " << i;
}

TEST(TreePlans, EveryElementGetsOneContributionFromEachRankWithoutDeadlock) {
  for (int n = 2; n <= 16; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(7), size_t(17),
                         size_t(31), size_t(100), size_t(257)})
      for (size_t chunk : {size_t(1), size_t(3), size_t(8), size_t(64)})
        for (int slots : {2, 3, 8})
          runCase(n, count, chunk, slots, [n](int r, int t) { return treeNode(n, r, t); });
}

// Trees across hosts with chains inside each host (topo_graph.h), for several host shapes and
// placements of ranks on hosts.
TEST(TreePlans, HostTreesGiveEveryElementOneContributionFromEachRank) {
  const std::vector<std::vector<int>> hostSizes = {{2, 2},    {2, 2, 2, 2},          {3, 1, 2},
                                                   {1, 4, 1}, {2, 2, 2, 2, 2, 2, 2}, {5, 5, 5}};
  for (const auto& sizes : hostSizes) {
    for (bool interleaved : {false, true}) {
      int n = 0;
      for (int k : sizes) n += k;
      // Host of each rank: contiguous blocks, or dealt round-robin over the hosts with room.
      std::vector<uint64_t> hostOf(n);
      std::vector<int> left = sizes;
      for (int r = 0, h = 0; r < n; ++r) {
        if (!interleaved) {
          while (left[h] == 0) ++h;
        } else {
          while (left[h % sizes.size()] == 0) ++h;
          h %= static_cast<int>(sizes.size());
        }
        hostOf[r] = 100 + h;
        --left[h];
        if (interleaved) ++h;
      }
      auto hosts = groupRanksByHost(hostOf);
      for (size_t count : {size_t(1), size_t(7), size_t(100)})
        for (size_t chunk : {size_t(1), size_t(8)})
          for (int slots : {2, 8})
            runCase(n, count, chunk, slots,
                    [&hosts](int r, int t) { return hostTreeNode(hosts, r, t); });
    }
  }
}

}  // namespace
}  // namespace chorus
