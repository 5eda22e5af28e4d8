// Compiles include/nccl.h and include/chorus.h as C++ (built as C++11 and C++17, with and
// without the CUDA headers); nothing here runs.
#include "nccl.h"
#include "chorus.h"

#ifndef CHORUS_NCCL_H_
#error "header_only.cc must see Chorus's nccl.h, not NVIDIA's"
#endif

static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId size");
static_assert(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE,
              "NCCL_VERSION_CODE");

// The API must have C linkage: a C++ declaration with another linkage would not redeclare it.
extern "C" ncclResult_t ncclGroupStart(void);

int headerOnlyConfig(ncclConfig_t* out, ncclSimInfo_t* sim);
int headerOnlyConfig(ncclConfig_t* out, ncclSimInfo_t* sim) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t simInfo = NCCL_SIM_INFO_INITIALIZER;
  cudaStream_t stream = nullptr;
  *out = config;
  *sim = simInfo;
  return stream == nullptr && config.blocking == NCCL_CONFIG_UNDEF_INT;
}
