#include "common/host_alloc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace chorus {

namespace {

std::mutex gAllocMutex;
// By start address. Leaked on purpose: frees may run from static destructors.
std::map<uintptr_t, SharedAlloc>* gAllocs = nullptr;

}  // namespace

Result<void*> sharedHostAlloc(size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t rounded = (bytes + page - 1) / page * page;
  if (bytes == 0 || rounded < bytes) return invalidArgument("size %zu is out of range", bytes);
  int fd = memfd_create("chorus-mem", MFD_CLOEXEC);
  if (fd < 0) return systemError("memfd_create: %s", strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    int e = errno;
    close(fd);
    return systemError("cannot size a %zu-byte memory file: %s", rounded, strerror(e));
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    return systemError("cannot map %zu bytes: %s", rounded, strerror(e));
  }
  std::lock_guard<std::mutex> lock(gAllocMutex);
  if (gAllocs == nullptr) gAllocs = new std::map<uintptr_t, SharedAlloc>();
  (*gAllocs)[reinterpret_cast<uintptr_t>(p)] = SharedAlloc{static_cast<char*>(p), rounded, fd};
  return p;
}

bool sharedHostFree(void* ptr) {
  SharedAlloc a;
  {
    std::lock_guard<std::mutex> lock(gAllocMutex);
    if (gAllocs == nullptr) return false;
    auto it = gAllocs->find(reinterpret_cast<uintptr_t>(ptr));
    if (it == gAllocs->end()) return false;
    a = it->second;
    gAllocs->erase(it);
  }
  munmap(a.base, a.bytes);
  close(a.fd);
  return true;
}

bool sharedHostFind(const void* ptr, size_t bytes, SharedAlloc* out) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(gAllocMutex);
  if (gAllocs == nullptr) return false;
  auto it = gAllocs->upper_bound(p);
  if (it == gAllocs->begin()) return false;
  --it;
  const SharedAlloc& a = it->second;
  const uintptr_t start = reinterpret_cast<uintptr_t>(a.base);
  if (p < start || bytes > a.bytes || p - start > a.bytes - bytes) return false;
  *out = a;
  return true;
}

uint64_t sharedHostInode(const SharedAlloc& alloc) {
  struct stat st;
  if (fstat(alloc.fd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_ino);
}

PeerMapping::~PeerMapping() {
  if (data_ != nullptr) munmap(data_, bytes_);
}

PeerMapping::PeerMapping(PeerMapping&& other) noexcept {
  *this = std::move(other);
}

PeerMapping& PeerMapping::operator=(PeerMapping&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

Result<PeerMapping> PeerMapping::map(pid_t pid, int fd, uint64_t inode, size_t bytes) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  int local = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (local < 0) return systemError("cannot open %s: %s", path.c_str(), strerror(errno));
  struct stat st;
  if (fstat(local, &st) != 0 || static_cast<uint64_t>(st.st_ino) != inode ||
      st.st_size < static_cast<off_t>(bytes)) {
    close(local);
    return systemError("%s is not the %zu-byte memory file the peer registered", path.c_str(),
                       bytes);
  }
  void* p = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, local, 0);
  int e = errno;
  close(local);
  if (p == MAP_FAILED)
    return systemError("cannot map %zu bytes of %s: %s", bytes, path.c_str(), strerror(e));
  PeerMapping m;
  m.data_ = static_cast<char*>(p);
  m.bytes_ = bytes;
  return m;
}

}  // namespace chorus
