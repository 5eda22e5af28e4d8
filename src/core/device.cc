#include "core/device.h"

#include <dlfcn.h>

#include <mutex>

#include "common/log.h"

namespace chorus {

namespace {

using CuInitFn = int (*)(unsigned int);
using CuDeviceGetCountFn = int (*)(int*);

int probeDevices() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    LOG_INFO(kSubsysInit, "no CUDA driver (libcuda.so.1 not loadable): host communicators only");
    return 0;
  }
  auto cuInit = reinterpret_cast<CuInitFn>(dlsym(lib, "cuInit"));
  auto cuDeviceGetCount = reinterpret_cast<CuDeviceGetCountFn>(dlsym(lib, "cuDeviceGetCount"));
  int count = 0;
  if (cuInit == nullptr || cuDeviceGetCount == nullptr || cuInit(0) != 0 ||
      cuDeviceGetCount(&count) != 0) {
    count = 0;
  }
  // The library stays loaded: unloading a driver that was initialised is not safe.
  LOG_INFO(kSubsysInit, "CUDA driver reports %d device(s)", count);
  return count;
}

}  // namespace

int cudaDeviceCount() {
  static std::once_flag once;
  static int count = 0;
  std::call_once(once, [] { count = probeDevices(); });
  return count;
}

}  // namespace chorus
