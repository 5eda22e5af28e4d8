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

/* Compressed all-reduce on host communicators: ncclAllReduce of ncclFloat32 or ncclFloat64 with
 * ncclSum or ncclAvg sends its values as bfloat16, or as fp8 e4m3 with one scale per 256
 * values, and sums them in the values' own type. What the encoding of a send buffer loses is
 * kept (per send buffer, 64 at most) and added to that buffer's next call (error feedback), as
 * gradient compression does. Lossy: the result differs from the exact sum by about the format's
 * rounding, but every rank gets the same bits. Other calls are unchanged. The default is
 * CHORUS_COMPRESS (none, bf16, fp8); every rank must set the same mode, with no call of the
 * communicator in flight. */
typedef enum {
  chorusCompressNone = 0,
  chorusCompressBf16 = 1,
  chorusCompressFp8 = 2
} chorusCompression_t;
CHORUS_NCCL_API ncclResult_t chorusCommSetCompression(ncclComm_t comm, chorusCompression_t mode);

/* Bytes this rank sent in compressed all-reduces (*wireBytes) and what the same messages take
 * uncompressed (*rawBytes), since the communicator was made. */
CHORUS_NCCL_API ncclResult_t chorusCommCompressionStats(const ncclComm_t comm,
                                                        unsigned long long* rawBytes,
                                                        unsigned long long* wireBytes);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H_ */
