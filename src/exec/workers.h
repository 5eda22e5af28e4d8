// Threads that drive a communicator's extra channels. run(n, fn) calls fn(0) on the calling
// thread and fn(1) .. fn(n-1) on worker threads, and returns once every call returned. Workers
// are started on first need and kept; between calls they spin briefly, then sleep on a futex.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "common/wait.h"

namespace chorus {

class ChannelWorkers {
 public:
  explicit ChannelWorkers(int64_t spinCount) : spinCount_(spinCount) {}
  ~ChannelWorkers();
  ChannelWorkers(const ChannelWorkers&) = delete;
  ChannelWorkers& operator=(const ChannelWorkers&) = delete;

  // Not reentrant: one run at a time (a communicator's calls are serialised).
  void run(int n, const std::function<void(int)>& fn);
  int started() const { return static_cast<int>(slots_.size()); }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> go{0};  // generation to run; the worker sleeps while it is unchanged
    std::atomic<uint32_t> goSleepers{0};
    alignas(64) std::atomic<uint64_t> done{0};  // last generation finished
    std::atomic<uint32_t> doneSleepers{0};
    const std::function<void(int)>* task = nullptr;
    bool stop = false;
    std::thread thread;
  };
  void loop(Slot* slot, int index);

  int64_t spinCount_;
  uint64_t generation_ = 0;
  std::vector<std::unique_ptr<Slot>> slots_;  // slot i runs fn(i + 1)
};

}  // namespace chorus
