// The recursive-doubling all-reduce plan (algorithms/rd_allreduce.h) run symbolically: every
// rank is a thread, every link a FIFO of one message, and a value is the expression that
// produced it. Checks that every rank finishes (no deadlock with one-slot FIFOs), that all ranks
// hold the same expression (the same bits for any operator) and that it uses every rank's input
// exactly once, for 1..17 ranks and several chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/rd_allreduce.h"
#include "exec/host_rd.h"

namespace chorus {
namespace {

// One message at a time from one rank to another.
struct Link {
  std::mutex mutex;
  std::condition_variable cv;
  bool full = false;
  size_t off = 0, n = 0;
  std::vector<std::string> values;

  bool put(size_t o, size_t len, std::vector<std::string> v) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return !full; })) return false;
    full = true;
    off = o;
    n = len;
    values = std::move(v);
    cv.notify_all();
    return true;
  }
  bool take(size_t o, size_t len, std::vector<std::string>* v) {
    std::unique_lock<std::mutex> lock(mutex);
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return full; })) return false;
    if (off != o || n != len) return false;
    *v = std::move(values);
    full = false;
    cv.notify_all();
    return true;
  }
};

struct World {
  int nranks;
  std::map<std::pair<int, int>, Link> links;  // (from, to)
};

class SymbolicPrims {
 public:
  SymbolicPrims(World& w, int rank, size_t count) : w_(w), rank_(rank), out_(count) {}

  bool init() {
    for (std::string& v : out_) v = std::to_string(rank_);
    return true;
  }
  bool send(int peer, size_t off, size_t n) {
    if (!valid(peer)) return false;
    peers_.insert(peer);
    std::vector<std::string> v(out_.begin() + off, out_.begin() + off + n);
    return w_.links[{rank_, peer}].put(off, n, std::move(v));
  }
  bool recvReduce(int peer, size_t off, size_t n, bool mineFirst, bool last) {
    peers_.insert(peer);
    std::vector<std::string> v;
    if (!valid(peer) || !w_.links[{peer, rank_}].take(off, n, &v)) return false;
    for (size_t i = 0; i < n; ++i) {
      const std::string& mine = out_[off + i];
      out_[off + i] = "(" + (mineFirst ? mine + "+" + v[i] : v[i] + "+" + mine) + ")";
      if (last) out_[off + i] += "/";
    }
    return true;
  }
  bool recvCopy(int peer, size_t off, size_t n) {
    peers_.insert(peer);
    std::vector<std::string> v;
    if (!valid(peer) || !w_.links[{peer, rank_}].take(off, n, &v)) return false;
    for (size_t i = 0; i < n; ++i) out_[off + i] = v[i];
    return true;
  }
  const std::vector<std::string>& out() const { return out_; }
  const std::set<int>& peers() const { return peers_; }

 private:
  bool valid(int peer) const { return peer >= 0 && peer < w_.nranks && peer != rank_; }

  World& w_;
  int rank_;
  std::vector<std::string> out_;
  std::set<int> peers_;  // every rank this one sent to or received from
};

// The rank numbers in an expression, in order.
std::vector<int> ranksIn(const std::string& e) {
  std::vector<int> r;
  for (size_t i = 0; i < e.size();) {
    if (isdigit(static_cast<unsigned char>(e[i]))) {
      size_t j = i;
      while (j < e.size() && isdigit(static_cast<unsigned char>(e[j]))) ++j;
      r.push_back(std::stoi(e.substr(i, j - i)));
      i = j;
    } else {
      ++i;
    }
  }
  return r;
}

TEST(RdPlans, EveryRankEndsWithTheSameExpressionOverAllInputs) {
  for (int n = 1; n <= 17; ++n) {
    for (size_t count : {size_t(1), size_t(5)}) {
      const size_t chunk = 2;  // count 5: chunks of 2, 2 and 1
      World world;
      world.nranks = n;
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          if (a != b) world.links[{a, b}];
      std::vector<SymbolicPrims> prims;
      for (int r = 0; r < n; ++r) prims.emplace_back(world, r, count);
      std::vector<int> ok(n, 0);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          RdAllReduceShape s{count, chunk, n, r};
          ok[r] = rdAllReduce(prims[r], s) ? 1 : 0;
        });
      }
      for (std::thread& t : threads) t.join();
      for (int r = 0; r < n; ++r) {
        ASSERT_TRUE(ok[r]) << n << " ranks: rank " << r << " stalled or mismatched a message";
        // The links the communicator connects are exactly the ones the plan uses.
        std::vector<int> partners = rdPartners(n, r);
        EXPECT_EQ(std::set<int>(partners.begin(), partners.end()), prims[r].peers())
            << n << " ranks, rank " << r;
        for (size_t i = 0; i < count; ++i)
          EXPECT_EQ(prims[r].out()[i], prims[0].out()[i]) << n << " ranks, element " << i;
      }
      for (size_t i = 0; i < count; ++i) {
        std::vector<int> used = ranksIn(prims[0].out()[i]);
        std::sort(used.begin(), used.end());
        std::vector<int> all(n);
        for (int r = 0; r < n; ++r) all[r] = r;
        EXPECT_EQ(used, all) << n << " ranks: " << prims[0].out()[i];
        // Finalised exactly once, by the last combination (none for one rank).
        const std::string& e = prims[0].out()[i];
        const size_t marks = static_cast<size_t>(std::count(e.begin(), e.end(), '/'));
        EXPECT_EQ(marks, n > 1 ? 1u : 0u) << e;
        if (n > 1) {
          EXPECT_EQ(e.back(), '/') << e;
        }
      }
    }
  }
}

TEST(RdPlans, PowerOfTwoAndFoldedPartners) {
  EXPECT_EQ(rdPowerOfTwo(1), 1);
  EXPECT_EQ(rdPowerOfTwo(6), 4);
  EXPECT_EQ(rdPowerOfTwo(8), 8);
  // 6 ranks: 0..3 exchange with r^1 and r^2; 4 and 5 fold into 0 and 1.
  EXPECT_EQ(rdPartners(6, 0), (std::vector<int>{4, 1, 2}));
  EXPECT_EQ(rdPartners(6, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(rdPartners(6, 5), (std::vector<int>{1}));
}

}  // namespace
}  // namespace chorus
