// Device communicators in a build without CUDA: every entry point says so.
#include "cuda/dev_comm.h"

namespace chorus {
namespace dev {

namespace {
Status notBuilt() {
  return invalidUsage(
      "this build of Chorus has no CUDA support (configured without the CUDA toolkit or with "
      "-Dcuda=disabled): device communicators are not available; set CHORUS_HOST_COMM=1 for "
      "host memory");
}
}  // namespace

bool cudaBuilt() {
  return false;
}
Result<int> usableDevices() {
  return notBuilt();
}
Result<int> currentDevice() {
  return notBuilt();
}
Status setCurrentDevice(int) {
  return notBuilt();
}
Result<std::unique_ptr<DeviceComm>> DeviceComm::create(const DeviceCommSetup&) {
  return notBuilt();
}

}  // namespace dev
}  // namespace chorus
