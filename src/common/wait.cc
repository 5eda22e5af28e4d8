#include "common/wait.h"

#include <sched.h>
#include <time.h>

namespace chorus {

Code Waiter::pause() {
  ++polls_;
  if (polls_ <= spinCount_) {
    cpuRelax();
    if ((polls_ & 255) != 0) return Code::kInProgress;
  } else if (polls_ <= spinCount_ + 1000) {
    sched_yield();
  } else {
    // Long waits nap so that oversubscribed ranks give the core to the peer they wait for.
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, nullptr);
  }
  if (aborted()) return Code::kInvalidUsage;
  if ((polls_ & 63) == 0 || polls_ > spinCount_) {
    if (Clock::now() > deadline_) return Code::kRemoteError;
  }
  return Code::kInProgress;
}

int Waiter::remainingMs(int capMs) const {
  if (deadline_ == Clock::time_point::max()) return capMs;
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
  if (left <= 0) return 0;
  return left < capMs ? static_cast<int>(left) : capMs;
}

}  // namespace chorus
