// POSIX shared-memory segments (shm_open + mmap) with RAII. Segment names are chosen by the
// caller per communicator, rank and peer, never per host name, so ranks in different network
// namespaces that share a host name cannot collide.
#pragma once

#include <cstddef>
#include <string>

#include "common/status.h"

namespace chorus {

class ShmSegment {
 public:
  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // Creates a new zero-filled segment (fails if the name exists) and maps it.
  static Result<ShmSegment> create(const std::string& name, size_t bytes);
  // Maps an existing segment created by another rank.
  static Result<ShmSegment> open(const std::string& name, size_t bytes);

  // Removes the name; the mapping stays valid until destruction.
  void unlink();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t size_ = 0;
  std::string name_;
  bool owner_ = false;  // created it and has not unlinked yet
};

}  // namespace chorus
