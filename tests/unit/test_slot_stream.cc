// The choice between cached and streaming stores for send slots: a kind of step moves to the
// kind of store its measurements show clearly faster, and back; the other kind is tried every
// explore period; small slots and the forced modes are never measured or mixed.
#include <gtest/gtest.h>

#include <cstdint>

#include "exec/slot_stream.h"

namespace chorus {
namespace {

constexpr size_t kSlot = 128 * 1024;

// Runs `slots` steps of one kind through the policy, each taking ns per byte as the kind of
// store the policy picked dictates; returns how many were streamed.
int runSteps(SlotStreamPolicy& p, int kind, int slots, double cachedNsPerByte,
             double streamedNsPerByte) {
  int streamed = 0;
  for (int i = 0; i < slots; ++i) {
    bool s = p.streamNext(SlotStreamMode::kAdaptive, kind, kSlot);
    streamed += s ? 1 : 0;
    double nsPerByte = s ? streamedNsPerByte : cachedNsPerByte;
    p.record(kind, s, kSlot, static_cast<int64_t>(nsPerByte * kSlot));
  }
  return streamed;
}

TEST(SlotStream, StartsCachedAndTriesStreamingOncePerPeriod) {
  SlotStreamPolicy p;
  // Both kinds equally fast: stays cached, streams exactly the exploring slots.
  int streamed = runSteps(p, 3, 10 * SlotStreamPolicy::kExplorePeriod, 0.1, 0.1);
  EXPECT_EQ(streamed, 10);
  EXPECT_FALSE(p.chooser(3).preferStreamed());
}

TEST(SlotStream, MovesToStreamingWhenCachedStoresTurnSlowAndBack) {
  SlotStreamPolicy p;
  const int period = static_cast<int>(SlotStreamPolicy::kExplorePeriod);
  // Fast cached stores (15 GB/s) against streaming (7 GB/s): cached.
  runSteps(p, 1, 4 * period, 1 / 15.0, 1 / 7.0);
  EXPECT_FALSE(p.chooser(1).preferStreamed());
  // The receiver's core moves away: cached stores fall to 2 GB/s, streaming stays at 7. The
  // next slots that still go cached show it, so streaming wins within one period.
  runSteps(p, 1, period, 1 / 2.0, 1 / 7.0);
  EXPECT_TRUE(p.chooser(1).preferStreamed());
  EXPECT_LT(p.chooser(1).rate(false), 7.0 / 1.5);
  // Now streaming; only every period-th slot is cached.
  int streamed = runSteps(p, 1, 2 * period, 1 / 2.0, 1 / 7.0);
  EXPECT_EQ(streamed, 2 * period - 2);
  // The core comes back: the exploring cached slots see 15 GB/s again, and after a few of them
  // the average clears the margin and cached stores return.
  runSteps(p, 1, 8 * period, 1 / 15.0, 1 / 7.0);
  EXPECT_FALSE(p.chooser(1).preferStreamed());
}

TEST(SlotStream, CloseFiguresDoNotSwitch) {
  SlotStreamChooser c;
  // Streaming 1.3x faster: below the margin to enter.
  for (int i = 0; i < 100; ++i) {
    c.record(false, kSlot, 10000);
    c.record(true, kSlot, 7700);
  }
  EXPECT_FALSE(c.preferStreamed());
  // 2x faster: enters; then 1.3x again: inside the band, stays.
  for (int i = 0; i < 100; ++i) c.record(true, kSlot, 5000);
  EXPECT_TRUE(c.preferStreamed());
  for (int i = 0; i < 100; ++i) c.record(true, kSlot, 7700);
  EXPECT_TRUE(c.preferStreamed());
  // Below 1.2x: leaves.
  for (int i = 0; i < 100; ++i) c.record(true, kSlot, 9500);
  EXPECT_FALSE(c.preferStreamed());
}

// A step timed across a move to another core may read a counter behind or far ahead of its
// start: such samples are dropped instead of swamping the average.
TEST(SlotStream, ImpossibleSamplesAreDropped) {
  SlotStreamChooser c;
  for (int i = 0; i < 50; ++i) {
    c.record(false, kSlot, 10000);
    c.record(true, kSlot, 20000);
  }
  ASSERT_FALSE(c.preferStreamed());
  const double cached = c.rate(false), streamed = c.rate(true);
  c.record(true, kSlot, 0);
  c.record(true, kSlot, -500);
  c.record(true, kSlot, 1);  // 131072 bytes in one tick
  EXPECT_EQ(c.rate(true), streamed);
  EXPECT_EQ(c.rate(false), cached);
  EXPECT_FALSE(c.preferStreamed());
}

TEST(SlotStream, OnePreemptedStepDoesNotFlipTheChoice) {
  SlotStreamChooser c;
  for (int i = 0; i < 50; ++i) {
    c.record(false, kSlot, 10000);
    c.record(true, kSlot, 20000);
  }
  ASSERT_FALSE(c.preferStreamed());
  // One cached step took 1000x longer (the thread lost its core in the middle of it).
  c.record(false, kSlot, 10000 * 1000);
  EXPECT_FALSE(c.preferStreamed());
}

// Kinds that take turns (as a ring's steps do) each explore and each choose for themselves.
TEST(SlotStream, KindsOfStepChooseApart) {
  SlotStreamPolicy p;
  const int period = static_cast<int>(SlotStreamPolicy::kExplorePeriod);
  for (int i = 0; i < 8 * period; ++i) {
    // Kind 5 is slow with cached stores, kind 6 is not: only kind 5 moves to streaming.
    for (int kind : {5, 6}) {
      bool s = p.streamNext(SlotStreamMode::kAdaptive, kind, kSlot);
      double nsPerByte = kind == 5 && !s ? 1.0 : 0.1;
      p.record(kind, s, kSlot, static_cast<int64_t>(nsPerByte * kSlot));
    }
  }
  EXPECT_TRUE(p.chooser(5).preferStreamed());
  EXPECT_FALSE(p.chooser(6).preferStreamed());
}

TEST(SlotStream, SmallSlotsAndForcedModes) {
  SlotStreamPolicy p;
  // Make streaming the preferred kind, then check that small slots still go cached.
  runSteps(p, 2, 4 * static_cast<int>(SlotStreamPolicy::kExplorePeriod), 1.0, 0.1);
  ASSERT_TRUE(p.chooser(2).preferStreamed());
  for (int i = 0; i < 200; ++i)
    EXPECT_FALSE(p.streamNext(SlotStreamMode::kAdaptive, 2, SlotStreamPolicy::kMinBytes - 1));
  EXPECT_FALSE(
      SlotStreamPolicy::measured(SlotStreamMode::kAdaptive, SlotStreamPolicy::kMinBytes - 1));
  EXPECT_TRUE(SlotStreamPolicy::measured(SlotStreamMode::kAdaptive, SlotStreamPolicy::kMinBytes));
  // Forced: every slot one kind, whatever its size, and nothing measured.
  for (int i = 0; i < 200; ++i) {
    EXPECT_TRUE(p.streamNext(SlotStreamMode::kAlways, 2, 64));
    EXPECT_FALSE(p.streamNext(SlotStreamMode::kNever, 2, kSlot));
  }
  EXPECT_FALSE(SlotStreamPolicy::measured(SlotStreamMode::kAlways, kSlot));
  EXPECT_FALSE(SlotStreamPolicy::measured(SlotStreamMode::kNever, kSlot));
}

// Small chunks timed whole (stores, wait and reads): any size is chosen by measurement, the
// other kind tried every kWholeExplorePeriod-th chunk and every kWholeSamplePeriod-th of the
// others timed; the forced modes still force and time nothing.
TEST(SlotStream, SmallChunksTimedWholeChooseByMeasurement) {
  SlotStreamPolicy p;
  const int period = static_cast<int>(SlotStreamPolicy::kWholeExplorePeriod);
  constexpr size_t kChunk = 8 * 1024;
  int streamed = 0, timed = 0;
  auto chunks = [&](int n, int64_t cachedNs, int64_t streamedNs) {
    streamed = timed = 0;
    for (int i = 0; i < n; ++i) {
      SlotStreamPolicy::WholeChoice c = p.chooseWhole(SlotStreamMode::kAdaptive, 4);
      streamed += c.stream ? 1 : 0;
      if (!c.timed) continue;
      ++timed;
      p.record(4, c.stream, kChunk, c.stream ? streamedNs : cachedNs);
    }
  };
  // Cached chunks take 1.5 us, streamed 1.9 (a near reader): cached, one explore per period,
  // and about one chunk in kWholeSamplePeriod timed besides.
  chunks(8 * period, 1500, 1900);
  EXPECT_EQ(streamed, 8);
  EXPECT_FALSE(p.chooser(4).preferStreamed());
  EXPECT_GE(timed, 8 + 8 * (period - 1) / 8 - 1);
  EXPECT_LE(timed, 8 + 8 * period / 8 + 1);
  // The reader moves far: cached chunks take 4.6 us, streamed 1.9. Streaming within a period,
  // then only the explores go cached.
  chunks(period, 4600, 1900);
  EXPECT_TRUE(p.chooser(4).preferStreamed());
  chunks(2 * period, 4600, 1900);
  EXPECT_EQ(streamed, 2 * period - 2);
  // Near again: the cached explores bring it back.
  chunks(8 * period, 1500, 1900);
  EXPECT_FALSE(p.chooser(4).preferStreamed());
  // The explores do not follow a short cycle of calls: with chunks alternating between two
  // callers, both positions of the cycle explore.
  int explored[2] = {0, 0};
  for (int i = 0; i < 2 * period; ++i)
    if (p.chooseWhole(SlotStreamMode::kAdaptive, 4).stream) ++explored[i % 2];
  EXPECT_EQ(explored[0], 1);
  EXPECT_EQ(explored[1], 1);
  for (int i = 0; i < 200; ++i) {
    SlotStreamPolicy::WholeChoice always = p.chooseWhole(SlotStreamMode::kAlways, 4);
    SlotStreamPolicy::WholeChoice never = p.chooseWhole(SlotStreamMode::kNever, 4);
    EXPECT_TRUE(always.stream && !always.timed);
    EXPECT_FALSE(never.stream || never.timed);
  }
}

}  // namespace
}  // namespace chorus
