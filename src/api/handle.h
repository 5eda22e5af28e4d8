// The object behind an ncclComm_t. Calls pin the communicator while they run, so ncclCommAbort
// from another thread cannot free it under them; destroyed communicators leave
// the small handle behind with a dead marker, so a stale handle gets an error, not a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "api/async_runner.h"
#include "core/comm.h"

constexpr uint64_t kCommLive = 0x43484f5255534c56ull;          // "CHORUSLV"
constexpr uint64_t kCommInitializing = 0x43484f525553494eull;  // "CHORUSIN"
constexpr uint64_t kCommDead = 0x43484f5255534445ull;          // "CHORUSDE"
// A non-blocking init that failed: ncclCommGetAsyncError reports why until Destroy or Abort.
constexpr uint64_t kCommInitFailed = 0x43484f5255534946ull;  // "CHORUSIF"

struct ncclComm {
  std::atomic<uint64_t> magic{kCommDead};

  // The owning reference, for callers that keep the communicator beyond one call (queued group
  // work, ncclGetLastError). Guarded by mutex.
  std::shared_ptr<chorus::Communicator> get() const {
    std::lock_guard<std::mutex> lock(mutex);
    return impl;
  }

  // Installs a communicator, or (nullptr) detaches it: new pins fail from then on, and the call
  // returns once every pin taken before has been dropped, so that no call still runs on it.
  void set(std::shared_ptr<chorus::Communicator> c) {
    std::shared_ptr<chorus::Communicator> old;
    {
      std::lock_guard<std::mutex> lock(mutex);
      old = std::move(impl);
      impl = std::move(c);
      fast.store(impl.get(), std::memory_order_seq_cst);
    }
    if (old && !impl) {
      while (pins.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    }
  }

  // The end of an init, under the state lock: installs c and makes the handle live, unless
  // ncclCommAbort came first (false: the caller aborts c).
  bool finishInit(std::shared_ptr<chorus::Communicator> c) {
    std::lock_guard<std::mutex> lock(stateMutex);
    if (abortRequested) return false;
    set(std::move(c));
    magic.store(kCommLive);
    return true;
  }
  // The start of ncclCommAbort: from here on finishInit refuses; returns the state seen.
  uint64_t requestAbort() {
    std::lock_guard<std::mutex> lock(stateMutex);
    abortRequested = true;
    return magic.load();
  }

  // Non-blocking communicators (config.blocking = 0) run their work here; null when blocking.
  // Made with the handle, stopped (never freed) when the handle retires.
  std::unique_ptr<chorus::AsyncRunner> runner;
  // ncclCommFinalize was called on a non-blocking communicator: nothing more may be queued.
  std::atomic<bool> finalizing{false};
  // Lets ncclCommAbort stop an init that waits for its peers.
  chorus::InitCancel cancel;

  // What one API call takes instead of a reference count: pins counts the calls running on
  // the communicator, so the hot path costs two uncontended atomic operations.
  std::atomic<int64_t> pins{0};
  std::atomic<chorus::Communicator*> fast{nullptr};

 private:
  mutable std::mutex mutex;
  std::shared_ptr<chorus::Communicator> impl;
  std::mutex stateMutex;  // finishInit against requestAbort
  bool abortRequested = false;
};

namespace chorus {

// A communicator held for the length of one API call (see ncclComm::pins). Must not be kept
// across a call that destroys the same communicator on this thread.
class CommPin {
 public:
  CommPin() = default;
  CommPin(const CommPin&) = delete;
  CommPin& operator=(const CommPin&) = delete;
  ~CommPin() { release(); }

  // Pins comm's communicator; false when it has none (destroyed, aborted, not initialised).
  bool pin(ncclComm* comm) {
    release();
    // Dekker with ncclComm::set: the pin is counted before the pointer is read, the pointer is
    // cleared before the count is read, both sequentially consistent.
    comm->pins.fetch_add(1, std::memory_order_seq_cst);
    Communicator* c = comm->fast.load(std::memory_order_seq_cst);
    if (c == nullptr) {
      comm->pins.fetch_sub(1, std::memory_order_release);
      return false;
    }
    handle_ = comm;
    comm_ = c;
    return true;
  }

  Communicator* operator->() const { return comm_; }
  Communicator& operator*() const { return *comm_; }
  explicit operator bool() const { return comm_ != nullptr; }

 private:
  void release() {
    if (handle_ != nullptr) handle_->pins.fetch_sub(1, std::memory_order_release);
    handle_ = nullptr;
    comm_ = nullptr;
  }

  ncclComm* handle_ = nullptr;
  Communicator* comm_ = nullptr;
};

inline std::shared_ptr<Communicator> liveComm(const ncclComm* comm) {
  if (comm == nullptr || comm->magic.load() != kCommLive) return nullptr;
  return comm->get();
}
}  // namespace chorus
