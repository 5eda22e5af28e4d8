/* Chorus extensions to the NCCL API. Everything here is optional: programs written against
 * nccl.h alone work unchanged. */
#ifndef CHORUS_H_
#define CHORUS_H_

#include "nccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the Chorus library itself (the NCCL API level is ncclGetVersion's). */
CHORUS_NCCL_API const char* chorusGetVersionString(void);

/* Where a communicator's collectives run.
 * Host communicators take host pointers, ignore the stream argument and complete each call
 * before it returns (inside ncclGroupStart/End: at ncclGroupEnd). Device communicators take
 * CUDA device pointers and run on the stream.
 * ncclCommInitRank* choose by CHORUS_HOST_COMM: 1 host, 0 device, unset/-1 host exactly when
 * no CUDA device is usable in the calling process. */
typedef enum { chorusMemHost = 0, chorusMemDevice = 1 } chorusMemType_t;

/* Like ncclCommInitRankConfig, but always creates a host communicator. */
CHORUS_NCCL_API ncclResult_t chorusCommInitRankHost(ncclComm_t* comm, int nranks,
                                                    ncclUniqueId commId, int rank,
                                                    ncclConfig_t* config);

/* The kind of memory comm's collectives take. */
CHORUS_NCCL_API ncclResult_t chorusCommMemType(const ncclComm_t comm, chorusMemType_t* memType);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H_ */
