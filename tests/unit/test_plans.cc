// Symbolic execution of the ring algorithms: each algorithm runs for every rank with a
// recording primitive set, then a simulator replays all ranks' steps through FIFO queues,
// tracking for every element which (rank, input index) contributions it holds. For nranks
// 1..16 and awkward counts this proves that every output element receives exactly one
// contribution from every rank it should, that message sizes match, and that no rank waits on
// a message that never comes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/ring_allgather.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/ring_broadcast.h"
#include "algorithms/ring_reduce.h"
#include "algorithms/ring_reduce_scatter.h"

namespace chorus {
namespace {

enum class Kind {
  kSend,
  kCopySend,
  kRecvReduceSend,
  kRecvReduceCopySend,
  kRecvReduceCopy,
  kRecvCopySend,
  kRecv
};

struct Step {
  Kind kind;
  size_t in, out, n;
};

// Records the steps one rank's algorithm takes, without moving data.
struct RecordingPrims {
  std::vector<Step> steps;
  bool add(Kind k, size_t in, size_t out, size_t n) {
    steps.push_back(Step{k, in, out, n});
    return true;
  }
  bool send(size_t in, size_t n) { return add(Kind::kSend, in, 0, n); }
  bool copySend(size_t in, size_t out, size_t n) { return add(Kind::kCopySend, in, out, n); }
  bool recvReduceSend(size_t in, size_t n) { return add(Kind::kRecvReduceSend, in, 0, n); }
  bool recvReduceCopySend(size_t in, size_t out, size_t n) {
    return add(Kind::kRecvReduceCopySend, in, out, n);
  }
  bool recvReduceCopy(size_t in, size_t out, size_t n) {
    return add(Kind::kRecvReduceCopy, in, out, n);
  }
  bool recvCopySend(size_t out, size_t n) { return add(Kind::kRecvCopySend, 0, out, n); }
  bool recv(size_t out, size_t n) { return add(Kind::kRecv, 0, out, n); }
};

// An element's symbolic value: the (rank, input index) pairs summed into it, kept sorted.
using Value = std::vector<std::pair<int, size_t>>;
using Message = std::vector<Value>;

Value combine(const Value& a, const Value& b) {
  Value r = a;
  r.insert(r.end(), b.begin(), b.end());
  std::sort(r.begin(), r.end());
  return r;
}

// Replays every rank's steps; ring order is rank order. Returns the outputs, or fails the test.
std::vector<std::vector<Value>> simulate(const std::vector<std::vector<Step>>& plans, int n,
                                         size_t inputElems, size_t outputElems) {
  std::vector<std::vector<Value>> output(n, std::vector<Value>(outputElems));
  std::vector<std::deque<Message>> inbox(n);  // messages waiting at each rank (from prev)
  std::vector<size_t> pc(n, 0);
  auto input = [&](int r, size_t j) { return Value{{r, j}}; };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (pc[r] < plans[r].size()) {
        const Step& s = plans[r][pc[r]];
        bool needsRecv = s.kind != Kind::kSend && s.kind != Kind::kCopySend;
        if (needsRecv && inbox[r].empty()) break;
        Message got;
        if (needsRecv) {
          got = std::move(inbox[r].front());
          inbox[r].pop_front();
          EXPECT_EQ(got.size(), s.n) << "rank " << r << " step " << pc[r] << ": size mismatch";
          if (got.size() != s.n) return output;
        }
        Message result(s.n);
        for (size_t k = 0; k < s.n; ++k) {
          switch (s.kind) {
            case Kind::kSend:
            case Kind::kCopySend:
              EXPECT_LT(s.in + k, inputElems);
              result[k] = input(r, s.in + k);
              break;
            case Kind::kRecvReduceSend:
            case Kind::kRecvReduceCopySend:
            case Kind::kRecvReduceCopy:
              EXPECT_LT(s.in + k, inputElems);
              result[k] = combine(got[k], input(r, s.in + k));
              break;
            default:
              result[k] = got[k];
          }
        }
        bool writes = s.kind == Kind::kCopySend || s.kind == Kind::kRecvReduceCopySend ||
                      s.kind == Kind::kRecvReduceCopy || s.kind == Kind::kRecvCopySend ||
                      s.kind == Kind::kRecv;
        bool sends = s.kind == Kind::kSend || s.kind == Kind::kCopySend ||
                     s.kind == Kind::kRecvReduceSend || s.kind == Kind::kRecvReduceCopySend ||
                     s.kind == Kind::kRecvCopySend;
        if (writes) {
          for (size_t k = 0; k < s.n; ++k) {
            EXPECT_LT(s.out + k, outputElems);
            EXPECT_TRUE(output[r][s.out + k].empty())
                << "rank " << r << " writes output element " << s.out + k << " twice";
            output[r][s.out + k] = result[k];
          }
        }
        if (sends) inbox[(r + 1) % n].push_back(std::move(result));
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(pc[r], plans[r].size()) << "rank " << r << " is stuck waiting (deadlock)";
    EXPECT_TRUE(inbox[r].empty()) << "rank " << r << " never consumed a message";
  }
  return output;
}

Value everyRank(int n, size_t index) {
  Value v;
  for (int q = 0; q < n; ++q) v.push_back({q, index});
  return v;
}

template <class Shape, class Algo>
std::vector<std::vector<Step>> record(int n, const std::function<Shape(int)>& shapeOf, Algo algo) {
  std::vector<std::vector<Step>> plans(n);
  for (int r = 0; r < n; ++r) {
    RecordingPrims p;
    EXPECT_TRUE(algo(p, shapeOf(r)));
    plans[r] = std::move(p.steps);
  }
  return plans;
}

const size_t kCounts[] = {0, 1, 2, 3, 7, 16, 17, 31, 100, 257};
const size_t kChunks[] = {1, 3, 8, 64};

std::vector<int> identityRing(int n) {
  std::vector<int> ring(n);
  for (int i = 0; i < n; ++i) ring[i] = i;
  return ring;
}

TEST(Plans, RingAllReduceGivesEveryElementOneContributionFromEachRank) {
  for (int n = 1; n <= 16; ++n)
    for (size_t count : kCounts)
      for (size_t chunk : kChunks) {
        if (n == 1) continue;  // one rank copies locally, no plan
        auto plans = record<RingAllReduceShape>(
            n,
            [&](int r) {
              return RingAllReduceShape{count, chunk, n, r};
            },
            [](RecordingPrims& p, const RingAllReduceShape& s) { return ringAllReduce(p, s); });
        auto out = simulate(plans, n, count, count);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(out[r][i], everyRank(n, i))
                << "n=" << n << " count=" << count << " chunk=" << chunk << " rank " << r
                << " element " << i;
      }
}

TEST(Plans, RingAllGatherPlacesEveryBlock) {
  for (int n = 2; n <= 16; ++n) {
    std::vector<int> ring = identityRing(n);
    for (size_t count : kCounts)
      for (size_t chunk : kChunks) {
        auto plans = record<RingAllGatherShape>(
            n, [&](int r) { return RingAllGatherShape{count, chunk, n, r, ring.data(), count}; },
            [](RecordingPrims& p, const RingAllGatherShape& s) { return ringAllGather(p, s); });
        auto out = simulate(plans, n, count, count * n);
        for (int r = 0; r < n; ++r)
          for (size_t j = 0; j < count * n; ++j)
            ASSERT_EQ(out[r][j], (Value{{static_cast<int>(j / count), j % count}}))
                << "n=" << n << " count=" << count << " rank " << r << " element " << j;
      }
  }
}

TEST(Plans, RingReduceScatterReducesEachBlockAtItsOwner) {
  for (int n = 2; n <= 16; ++n) {
    std::vector<int> ring = identityRing(n);
    for (size_t count : kCounts)
      for (size_t chunk : kChunks) {
        auto plans = record<RingReduceScatterShape>(
            n,
            [&](int r) { return RingReduceScatterShape{count, chunk, n, r, ring.data(), count}; },
            [](RecordingPrims& p, const RingReduceScatterShape& s) {
              return ringReduceScatter(p, s);
            });
        auto out = simulate(plans, n, count * n, count);
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(out[r][i], everyRank(n, r * count + i))
                << "n=" << n << " count=" << count << " rank " << r << " element " << i;
      }
  }
}

TEST(Plans, RingBroadcastAndReduceFromEveryRoot) {
  for (int n = 2; n <= 16; ++n)
    for (int root = 0; root < n; ++root)
      for (size_t count : {size_t(0), size_t(1), size_t(17), size_t(100)})
        for (size_t chunk : {size_t(1), size_t(8)}) {
          auto bplans = record<RingBroadcastShape>(
              n, [&](int r) { return RingBroadcastShape{count, chunk, n, r, root, false}; },
              [](RecordingPrims& p, const RingBroadcastShape& s) { return ringBroadcast(p, s); });
          auto bout = simulate(bplans, n, count, count);
          for (int r = 0; r < n; ++r)
            for (size_t i = 0; i < count; ++i)
              ASSERT_EQ(bout[r][i], (Value{{root, i}})) << "broadcast n=" << n << " root=" << root;
          auto rplans = record<RingReduceShape>(
              n,
              [&](int r) {
                return RingReduceShape{count, chunk, n, r, root};
              },
              [](RecordingPrims& p, const RingReduceShape& s) { return ringReduce(p, s); });
          auto rout = simulate(rplans, n, count, count);
          for (size_t i = 0; i < count; ++i)
            ASSERT_EQ(rout[root][i], everyRank(n, i)) << "reduce n=" << n << " root=" << root;
          for (int r = 0; r < n; ++r) {
            if (r == root) continue;
            for (size_t i = 0; i < count; ++i) ASSERT_TRUE(rout[r][i].empty());
          }
        }
}

// Channels split every rank block into slices, each moved by its own ring with the blocks still
// `count` apart (blockStride); the slices must compose the whole result.
TEST(Plans, ChannelSlicesOfBlockedCollectivesComposeTheWholeResult) {
  for (int n = 2; n <= 8; ++n) {
    std::vector<int> ring = identityRing(n);
    for (size_t count : {size_t(1), size_t(5), size_t(17), size_t(100)}) {
      // Three slices as the executor cuts them: equal, the last possibly short or empty.
      size_t per = (count + 2) / 3;
      std::vector<Value> gathered[16], scattered[16];
      for (int r = 0; r < n; ++r) {
        gathered[r].assign(count * n, Value());
        scattered[r].assign(count, Value());
      }
      for (int c = 0; c < 3; ++c) {
        size_t b = std::min(count, per * c), e = std::min(count, per * (c + 1));
        size_t len = e - b;
        auto shift = [&](Value v) {
          for (auto& x : v) x.second += b;
          return v;
        };
        auto ag = record<RingAllGatherShape>(
            n, [&](int r) { return RingAllGatherShape{len, 4, n, r, ring.data(), count}; },
            [](RecordingPrims& p, const RingAllGatherShape& s) { return ringAllGather(p, s); });
        auto agOut = simulate(ag, n, len, count * n);
        auto rs = record<RingReduceScatterShape>(
            n, [&](int r) { return RingReduceScatterShape{len, 4, n, r, ring.data(), count}; },
            [](RecordingPrims& p, const RingReduceScatterShape& s) {
              return ringReduceScatter(p, s);
            });
        // Reduce-scatter input offsets are block-relative (r*count + j) within the slice's
        // view, which starts b elements into the buffer.
        auto rsOut = simulate(rs, n, count * n, len);
        for (int r = 0; r < n; ++r) {
          for (size_t j = 0; j < count * n; ++j)
            if (!agOut[r][j].empty()) {
              ASSERT_TRUE(gathered[r][j + b].empty()) << "two channels wrote one element";
              gathered[r][j + b] = shift(agOut[r][j]);
            }
          for (size_t j = 0; j < len; ++j) scattered[r][j + b] = shift(rsOut[r][j]);
        }
      }
      for (int r = 0; r < n; ++r) {
        for (size_t j = 0; j < count * n; ++j)
          ASSERT_EQ(gathered[r][j], (Value{{static_cast<int>(j / count), j % count}}))
              << "all-gather n=" << n << " count=" << count << " rank " << r << " element " << j;
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(scattered[r][i], everyRank(n, r * count + i))
              << "reduce-scatter n=" << n << " count=" << count << " rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace chorus
