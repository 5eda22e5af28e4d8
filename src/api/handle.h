// The object behind an ncclComm_t. Calls hold a reference to the communicator while they run,
// so ncclCommAbort from another thread cannot free it under them; destroyed communicators leave
// the small handle behind with a dead marker, so a stale handle gets an error, not a crash.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/comm.h"

constexpr uint64_t kCommLive = 0x43484f5255534c56ull;          // "CHORUSLV"
constexpr uint64_t kCommInitializing = 0x43484f525553494eull;  // "CHORUSIN"
constexpr uint64_t kCommDead = 0x43484f5255534445ull;          // "CHORUSDE"

struct ncclComm {
  std::atomic<uint64_t> magic{kCommDead};
  std::shared_ptr<chorus::Communicator> impl;  // accessed with std::atomic_load/store

  std::shared_ptr<chorus::Communicator> get() const { return std::atomic_load(&impl); }
  void set(std::shared_ptr<chorus::Communicator> c) { std::atomic_store(&impl, std::move(c)); }
};

namespace chorus {
inline std::shared_ptr<Communicator> liveComm(const ncclComm* comm) {
  if (comm == nullptr || comm->magic.load() != kCommLive) return nullptr;
  return comm->get();
}
}  // namespace chorus
