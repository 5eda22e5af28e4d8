// Bounded waiting: every blocking loop in Chorus polls through a Waiter, which spins briefly,
// then yields, then naps, and gives up when the deadline passes or the abort flag is raised.
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
      : abort_(abort), spinCount_(spinCount) {
    if (timeoutSeconds > 0)
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeoutSeconds));
    else
      deadline_ = Clock::time_point::max();
  }

  // Call once per failed poll. Returns kInProgress while waiting may go on, an error when the
  // deadline passed (kRemoteError, "timed out") or the abort flag was raised (kInvalidUsage).
  Code pause();

  bool aborted() const { return abort_ != nullptr && abort_->isRaised(); }
  Clock::time_point deadline() const { return deadline_; }
  // Milliseconds left before the deadline (for poll()), capped at capMs; 0 when passed.
  int remainingMs(int capMs) const;

 private:
  const AbortFlag* abort_;
  int64_t spinCount_;
  int64_t polls_ = 0;
  Clock::time_point deadline_;
};

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace chorus
