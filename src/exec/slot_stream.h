// How a ring step writes its send slot. Cached stores are fastest while the receiver's core is
// near (the line moves cache to cache); when it is far (another socket, or a virtual CPU the
// hypervisor placed far away) every cached store to a line the receiver read last must first
// take it back from that core, and streaming (non-temporal) stores, which skip that read, can
// fill a slot several times faster. Placement changes while a job runs, so each channel
// measures the steps it runs with either kind and uses the faster, trying the other every
// kExplorePeriod-th large slot so that both figures stay current.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace chorus {

// The clock steps are timed with: only ratios of rates are compared, so any steady unit does.
// The time-stamp counter costs a few nanoseconds a read where the clock costs about 25.
inline uint64_t slotStreamTicks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

// CHORUS_SLOT_STREAM: -1 chosen by measurement, 0 never streaming, 1 every slot streaming.
enum class SlotStreamMode : int { kAdaptive = -1, kNever = 0, kAlways = 1 };

// The choice for one kind of step (steps differ in how much they read and compute, so each kind
// compares its own figures). Rates are moving averages, so a thread preempted in the middle of a
// step skews them only briefly; switching needs a clear margin each way, so that two close
// figures do not make it flip back and forth.
class SlotStreamChooser {
 public:
  // One step of `bytes` took `ticks` (slotStreamTicks, or any unit used for every sample). A
  // thread that moved to another core in the middle of a step may read a counter that is
  // slightly behind or ahead: samples of no time, or of more than kMaxBytesPerTick (hundreds of
  // GB/s), are dropped.
  void record(bool streamed, size_t bytes, int64_t ticks) {
    if (ticks <= 0 || static_cast<double>(bytes) > kMaxBytesPerTick * static_cast<double>(ticks))
      return;
    const double rate = static_cast<double>(bytes) / static_cast<double>(ticks);
    double& r = rate_[streamed ? 1 : 0];
    r = r == 0 ? rate : r + (rate - r) * kWeight;
    if (rate_[0] == 0 || rate_[1] == 0) return;
    if (!preferStreamed_ && rate_[1] > rate_[0] * kEnterMargin) preferStreamed_ = true;
    if (preferStreamed_ && rate_[1] < rate_[0] * kLeaveMargin) preferStreamed_ = false;
  }
  bool preferStreamed() const { return preferStreamed_; }
  // Bytes per tick of either kind so far; 0 before its first sample.
  double rate(bool streamed) const { return rate_[streamed ? 1 : 0]; }

 private:
  static constexpr double kMaxBytesPerTick = 256;
  static constexpr double kWeight = 0.25;
  static constexpr double kEnterMargin = 1.5;
  static constexpr double kLeaveMargin = 1.2;
  double rate_[2] = {0, 0};
  bool preferStreamed_ = false;
};

// The choices of one channel's send slots, by kind of step (a small index the executor gives).
class SlotStreamPolicy {
 public:
  static constexpr int kStepKinds = 8;
  // Slots smaller than this are cached and not measured by the writer's stores alone: for
  // small slots the reader's wait for streamed lines to come back from memory, which the writer
  // does not see, outweighs them (8 KiB two-rank all-reduce: 1.5 us cached, 1.9 streamed as
  // chosen by the writer's figures). Small chunks timed whole use streamNextWhole instead.
  static constexpr size_t kMinBytes = 16 * 1024;
  static constexpr uint32_t kExplorePeriod = 64;

  // Whether the next slot, of `bytes` bytes, written by a step of kind `kind`, is streamed.
  bool streamNext(SlotStreamMode mode, int kind, size_t bytes) {
    if (mode == SlotStreamMode::kAlways) return bytes > 0;
    if (mode == SlotStreamMode::kNever || bytes < kMinBytes) return false;
    const bool prefer = choosers_[kind].preferStreamed();
    // Counted per kind: kinds of step that take turns would otherwise leave one of them
    // always on the same side of the period.
    return ++largeSlots_[kind] % kExplorePeriod == 0 ? !prefer : prefer;
  }
  // The same for a small chunk whose whole exchange the caller times (its stores, the wait for
  // the peers and the reads of what they wrote, so that the reader's cost of streamed lines is
  // in the figure, where the writer's stores alone would miss it): any size is chosen by
  // measurement. Every kWholeExplorePeriod-th chunk tries the other kind; of the others every
  // kWholeSamplePeriod-th is timed (a time-stamp read costs about 10 ns on the development VM,
  // a few percent of a 2 KiB all-reduce). The caller gives each size class a kind of its own
  // (rates of different sizes do not compare), and the explore period is prime so that calls
  // cycling through classes or sizes still explore at every position of the cycle.
  static constexpr uint32_t kWholeExplorePeriod = 61;
  static constexpr uint32_t kWholeSamplePeriod = 8;
  struct WholeChoice {
    bool stream;  // write this chunk with streaming stores
    bool timed;   // time it and record the figure
  };
  WholeChoice chooseWhole(SlotStreamMode mode, int kind) {
    if (mode != SlotStreamMode::kAdaptive) return {mode == SlotStreamMode::kAlways, false};
    const bool prefer = choosers_[kind].preferStreamed();
    const uint32_t n = ++largeSlots_[kind];
    if (n % kWholeExplorePeriod == 0) return {!prefer, true};
    return {prefer, n % kWholeSamplePeriod == 0};
  }
  // Whether steps of this size are measured (record is then called for them).
  static bool measured(SlotStreamMode mode, size_t bytes) {
    return mode == SlotStreamMode::kAdaptive && bytes >= kMinBytes;
  }
  void record(int kind, bool streamed, size_t bytes, int64_t ticks) {
    choosers_[kind].record(streamed, bytes, ticks);
  }
  const SlotStreamChooser& chooser(int kind) const { return choosers_[kind]; }

 private:
  SlotStreamChooser choosers_[kStepKinds];
  uint32_t largeSlots_[kStepKinds] = {};  // measured slots or chunks sent so far, by kind
};

}  // namespace chorus
