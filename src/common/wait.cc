#include "common/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace chorus {

namespace {
// How long one kernel sleep may last before the deadline and abort flag are looked at again.
constexpr int64_t kSleepSliceNs = 20 * 1000 * 1000;

const uint32_t* lowWord(const std::atomic<uint64_t>& counter) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex word is the low half");
  return reinterpret_cast<const uint32_t*>(&counter);
}
}  // namespace

void futexWait(const std::atomic<uint64_t>& counter, uint64_t seen, int64_t timeoutNs) {
  struct timespec ts = {static_cast<time_t>(timeoutNs / 1000000000),
                        static_cast<long>(timeoutNs % 1000000000)};
  syscall(SYS_futex, lowWord(counter), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0);
}

void futexWakeAll(const std::atomic<uint64_t>& counter) {
  syscall(SYS_futex, lowWord(counter), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// One poll's worth of the phases pause and pauseAny share: spin (looking at the deadline and
// the abort flag every 256 polls), then yield the core for the yield window. kSleep: both
// phases are over and the caller sleeps its own way.
Waiter::Phase Waiter::nextPhase() {
  ++polls_;
  if (polls_ <= spinCount_) {
    cpuRelax();
    return (polls_ & 255) != 0 ? Phase::kSpin : Phase::kCheck;
  }
  if (yielding()) {
    // The peer may be waiting for this core (ranks outnumbering cores, or other load): hand it
    // over for a while, which costs microseconds, before sleeping, whose wake-up costs tens.
    sched_yield();
    return Phase::kCheck;
  }
  return Phase::kSleep;
}

Code Waiter::verdict() const {
  if (aborted()) return Code::kInvalidUsage;
  if (deadline() != Clock::time_point::max() && Clock::now() > deadline_) return Code::kRemoteError;
  return Code::kInProgress;
}

Code Waiter::pause(const std::atomic<uint64_t>& counter, uint64_t seen,
                   std::atomic<uint32_t>& sleepers) {
  const Phase phase = nextPhase();
  if (phase == Phase::kSpin) return Code::kInProgress;
  if (phase == Phase::kSleep) {
    // Nobody came within the yield window: sleep until the counter moves.
    if (beforeSleep_ != nullptr) {
      void (*fn)(void*) = beforeSleep_;
      beforeSleep_ = nullptr;
      fn(beforeSleepArg_);
    }
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (counter.load(std::memory_order_seq_cst) == seen && !aborted()) {
      int64_t slice = kSleepSliceNs;
      if (deadline() != Clock::time_point::max()) {
        auto left =
            std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - Clock::now()).count();
        if (left < slice) slice = left > 0 ? left : 0;
      }
      if (slice > 0) futexWait(counter, seen, slice);
    }
    sleepers.fetch_sub(1, std::memory_order_relaxed);
  }
  return verdict();
}

bool Waiter::yielding() {
  if (yieldNs_ <= 0) return false;
  Clock::time_point now = Clock::now();
  if (yieldStart_ == Clock::time_point()) yieldStart_ = now;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(now - yieldStart_).count() < yieldNs_;
}

Code Waiter::pauseAny() {
  const Phase phase = nextPhase();
  if (phase == Phase::kSpin) return Code::kInProgress;
  if (phase == Phase::kSleep) {
    struct timespec ts = {0, 20 * 1000};
    nanosleep(&ts, nullptr);
  }
  return verdict();
}

int Waiter::remainingMs(int capMs) const {
  if (deadline() == Clock::time_point::max()) return capMs;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
  if (left <= 0) return 0;
  return left < capMs ? static_cast<int>(left) : capMs;
}

}  // namespace chorus
