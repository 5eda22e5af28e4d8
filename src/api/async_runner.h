// Non-blocking communicators (ncclConfig_t.blocking = 0): the calls that would wait for peers
// (init, collectives, point-to-point, group ends, finalize) hand their work to one thread per
// communicator and return ncclInProgress; ncclCommGetAsyncError polls until the work is done.
// Work runs in the order it was handed over, so a communicator's calls keep their order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/status.h"

namespace chorus {

class AsyncRunner {
 public:
  AsyncRunner() = default;
  AsyncRunner(const AsyncRunner&) = delete;
  AsyncRunner& operator=(const AsyncRunner&) = delete;
  ~AsyncRunner() { stop(false); }

  // Queues job (kInProgress); the thread starts on the first one. After a job failed, the
  // first failure stays and is returned instead (a failed communicator runs nothing more);
  // after stop, an error.
  Status submit(std::function<Status()> job);
  // kInProgress while work is queued or running; else the first failure, or success.
  Status state() const;
  // No job queued or running.
  bool idle() const;
  // Drops the jobs not started (ncclCommRevoke); the thread stays.
  void discardQueued();
  // Blocks until every queued job ran (destroy waits for its communicator's work).
  void drain();
  // Ends the thread: with discardQueued, jobs not started are dropped (abort; the running one
  // ends once the communicator's abort flag is raised), else they run first.
  void stop(bool discardQueued);

 private:
  void loop();

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the thread: a job or stop
  std::condition_variable idle_;  // drain: the queue ran dry
  std::deque<std::function<Status()>> jobs_;
  bool running_ = false;  // a job is being run
  bool stopping_ = false;
  Status failure_;
  std::thread thread_;
};

}  // namespace chorus
