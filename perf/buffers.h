// The memory the perf tools run collectives on: host memory (plain, or from ncclMemAlloc and
// registered as -R asks) or, on device communicators, memory of the current CUDA device.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "chorus_config.h"
#include "nccl.h"

#if CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace chorus::perf {

// Prints "<program>: <message>" and exits with status 1.
[[noreturn]] void fail(const char* fmt, ...);

// Memory the collectives read and write. Device memory is reached from the host only through
// copies (Bench::upload, download).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual char* data() const = 0;
  virtual size_t bytes() const = 0;
  virtual bool onDevice() const = 0;
};

inline size_t roundToPage(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096;
}

// Zero-filled host memory, so that no timed call pays for first-touch page faults; from
// ncclMemAlloc and registered with comm when `registration` (-R) asks.
class HostBuffer : public Buffer {
 public:
  HostBuffer(size_t bytes, int registration = 0, ncclComm_t comm = nullptr)
      : bytes_(roundToPage(bytes)), comm_(comm) {
    if (registration > 0) {
      void* p = nullptr;
      if (ncclMemAlloc(&p, bytes_) != ncclSuccess)
        fail("ncclMemAlloc of %zu bytes failed: %s (lower -e)", bytes_, ncclGetLastError(nullptr));
      ptr_ = static_cast<char*>(p);
    } else {
      ptr_ = static_cast<char*>(std::aligned_alloc(4096, bytes_));
      if (ptr_ == nullptr) fail("cannot allocate %zu bytes of host memory (lower -e)", bytes_);
    }
    std::memset(ptr_, 0, bytes_);
    ncclResult_t r = ncclSuccess;
    if (registration == 1) r = ncclCommRegister(comm_, ptr_, bytes_, &handle_);
    if (registration == 2)
      r = ncclCommWindowRegister(comm_, ptr_, bytes_, &window_, NCCL_WIN_COLL_SYMMETRIC);
    if (r != ncclSuccess)
      fail("registering %zu bytes (-R %d) failed: %s", bytes_, registration,
           ncclGetLastError(comm_));
    allocated_ = registration > 0;
  }
  ~HostBuffer() override {
    if (handle_ != nullptr) ncclCommDeregister(comm_, handle_);
    if (window_ != nullptr) ncclCommWindowDeregister(comm_, window_);
    if (allocated_)
      ncclMemFree(ptr_);
    else
      std::free(ptr_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  char* data() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  bool onDevice() const override { return false; }

 private:
  size_t bytes_;
  char* ptr_ = nullptr;
  ncclComm_t comm_;
  bool allocated_ = false;
  void* handle_ = nullptr;
  ncclWindow_t window_ = nullptr;
};

#if CHORUS_HAVE_CUDA
// Zero-filled memory of the current CUDA device.
class DeviceBuffer : public Buffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(roundToPage(bytes)) {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes_);
    if (e != cudaSuccess)
      fail("cudaMalloc of %zu bytes failed: %s (lower -e)", bytes_, cudaGetErrorString(e));
    ptr_ = static_cast<char*>(p);
    e = cudaMemset(ptr_, 0, bytes_);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fail("cudaMemset of %zu bytes failed: %s", bytes_, cudaGetErrorString(e));
  }
  ~DeviceBuffer() override { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* data() const override { return ptr_; }
  size_t bytes() const override { return bytes_; }
  bool onDevice() const override { return true; }

 private:
  size_t bytes_;
  char* ptr_ = nullptr;
};

#endif  // CHORUS_HAVE_CUDA

}  // namespace chorus::perf
