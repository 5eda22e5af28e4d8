#include "api/async_runner.h"

#include <utility>

namespace chorus {

Status AsyncRunner::submit(std::function<Status()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return invalidUsage("the communicator was destroyed or aborted");
  if (!failure_.isOk()) return failure_;
  jobs_.push_back(std::move(job));
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  wake_.notify_one();
  return inProgress();
}

Status AsyncRunner::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.isOk()) return failure_;
  if (running_ || !jobs_.empty()) return inProgress();
  return Status::ok();
}

bool AsyncRunner::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !running_ && jobs_.empty();
}

void AsyncRunner::discardQueued() {
  std::lock_guard<std::mutex> lock(mutex_);
  jobs_.clear();
  if (!running_) idle_.notify_all();
}

void AsyncRunner::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return !running_ && jobs_.empty(); });
}

void AsyncRunner::stop(bool discardQueued) {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (discardQueued) jobs_.clear();
    stopping_ = true;
    wake_.notify_one();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
}

void AsyncRunner::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<Status()> job = std::move(jobs_.front());
    jobs_.pop_front();
    if (!failure_.isOk()) {
      // A failed communicator runs nothing more; what was queued after the failure is dropped.
      if (jobs_.empty()) idle_.notify_all();
      continue;
    }
    running_ = true;
    lock.unlock();
    Status s = job();
    job = nullptr;  // what the job held (the communicator's reference) goes before idle
    lock.lock();
    running_ = false;
    if (!s.isOk() && failure_.isOk()) failure_ = s;
    if (jobs_.empty()) idle_.notify_all();
  }
}

}  // namespace chorus
