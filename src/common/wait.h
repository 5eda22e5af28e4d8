// Bounded waiting: every blocking loop in Chorus polls through a Waiter, which spins briefly,
// then sleeps in the kernel until woken, and gives up when the deadline passes or the abort
// flag is raised.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/status.h"

namespace chorus {

using Clock = std::chrono::steady_clock;

// Raised by ncclCommAbort (or a fatal error) to make every wait of a communicator return.
struct AbortFlag {
  std::atomic<bool> raised{false};
  bool isRaised() const { return raised.load(std::memory_order_relaxed); }
  void raise() { raised.store(true, std::memory_order_relaxed); }
};

class Waiter {
 public:
  // timeoutSeconds <= 0 means no deadline; abort may be null.
  Waiter(double timeoutSeconds, const AbortFlag* abort, int64_t spinCount = 2000)
      : abort_(abort), spinCount_(spinCount), timeoutSeconds_(timeoutSeconds) {}

  // Microseconds of sched_yield polls between spinning and sleeping (CHORUS_SPIN_YIELD_US for
  // the data path; 0: none).
  void setYieldMicros(int64_t us) { yieldNs_ = us * 1000; }

  // Called once, just before pause first sleeps in the kernel (null: nothing). A thread that
  // drives a proxy's progress while it polls lets go of it there (see ProxyDrive).
  void setBeforeSleep(void (*fn)(void*), void* arg) {
    beforeSleep_ = fn;
    beforeSleepArg_ = arg;
  }

  // Call once per failed poll. Spins for spinCount polls, yields the core for the yield window
  // (setYieldMicros), then blocks in the kernel until
  // `counter` no longer holds `seen` (or a short slice passed, to look at the deadline and the
  // abort flag). The thread that changes the counter calls wakeSleepers with the same flag.
  // Returns kInProgress while waiting may go on, an error when the deadline passed
  // (kRemoteError, "timed out") or the abort flag was raised (kInvalidUsage).
  Code pause(const std::atomic<uint64_t>& counter, uint64_t seen, std::atomic<uint32_t>& sleepers);

  // For loops that wait on several things at once (no single counter to sleep on): spins,
  // then naps briefly. Same results as pause.
  Code pauseAny();

  bool aborted() const { return abort_ != nullptr && abort_->isRaised(); }
  // The deadline starts at the first look at it (the first pause, usually), so a wait that is
  // satisfied at once never reads the clock.
  Clock::time_point deadline() const {
    if (!deadlineSet_) {
      deadline_ = timeoutSeconds_ > 0
                      ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutSeconds_))
                      : Clock::time_point::max();
      deadlineSet_ = true;
    }
    return deadline_;
  }
  // Milliseconds left before the deadline (for poll()), capped at capMs; 0 when passed.
  int remainingMs(int capMs) const;

 private:
  const AbortFlag* abort_;
  int64_t spinCount_;
  int64_t polls_ = 0;
  double timeoutSeconds_;
  int64_t yieldNs_ = 0;
  Clock::time_point yieldStart_{};
  void (*beforeSleep_)(void*) = nullptr;
  void* beforeSleepArg_ = nullptr;
  bool yielding();
  enum class Phase { kSpin, kCheck, kSleep };
  Phase nextPhase();
  Code verdict() const;
  mutable bool deadlineSet_ = false;
  mutable Clock::time_point deadline_;
};

// Blocks while the low 32 bits of counter equal those of seen, at most timeoutNs. Works across
// processes on shared mappings.
void futexWait(const std::atomic<uint64_t>& counter, uint64_t seen, int64_t timeoutNs);
void futexWakeAll(const std::atomic<uint64_t>& counter);

// After storing a new value into counter: wakes threads sleeping in Waiter::pause on it. The
// fence orders the counter store before the flag load; the sleeper raises the flag before its
// last look at the counter, so one of the two always sees the other.
inline void wakeSleepers(const std::atomic<uint64_t>& counter, std::atomic<uint32_t>& sleepers) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_relaxed) != 0) futexWakeAll(counter);
}

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace chorus
