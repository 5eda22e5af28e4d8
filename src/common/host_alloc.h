// Host memory that other processes on the host can map: what ncclMemAlloc hands out for host
// communicators, so that a window registered over it (ncclCommWindowRegister) lets the peers
// read it in place. Each allocation is an anonymous memory file (memfd) mapped shared; the
// process keeps its descriptor open while the allocation lives, and a peer maps the same pages
// through /proc/<pid>/fd/<fd>. The mapping keeps the pages alive when the owner frees them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace chorus {

struct SharedAlloc {
  char* base = nullptr;
  size_t bytes = 0;  // whole pages
  int fd = -1;
};

// A zero-filled shareable allocation of at least bytes (> 0), page-aligned.
Result<void*> sharedHostAlloc(size_t bytes);
// Frees an allocation made by sharedHostAlloc (ptr is its start); false if ptr is not one.
bool sharedHostFree(void* ptr);
// The allocation that holds [ptr, ptr + bytes), if one does.
bool sharedHostFind(const void* ptr, size_t bytes, SharedAlloc* out);
// The inode of an allocation's memory file (0 if it cannot be read).
uint64_t sharedHostInode(const SharedAlloc& alloc);

// Another process's allocation, mapped read-only here. Unmaps on destruction.
class PeerMapping {
 public:
  PeerMapping() = default;
  ~PeerMapping();
  PeerMapping(PeerMapping&& other) noexcept;
  PeerMapping& operator=(PeerMapping&& other) noexcept;
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;

  // Maps `bytes` of descriptor fd of process pid (which must hold it open); inode is the
  // file's (sharedHostInode), checked so that a descriptor reused meanwhile is not mapped.
  static Result<PeerMapping> map(pid_t pid, int fd, uint64_t inode, size_t bytes);
  const char* data() const { return data_; }

 private:
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace chorus
