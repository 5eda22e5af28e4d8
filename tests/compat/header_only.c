/* Compiles include/nccl.h and include/chorus.h as C (built as C99 and C11, with and without the
 * CUDA headers); nothing here runs. */
#include "nccl.h"
#include "chorus.h"

#ifndef CHORUS_NCCL_H_
#error "header_only.c must see Chorus's nccl.h, not NVIDIA's"
#endif

/* A compile-time check that also works in C99. */
#define HEADER_CHECK(name, cond) typedef char header_check_##name[(cond) ? 1 : -1]

HEADER_CHECK(unique_id_bytes, sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES);
HEADER_CHECK(version_code, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE);
HEADER_CHECK(max_red_op,
             (long long)ncclMaxRedOp == (0x7fffffffLL >> (32 - 8 * (int)sizeof(ncclRedOp_t))));

/* The initializers are complete and of the right types for C as well as C++. */
int headerOnlyConfig(ncclConfig_t* out, ncclSimInfo_t* sim);
int headerOnlyConfig(ncclConfig_t* out, ncclSimInfo_t* sim) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t simInfo = NCCL_SIM_INFO_INITIALIZER;
  cudaStream_t stream = NULL;
  ncclComm_t comm = NCCL_COMM_NULL;
  *out = config;
  *sim = simInfo;
  return stream == NULL && comm == NCCL_COMM_NULL && config.blocking == NCCL_CONFIG_UNDEF_INT;
}
