// Rings and trees shaped by hosts (algorithms/topo_graph.h): for many host shapes and placements
// of ranks on hosts, the ring visits every rank once and crosses between hosts exactly once per
// host; each tree spans every rank with consistent links, at most two children, true depths,
// and exactly one edge into every host but the root's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "algorithms/topo_graph.h"

namespace chorus {
namespace {

// Rank r lives on host hostOf[r]; placements: contiguous blocks or dealt round-robin.
std::vector<uint64_t> place(const std::vector<int>& sizes, bool interleaved) {
  std::vector<uint64_t> hostOf;
  std::vector<int> left = sizes;
  int n = 0;
  for (int k : sizes) n += k;
  int h = 0;
  for (int r = 0; r < n; ++r) {
    if (interleaved) {
      while (left[h % sizes.size()] == 0) ++h;
      h %= static_cast<int>(sizes.size());
    } else {
      while (left[h] == 0) ++h;
    }
    hostOf.push_back(1000 + 7 * h);
    --left[h];
    if (interleaved) ++h;
  }
  return hostOf;
}

const std::vector<std::vector<int>> kShapes = {{1},
                                               {4},
                                               {1, 1},
                                               {2, 2},
                                               {1, 1, 1, 1, 1},
                                               {2, 2, 2, 2},
                                               {3, 1, 2},
                                               {1, 4, 1},
                                               {8, 8},
                                               {2, 2, 2, 2, 2, 2, 2},
                                               {5, 5, 5},
                                               {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}};

TEST(TopoGraph, GroupsKeepRankOrder) {
  auto hosts = groupRanksByHost({5, 9, 5, 9, 7});
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0], (std::vector<int>{0, 2}));
  EXPECT_EQ(hosts[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(hosts[2], (std::vector<int>{4}));
  EXPECT_EQ(hostContiguousRing(hosts), (std::vector<int>{0, 2, 1, 3, 4}));
}

TEST(TopoGraph, RingCrossesOncePerHost) {
  for (const auto& sizes : kShapes)
    for (bool interleaved : {false, true}) {
      std::vector<uint64_t> hostOf = place(sizes, interleaved);
      const int n = static_cast<int>(hostOf.size());
      std::vector<int> ring = hostContiguousRing(groupRanksByHost(hostOf));
      std::vector<int> sorted = ring;
      std::sort(sorted.begin(), sorted.end());
      for (int r = 0; r < n; ++r) ASSERT_EQ(sorted[r], r);
      int crossings = 0;
      for (int i = 0; i < n; ++i) crossings += hostOf[ring[i]] != hostOf[ring[(i + 1) % n]];
      EXPECT_EQ(crossings, sizes.size() > 1 ? static_cast<int>(sizes.size()) : 0)
          << sizes.size() << " hosts, interleaved " << interleaved;
    }
}

TEST(TopoGraph, TreesSpanEveryRankAndEnterEachHostOnce) {
  for (const auto& sizes : kShapes)
    for (bool interleaved : {false, true}) {
      std::vector<uint64_t> hostOf = place(sizes, interleaved);
      const int n = static_cast<int>(hostOf.size());
      auto hosts = groupRanksByHost(hostOf);
      for (int t = 0; t < kNumTrees; ++t) {
        std::vector<TreeNode> nodes;
        for (int r = 0; r < n; ++r) nodes.push_back(hostTreeNode(hosts, r, t));
        int roots = 0, crossEdges = 0;
        for (int r = 0; r < n; ++r) {
          const TreeNode& node = nodes[r];
          ASSERT_LE(node.nchildren, 2);
          if (node.parent < 0) {
            ++roots;
            EXPECT_EQ(node.depth, 0);
          } else {
            ASSERT_LT(node.parent, n);
            const TreeNode& p = nodes[node.parent];
            EXPECT_TRUE(std::count(p.children, p.children + p.nchildren, r) == 1)
                << "rank " << r << " is not a child of its parent " << node.parent;
            EXPECT_EQ(node.depth, p.depth + 1) << "rank " << r;
            crossEdges += hostOf[r] != hostOf[node.parent];
          }
          for (int c = 0; c < node.nchildren; ++c) EXPECT_EQ(nodes[node.children[c]].parent, r);
        }
        EXPECT_EQ(roots, n > 0 ? 1 : 0);
        // A tree over H hosts needs H-1 edges between hosts; single-rank hosts fall back to
        // the plain tree over ranks, which is the same thing.
        if (n > 1) EXPECT_EQ(crossEdges, static_cast<int>(sizes.size()) - 1);
      }
    }
}

}  // namespace
}  // namespace chorus
