// The double binary tree: for every size up to 64 both trees span all ranks with consistent
// links and logarithmic depth, and no rank forwards data in both trees. Tree all-reduce, run
// over recording primitives with small bounded FIFOs, finishes without deadlock and gives every
// output element exactly one contribution from every rank, finalised once.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/double_binary_tree.h"
#include "algorithms/tree_allreduce.h"

namespace {

using chorus::kNumTrees;
using chorus::TreeNode;
using chorus::treeNode;
using chorus::treeRoot;

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

std::vector<TreeNode> nodes(int n, int tree) {
  std::vector<TreeNode> all;
  for (int r = 0; r < n; ++r) all.push_back(treeNode(n, r, tree));
  return all;
}

TEST(DoubleBinaryTree, EachTreeSpansAllRanksWithConsistentLinks) {
  for (int n = 1; n <= 64; ++n) {
    for (int t = 0; t < kNumTrees; ++t) {
      SCOPED_TRACE(testing::Message() << "nranks " << n << " tree " << t);
      std::vector<TreeNode> all = nodes(n, t);
      int root = treeRoot(n, t);
      ASSERT_GE(root, 0);
      ASSERT_LT(root, n);
      EXPECT_EQ(all[root].parent, -1);
      EXPECT_EQ(all[root].depth, 0);
      for (int r = 0; r < n; ++r) {
        const TreeNode& node = all[r];
        if (r != root) {
          ASSERT_GE(node.parent, 0) << "rank " << r << " has no parent but is not the root";
          ASSERT_LT(node.parent, n);
          const TreeNode& p = all[node.parent];
          int found = 0;
          for (int c = 0; c < p.nchildren; ++c) found += p.children[c] == r;
          EXPECT_EQ(found, 1) << "rank " << r << " is not a child of its parent " << node.parent;
          EXPECT_EQ(node.depth, p.depth + 1) << "rank " << r;
        }
        ASSERT_GE(node.nchildren, 0);
        ASSERT_LE(node.nchildren, 2);
        for (int c = 0; c < node.nchildren; ++c) {
          ASSERT_GE(node.children[c], 0);
          ASSERT_LT(node.children[c], n);
          EXPECT_EQ(all[node.children[c]].parent, r)
              << "child " << node.children[c] << " of rank " << r << " names another parent";
        }
        EXPECT_LE(node.depth, ceilLog2(n) + 1) << "rank " << r;
      }
      // Every rank is reached from the root exactly once.
      std::vector<int> seen(n, 0);
      std::vector<int> stack = {root};
      while (!stack.empty()) {
        int r = stack.back();
        stack.pop_back();
        ASSERT_EQ(seen[r]++, 0) << "rank " << r << " reached twice";
        for (int c = 0; c < all[r].nchildren; ++c) stack.push_back(all[r].children[c]);
      }
      for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], 1) << "rank " << r << " unreachable";
    }
  }
}

TEST(DoubleBinaryTree, NoRankIsInteriorInBothTrees) {
  for (int n = 3; n <= 64; ++n) {
    std::vector<TreeNode> t0 = nodes(n, 0), t1 = nodes(n, 1);
    for (int r = 0; r < n; ++r)
      EXPECT_FALSE(t0[r].nchildren > 0 && t1[r].nchildren > 0)
          << "rank " << r << " of " << n << " forwards in both trees";
  }
}

TEST(DoubleBinaryTree, TreesHaveDifferentRoots) {
  for (int n = 2; n <= 64; ++n) EXPECT_NE(treeRoot(n, 0), treeRoot(n, 1)) << "nranks " << n;
}

TEST(DoubleBinaryTree, SmallShapes) {
  // Two ranks: each is the other's parent in one tree.
  EXPECT_EQ(treeNode(2, 0, 0).parent, 1);
  EXPECT_EQ(treeNode(2, 1, 1).parent, 0);
  // Four ranks, tree 0 over labels 1..4: 4 is the root, 2 its child, 1 and 3 below 2.
  TreeNode root = treeNode(4, 3, 0);
  EXPECT_EQ(root.parent, -1);
  ASSERT_EQ(root.nchildren, 1);
  EXPECT_EQ(root.children[0], 1);
  TreeNode mid = treeNode(4, 1, 0);
  ASSERT_EQ(mid.nchildren, 2);
  EXPECT_EQ(mid.children[0], 0);
  EXPECT_EQ(mid.children[1], 2);
  // Tree 1 is tree 0 moved up by one rank.
  EXPECT_EQ(treeRoot(4, 1), 0);
  EXPECT_EQ(treeNode(4, 2, 1).children[1], 3);
  // One rank: a lone root.
  EXPECT_EQ(treeNode(1, 0, 0).parent, -1);
  EXPECT_EQ(treeNode(1, 0, 1).nchildren, 0);
}

// What an element has seen: the ranks that contributed (as a mask), how many contributions
// arrived, and how many times it was finalised.
struct Trace {
  uint64_t ranks = 0;
  int contributions = 0;
  int finalized = 0;
};
using Chunk = std::vector<Trace>;

// A bounded single-producer single-consumer FIFO of chunks. A wait that lasts longer than any
// correct run fails instead of hanging, which is how a deadlock shows.
class Fifo {
 public:
  explicit Fifo(size_t slots) : slots_(slots) {}
  bool waitFilled(const Chunk** front) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!cv_.wait_for(lock, std::chrono::seconds(20), [&] { return !items_.empty(); }))
      return false;
    *front = &items_.front();
    return true;
  }
  bool waitFree() {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, std::chrono::seconds(20), [&] { return items_.size() < slots_; });
  }
  void push(Chunk c) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(c));
    cv_.notify_all();
  }
  void pop() {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.pop_front();
    cv_.notify_all();
  }

 private:
  size_t slots_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Chunk> items_;
};

// up[t][r]: from rank r to its parent in tree t; down[t][r]: from r's parent to r.
struct Fabric {
  Fabric(int n, size_t slots) {
    for (int t = 0; t < kNumTrees; ++t)
      for (int r = 0; r < n; ++r) {
        up[t].push_back(std::make_unique<Fifo>(slots));
        down[t].push_back(std::make_unique<Fifo>(slots));
      }
  }
  std::vector<std::unique_ptr<Fifo>> up[kNumTrees], down[kNumTrees];
};

// Primitives that move traces instead of numbers, holding received slots while they wait for
// free ones as the host primitives do.
class RecordingPrims {
 public:
  RecordingPrims(Fabric& f, int n, int rank, std::vector<Trace>& out)
      : f_(f), rank_(rank), out_(out) {
    for (int t = 0; t < kNumTrees; ++t) node_[t] = treeNode(n, rank, t);
  }

  bool recvReduceSend(int t, size_t in, size_t n) {
    Chunk acc = local(in, n);
    if (!gather(t, &acc)) return false;
    if (!f_.up[t][rank_]->waitFree()) return false;
    f_.up[t][rank_]->push(acc);
    releaseChildren(t);
    return true;
  }
  bool recvReduceCopySend(int t, size_t in, size_t out, size_t n) {
    Chunk acc = local(in, n);
    if (!gather(t, &acc)) return false;
    for (Trace& e : acc) ++e.finalized;
    if (!sendDown(t, acc)) return false;
    for (size_t i = 0; i < n; ++i) out_[out + i] = acc[i];
    releaseChildren(t);
    return true;
  }
  bool recvCopySend(int t, size_t out, size_t n) {
    const Chunk* got = nullptr;
    if (!f_.down[t][rank_]->waitFilled(&got)) return false;
    if (got->size() != n) return false;
    Chunk copy = *got;
    if (!sendDown(t, copy)) return false;
    for (size_t i = 0; i < n; ++i) out_[out + i] = copy[i];
    f_.down[t][rank_]->pop();
    return true;
  }

 private:
  Chunk local(size_t in, size_t n) const {
    (void)in;
    return Chunk(n, Trace{uint64_t(1) << rank_, 1, 0});
  }
  bool gather(int t, Chunk* acc) {
    for (int c = 0; c < node_[t].nchildren; ++c) {
      const Chunk* got = nullptr;
      if (!f_.up[t][node_[t].children[c]]->waitFilled(&got)) return false;
      if (got->size() != acc->size()) return false;
      for (size_t i = 0; i < acc->size(); ++i) {
        (*acc)[i].ranks |= (*got)[i].ranks;
        (*acc)[i].contributions += (*got)[i].contributions;
        (*acc)[i].finalized += (*got)[i].finalized;
      }
    }
    return true;
  }
  bool sendDown(int t, const Chunk& c) {
    for (int k = 0; k < node_[t].nchildren; ++k)
      if (!f_.down[t][node_[t].children[k]]->waitFree()) return false;
    for (int k = 0; k < node_[t].nchildren; ++k) f_.down[t][node_[t].children[k]]->push(c);
    return true;
  }
  void releaseChildren(int t) {
    for (int c = 0; c < node_[t].nchildren; ++c) f_.up[t][node_[t].children[c]]->pop();
  }

  Fabric& f_;
  int rank_;
  std::vector<Trace>& out_;
  TreeNode node_[kNumTrees];
};

TEST(TreeAllReduce, EveryRankContributesOnceWithoutDeadlock) {
  for (int n : {2, 3, 4, 5, 7, 8, 13, 16, 33}) {
    for (int slots : {2, 3, 8}) {
      for (size_t count : {size_t(1), size_t(5), size_t(97)}) {
        SCOPED_TRACE(testing::Message()
                     << "nranks " << n << " slots " << slots << " count " << count);
        Fabric fabric(n, static_cast<size_t>(slots));
        std::vector<std::vector<Trace>> out(n, std::vector<Trace>(count));
        std::vector<int> ok(n, 0);
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            RecordingPrims prims(fabric, n, r, out[r]);
            chorus::TreeAllReduceShape shape{};
            shape.count = count;
            shape.chunkElems = 4;
            shape.fifoSlots = slots;
            for (int t = 0; t < kNumTrees; ++t) shape.depth[t] = treeNode(n, r, t).depth;
            ok[r] = chorus::treeAllReduce(prims, shape) ? 1 : 0;
          });
        }
        for (std::thread& t : threads) t.join();
        const uint64_t all = n == 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
        for (int r = 0; r < n; ++r) {
          ASSERT_EQ(ok[r], 1) << "rank " << r << " stalled or saw a wrong chunk size";
          for (size_t i = 0; i < count; ++i) {
            const Trace& e = out[r][i];
            ASSERT_TRUE(e.ranks == all && e.contributions == n && e.finalized == 1)
                << "rank " << r << " element " << i << ": ranks " << std::hex << e.ranks << std::dec
                << ", " << e.contributions << " contributions, finalised " << e.finalized
                << " times";
          }
        }
      }
    }
  }
}

}  // namespace
