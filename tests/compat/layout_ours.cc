// Layout facts of Chorus's include/nccl.h; compare_layout.sh diffs them against
// layout_nvidia.cc. Built both with and without the CUDA headers on the include path.
#include <nccl.h>

#ifndef CHORUS_NCCL_H_
#error "layout_ours must be built against Chorus's nccl.h"
#endif

#include "layout_print.h"

// The lines compare_layout.sh leaves out of the diff: the API level claimed (2.27.7, below
// 2.28 so that tools do not look for nccl_device.h) and the versions the initializers record.
static_assert(NCCL_MAJOR == 2 && NCCL_MINOR == 27 && NCCL_PATCH == 7, "claimed API level");
static_assert(NCCL_VERSION_CODE == 22707, "NCCL_VERSION_CODE");
static_assert(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE,
              "NCCL_VERSION_CODE agrees with NCCL_VERSION");

int main() {
  const ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  const ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  if (config.version != NCCL_VERSION_CODE || sim.version != NCCL_VERSION_CODE) {
    std::printf("initializer version %u/%u, expected %d\n", config.version, sim.version,
                NCCL_VERSION_CODE);
    return 1;
  }
  return layout::printAll();
}
