// CUDA presence, probed through the driver API loaded with dlopen: Chorus never links libcuda,
// so its programs start on machines without a GPU driver.
#pragma once

namespace chorus {

// Number of usable CUDA devices (0 when there is no driver or no device).
int cudaDeviceCount();

}  // namespace chorus
