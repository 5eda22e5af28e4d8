// Symbolic execution of the direct all-reduce (algorithms/direct_allreduce.h): the algorithm runs
// for every rank with a recording primitive set, then a simulator replays all ranks' steps over a
// model of the shared region (double-buffered staging and result buffers per rank, the staged /
// reduced counters and the waits on them) under several schedules. Every element carries
// the ordered list of (rank, input index, call) operands it was computed from. For nranks 1..16,
// both modes and awkward counts and chunk sizes this proves that every output element of every
// rank gets exactly one contribution from every rank, is finalised exactly once, and is computed
// from the same operands in the same order (rank 0, 1, ..., n-1) on every rank, which with one
// deterministic element-wise kernel means bitwise-identical results. It also proves that no rank
// reads a buffer after declaring it done or after its owner reused it, and that no schedule
// deadlocks, also across consecutive calls of different modes and sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/direct_allreduce.h"

namespace chorus {
namespace {

enum class Kind { kStage, kReduceToOutput, kReduceToResult, kPublish, kCopy, kFinish };

struct Step {
  Kind kind;
  int call;  // index of the collective call this step belongs to
  int peer;
  size_t in, from, out, n;
  bool first, last;
  size_t skip = 0, skipLen = 0;  // stage: the part of the chunk left unstaged
};

// Records the steps one rank's algorithm takes, without moving data.
struct RecordingPrims {
  std::vector<Step> steps;
  int call = 0;
  bool add(Kind k, int peer, size_t in, size_t from, size_t out, size_t n, bool first, bool last) {
    steps.push_back(Step{k, call, peer, in, from, out, n, first, last});
    return true;
  }
  bool stage(size_t in, size_t n, size_t skip, size_t skipLen) {
    add(Kind::kStage, -1, in, 0, 0, n, false, false);
    steps.back().skip = skip;
    steps.back().skipLen = skipLen;
    return true;
  }
  bool reduceToOutput(int peer, size_t from, size_t out, size_t n, bool first, bool last) {
    return add(Kind::kReduceToOutput, peer, 0, from, out, n, first, last);
  }
  bool reduceToResult(int peer, size_t from, size_t out, size_t n, bool first, bool last) {
    return add(Kind::kReduceToResult, peer, 0, from, out, n, first, last);
  }
  bool publishResult() { return add(Kind::kPublish, -1, 0, 0, 0, 0, false, false); }
  bool copyResult(int peer, size_t from, size_t out, size_t n) {
    return add(Kind::kCopy, peer, 0, from, out, n, false, false);
  }
  bool finish() { return add(Kind::kFinish, -1, 0, 0, 0, 0, false, false); }
};

// One operand: element `index` of `rank`'s input in collective call `call`.
struct Term {
  int rank;
  size_t index;
  int call;
  bool operator==(const Term& o) const {
    return rank == o.rank && index == o.index && call == o.call;
  }
};

// An element's symbolic value: its operands in the order they were combined, how often it was
// finalised, and the sequence it belongs to (buffers of the region only).
struct Value {
  std::vector<Term> terms;
  int finalised = 0;
  uint64_t seq = 0;
};

struct Call {
  size_t count;
  size_t chunkElems;
  size_t alignElems;
  bool twoShot;
};

enum class Schedule { kGreedy, kGreedyReverse, kRoundRobin, kRandom };

struct Simulation {
  std::string error;                                    // empty when every check passed
  std::vector<std::vector<std::vector<Value>>> output;  // [call][rank][element]
};

// The region as the host primitives use it: buffer `seq % 2`, counters, and the waits.
class Simulator {
 public:
  Simulator(const std::vector<std::vector<Step>>& plans, const std::vector<Call>& calls, int n)
      : plans_(plans), calls_(calls), n_(n), ranks_(static_cast<size_t>(n)) {
    size_t maxChunk = 1;
    for (const Call& c : calls) maxChunk = std::max(maxChunk, c.chunkElems);
    for (RankState& r : ranks_)
      for (int b = 0; b < 2; ++b) {
        r.staging[b].assign(maxChunk, Value());
        r.result[b].assign(maxChunk, Value());
      }
    sim_.output.resize(calls.size());
    for (size_t c = 0; c < calls.size(); ++c)
      sim_.output[c].assign(static_cast<size_t>(n), std::vector<Value>(calls[c].count));
  }

  Simulation run(Schedule schedule, uint32_t seed) {
    std::mt19937 rng(seed);
    for (;;) {
      std::vector<int> runnable;
      for (int r = 0; r < n_; ++r)
        if (!finished(r) && canRun(r)) runnable.push_back(r);
      if (!sim_.error.empty()) return sim_;
      if (runnable.empty()) break;
      if (schedule == Schedule::kRandom) {
        runOne(runnable[rng() % runnable.size()]);
      } else if (schedule == Schedule::kRoundRobin) {
        for (int r : runnable)
          if (canRun(r)) runOne(r);
      } else {
        int r = schedule == Schedule::kGreedy ? runnable.front() : runnable.back();
        while (sim_.error.empty() && !finished(r) && canRun(r)) runOne(r);
      }
      if (!sim_.error.empty()) return sim_;
    }
    for (int r = 0; r < n_; ++r)
      if (!finished(r))
        return fail(r, "is stuck waiting (deadlock) at step " + std::to_string(rank(r).pc));
    for (int r = 1; r < n_; ++r)
      if (rank(r).seq != rank(0).seq)
        return fail(r, "used " + std::to_string(rank(r).seq) + " sequences, rank 0 used " +
                           std::to_string(rank(0).seq));
    return sim_;
  }

 private:
  struct RankState {
    size_t pc = 0;
    uint64_t seq = 0;  // the sequence of the current chunk
    uint64_t staged = 0, reduced = 0, done = 0;
    std::vector<Value> staging[2], result[2];
    size_t stagedLen = 0;  // elements staged for seq
    size_t stagedIn = 0;   // input offset of the chunk of seq
  };

  RankState& rank(int r) { return ranks_[static_cast<size_t>(r)]; }
  bool finished(int r) { return rank(r).pc >= plans_[static_cast<size_t>(r)].size(); }
  const Step& current(int r) { return plans_[static_cast<size_t>(r)][rank(r).pc]; }

  Simulation fail(int r, const std::string& what) {
    if (sim_.error.empty()) sim_.error = "rank " + std::to_string(r) + " " + what;
    return sim_;
  }

  // The waits of the host primitives.
  bool canRun(int r) {
    const Step& s = current(r);
    switch (s.kind) {
      case Kind::kStage:
        // No wait: staging relies on the previous chunk's waits having ordered every peer's
        // reads of the buffer it overwrites (a read of an overwritten buffer fails the run).
        return true;
      case Kind::kReduceToOutput:
        return rank(s.peer).staged >= rank(r).seq;
      case Kind::kReduceToResult:  // a rank's own operand comes from its input: no wait
        return s.peer == r || rank(s.peer).staged >= rank(r).seq;
      case Kind::kCopy:
        return rank(s.peer).reduced >= rank(r).seq;
      default:
        return true;
    }
  }

  // Reads element k of a peer's buffer for this rank's current sequence.
  const Value* read(int r, const std::vector<Value>& buf, size_t k, const char* what) {
    RankState& me = rank(r);
    if (me.done >= me.seq) {
      fail(r, std::string("reads ") + what + " of sequence " + std::to_string(me.seq) +
                  " after finishing it");
      return nullptr;
    }
    if (k >= buf.size() || buf[k].seq != me.seq) {
      fail(r, std::string("reads ") + what + " element " + std::to_string(k) +
                  " that does not hold sequence " + std::to_string(me.seq) +
                  " (overwritten or never written)");
      return nullptr;
    }
    return &buf[k];
  }

  // dst (op)= operand, as reduceToOutput / reduceToResult define it.
  void accumulate(int r, Value& dst, const Value& operand, const Step& s) {
    if (operand.terms.size() != 1 || operand.finalised != 0) {
      fail(r, "reduces something other than a staged input");
      return;
    }
    if (s.first) {
      dst.terms.clear();
      dst.finalised = 0;
    } else if (dst.terms.empty() || dst.finalised != 0 || dst.seq != rank(r).seq) {
      fail(r, "continues a reduction that was not started in this sequence or was finalised");
      return;
    }
    dst.seq = rank(r).seq;
    dst.terms.push_back(operand.terms[0]);
    if (s.last) ++dst.finalised;
  }

  std::vector<Value>& outputOf(int r, const Step& s) {
    return sim_.output[static_cast<size_t>(s.call)][static_cast<size_t>(r)];
  }

  void runOne(int r) {
    RankState& me = rank(r);
    const Step s = current(r);
    const Call& call = calls_[static_cast<size_t>(s.call)];
    const int slot = static_cast<int>((me.seq + (s.kind == Kind::kStage ? 1 : 0)) % 2);
    switch (s.kind) {
      case Kind::kStage: {
        ++me.seq;
        if (s.n > call.chunkElems || s.in + s.n > call.count)
          return (void)fail(r, "stages a chunk outside its input or its buffer");
        // The skipped part keeps whatever an earlier sequence left: reading it fails.
        for (size_t k = 0; k < s.n; ++k)
          if (k < s.skip || k >= s.skip + s.skipLen)
            me.staging[slot][k] = Value{{Term{r, s.in + k, s.call}}, 0, me.seq};
        me.stagedLen = s.n;
        me.stagedIn = s.in;
        me.staged = me.seq;
        break;
      }
      case Kind::kReduceToOutput: {
        std::vector<Value>& out = outputOf(r, s);
        if (s.out + s.n > out.size()) return (void)fail(r, "reduces past its output");
        for (size_t k = 0; k < s.n; ++k) {
          const Value* v = read(r, rank(s.peer).staging[slot], s.from + k, "a staged input");
          if (v == nullptr) return;
          Value& dst = out[s.out + k];
          if (s.first && !dst.terms.empty())
            return (void)fail(
                r, "starts output element " + std::to_string(s.out + k) + " a second time");
          accumulate(r, dst, *v, s);
        }
        break;
      }
      case Kind::kReduceToResult: {
        std::vector<Value>& out = outputOf(r, s);
        for (size_t k = 0; k < s.n; ++k) {
          Value own{{Term{r, me.stagedIn + s.from + k, s.call}}, 0, me.seq};
          const Value* v = s.peer == r
                               ? &own
                               : read(r, rank(s.peer).staging[slot], s.from + k, "a staged input");
          if (v == nullptr) return;
          if (s.from + k >= me.stagedLen)
            return (void)fail(r, "reduces past the chunk into its result buffer");
          Value& res = me.result[slot][s.from + k];
          accumulate(r, res, *v, s);
          if (!sim_.error.empty()) return;
          if (s.last) {
            // The finished share also goes to this rank's output.
            if (s.out + k >= out.size()) return (void)fail(r, "writes past its output");
            if (!out[s.out + k].terms.empty())
              return (void)fail(r, "writes output element " + std::to_string(s.out + k) + " twice");
            out[s.out + k] = res;
          }
        }
        break;
      }
      case Kind::kPublish:
        me.reduced = me.seq;
        break;
      case Kind::kCopy: {
        std::vector<Value>& out = outputOf(r, s);
        if (s.out + s.n > out.size()) return (void)fail(r, "copies past its output");
        for (size_t k = 0; k < s.n; ++k) {
          const Value* v = read(r, rank(s.peer).result[slot], s.from + k, "a result");
          if (v == nullptr) return;
          if (v->finalised != 1)
            return (void)fail(
                r, "copies a share of rank " + std::to_string(s.peer) + " that is not final");
          Value& dst = out[s.out + k];
          if (!dst.terms.empty())
            return (void)fail(r, "writes output element " + std::to_string(s.out + k) + " twice");
          dst = *v;
        }
        break;
      }
      case Kind::kFinish:
        me.done = me.seq;
        break;
    }
    ++me.pc;
  }

  const std::vector<std::vector<Step>>& plans_;
  const std::vector<Call>& calls_;
  int n_;
  std::vector<RankState> ranks_;
  Simulation sim_;
};

std::vector<std::vector<Step>> record(int n, const std::vector<Call>& calls) {
  std::vector<std::vector<Step>> plans(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    RecordingPrims p;
    for (size_t c = 0; c < calls.size(); ++c) {
      p.call = static_cast<int>(c);
      const Call& k = calls[c];
      DirectAllReduceShape shape{k.count, k.chunkElems, k.alignElems, n, r, k.twoShot};
      EXPECT_TRUE(directAllReduce(p, shape));
    }
    plans[static_cast<size_t>(r)] = std::move(p.steps);
  }
  return plans;
}

// Every output element of every rank holds input element i of ranks 0..n-1, in that order,
// finalised once. Returns the first violation, or an empty string.
std::string checkOutputs(const Simulation& sim, const std::vector<Call>& calls, int n) {
  for (size_t c = 0; c < calls.size(); ++c)
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < calls[c].count; ++i) {
        const Value& v = sim.output[c][static_cast<size_t>(r)][i];
        std::vector<Term> want;
        for (int q = 0; q < n; ++q) want.push_back(Term{q, i, static_cast<int>(c)});
        if (v.terms == want && v.finalised == 1) continue;
        std::ostringstream os;
        os << "call " << c << " rank " << r << " element " << i << " holds";
        for (const Term& t : v.terms)
          os << " (" << t.rank << "," << t.index << "," << t.call << ")";
        os << " finalised " << v.finalised << " times";
        return os.str();
      }
  return "";
}

std::string describe(int n, const std::vector<Call>& calls, Schedule schedule, uint32_t seed) {
  std::ostringstream os;
  os << "n=" << n << " schedule=" << static_cast<int>(schedule) << " seed=" << seed << " calls:";
  for (const Call& c : calls)
    os << " {count " << c.count << " chunk " << c.chunkElems << " align " << c.alignElems
       << (c.twoShot ? " two-shot}" : " one-shot}");
  return os.str();
}

// Records, simulates under every schedule and checks; returns the first failure.
std::string verify(int n, const std::vector<Call>& calls, int randomSeeds) {
  std::vector<std::vector<Step>> plans = record(n, calls);
  std::vector<std::pair<Schedule, uint32_t>> schedules = {
      {Schedule::kGreedy, 0}, {Schedule::kGreedyReverse, 0}, {Schedule::kRoundRobin, 0}};
  for (int s = 0; s < randomSeeds; ++s)
    schedules.push_back({Schedule::kRandom, static_cast<uint32_t>(s + 1)});
  for (const auto& [schedule, seed] : schedules) {
    Simulation sim = Simulator(plans, calls, n).run(schedule, seed);
    std::string err = sim.error.empty() ? checkOutputs(sim, calls, n) : sim.error;
    if (!err.empty()) return describe(n, calls, schedule, seed) + ": " + err;
  }
  return "";
}

const size_t kChunks[] = {1, 3, 8, 64};

TEST(DirectPlans, EveryElementGetsEveryRankOnceInRankOrderFinalisedOnce) {
  for (int n = 1; n <= 16; ++n)
    for (size_t chunk : kChunks) {
      // 101 is a prime larger than every chunk; the last spans several chunks plus a remainder.
      const size_t counts[] = {0, 1, 2, 7, 13, 101, 3 * chunk + 5};
      for (size_t count : counts)
        for (bool twoShot : {false, true})
          for (size_t align : {size_t(1), size_t(4)}) {
            if (!twoShot && align > 1) continue;  // one-shot has no shares
            std::string err = verify(n, {Call{count, chunk, align, twoShot}}, n <= 8 ? 2 : 1);
            ASSERT_EQ(err, "");
          }
    }
}

TEST(DirectPlans, ConsecutiveCallsOfMixedModesAndSizesShareTheSequence) {
  // Back-to-back calls with nothing in between: double buffering must keep every chunk apart
  // whatever the schedule, across mode changes and chunk-size changes.
  const std::vector<Call> calls = {
      {13, 8, 1, false},  {40, 8, 2, true},  {0, 8, 1, true},  {1, 8, 1, true},  {7, 3, 1, false},
      {101, 16, 4, true}, {2, 64, 1, false}, {64, 8, 8, true}, {9, 1, 1, false}, {30, 4, 1, true},
  };
  for (int n = 1; n <= 9; ++n) {
    std::string err = verify(n, calls, 6);
    ASSERT_EQ(err, "");
  }
}

TEST(DirectPlans, SharesPartitionEveryChunkAtAlignedOffsets) {
  for (int n = 1; n <= 16; ++n)
    for (size_t align : {size_t(1), size_t(2), size_t(4), size_t(16), size_t(64)})
      for (size_t len = 0; len <= 300; ++len) {
        ASSERT_EQ(directShareBegin(len, n, align, 0), 0u);
        ASSERT_EQ(directShareBegin(len, n, align, n), len) << "n=" << n << " len=" << len;
        for (int r = 0; r < n; ++r) {
          size_t b = directShareBegin(len, n, align, r);
          size_t e = directShareBegin(len, n, align, r + 1);
          ASSERT_LE(b, e);
          ASSERT_TRUE(b % align == 0 || b == len) << "n=" << n << " len=" << len << " r=" << r;
        }
      }
}

TEST(DirectPlans, OneRankStagesAndReducesItsOwnInputOnly) {
  std::vector<std::vector<Step>> plans = record(1, {Call{5, 2, 1, false}});
  ASSERT_EQ(plans[0].size(), 9u);  // three chunks: stage, reduce, finish
  for (const Step& s : plans[0])
    if (s.kind == Kind::kReduceToOutput) {
      EXPECT_EQ(s.peer, 0);
      EXPECT_TRUE(s.first && s.last);
    }
}

// The checks catch the bugs they are written for: a plan mutated by hand must fail.
TEST(DirectPlans, SimulatorRejectsAReadAfterFinishing) {
  const std::vector<Call> calls = {Call{6, 3, 1, true}, Call{6, 3, 1, true}};
  std::vector<std::vector<Step>> plans = record(3, calls);
  // Rank 1 declares its first chunk done before copying the shares.
  std::vector<Step>& p = plans[1];
  auto firstCopy =
      std::find_if(p.begin(), p.end(), [](const Step& s) { return s.kind == Kind::kCopy; });
  auto firstFinish =
      std::find_if(p.begin(), p.end(), [](const Step& s) { return s.kind == Kind::kFinish; });
  ASSERT_TRUE(firstCopy < firstFinish);
  std::rotate(firstCopy, firstFinish, firstFinish + 1);
  Simulation sim = Simulator(plans, calls, 3).run(Schedule::kGreedy, 0);
  EXPECT_NE(sim.error.find("after finishing"), std::string::npos) << sim.error;
}

TEST(DirectPlans, SimulatorRejectsADifferentReductionOrder) {
  const std::vector<Call> calls = {Call{4, 8, 1, false}};
  std::vector<std::vector<Step>> plans = record(3, calls);
  // Rank 2 adds rank 2's input before rank 1's: a valid sum, but not bitwise reproducible.
  for (Step& s : plans[2])
    if (s.kind == Kind::kReduceToOutput && s.peer != 0) s.peer = 3 - s.peer;
  Simulation sim = Simulator(plans, calls, 3).run(Schedule::kRoundRobin, 0);
  ASSERT_EQ(sim.error, "");
  EXPECT_NE(checkOutputs(sim, calls, 3).find("rank 2"), std::string::npos);
}

TEST(DirectPlans, SimulatorRejectsAMissingPublish) {
  const std::vector<Call> calls = {Call{8, 8, 1, true}};
  std::vector<std::vector<Step>> plans = record(2, calls);
  std::vector<Step>& p = plans[0];
  p.erase(
      std::remove_if(p.begin(), p.end(), [](const Step& s) { return s.kind == Kind::kPublish; }),
      p.end());
  Simulation sim = Simulator(plans, calls, 2).run(Schedule::kRoundRobin, 0);
  EXPECT_NE(sim.error.find("deadlock"), std::string::npos) << sim.error;
}

}  // namespace
}  // namespace chorus
