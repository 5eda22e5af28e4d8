/* Chorus: the NCCL C API.
 *
 * Source compatible with NVIDIA's nccl.h (the 2.28 declarations: names, signatures, enum values,
 * struct layouts and macros), so programs written against NCCL build against Chorus unchanged.
 * The version macros claim API level 2.27 on purpose: tools that see 2.28 or newer also include
 * NCCL's device API header (nccl_device.h), which Chorus does not provide.
 *
 * The header needs no CUDA: when the CUDA runtime headers are on the include path they are used
 * (as NVIDIA's header does); otherwise cudaStream_t is declared as the same opaque pointer type
 * and the stream argument may simply be NULL for host communicators (see chorus.h). */
#ifndef NCCL_H_
#define NCCL_H_
/* Lets code tell this header apart from NVIDIA's. */
#define CHORUS_NCCL_H_ 1

#if defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
#if __has_include(<cuda_fp16.h>)
#include <cuda_fp16.h>
#endif
#if defined(CUDART_VERSION) && CUDART_VERSION >= 11000 && __has_include(<cuda_bf16.h>)
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && defined(CUDART_VERSION) && CUDART_VERSION >= 11080 && \
    __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#endif
#endif
#endif

/* No CUDA runtime headers: declare the stream handle with CUDA's own definition, so a later
 * include of the CUDA headers agrees with it. */
#if !defined(__DRIVER_TYPES_H__) && !defined(CHORUS_NCCL_CUDA_STREAM_DECLARED)
#define CHORUS_NCCL_CUDA_STREAM_DECLARED 1
typedef struct CUstream_st* cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 7
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22707
/* Before 2.9 the code was X*1000 + Y*100 + Z; since then X*10000 + Y*100 + Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

/* Exported entry points keep default visibility even in code built with hidden visibility. */
#if defined(__GNUC__) || defined(__clang__)
#define CHORUS_NCCL_API __attribute__((visibility("default")))
#else
#define CHORUS_NCCL_API
#endif

/* NCCL marks ncclResetDebugInit deprecated; do the same where the compiler can say so. */
#if !defined(CHORUS_NCCL_NO_DEPRECATION) && \
    (defined(__clang__) ||                  \
     (defined(__GNUC__) && (__GNUC__ > 4 || (__GNUC__ == 4 && __GNUC_MINOR__ >= 5))))
#define CHORUS_NCCL_DEPRECATED(msg) __attribute__((deprecated(msg)))
#elif !defined(CHORUS_NCCL_NO_DEPRECATION) && defined(_MSC_VER)
#define CHORUS_NCCL_DEPRECATED(msg) __declspec(deprecated(msg))
#else
#define CHORUS_NCCL_DEPRECATED(msg)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Handles. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* Rendezvous information, produced by one rank and passed to all others by the application. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

/* "Not set" values for ncclConfig_t fields and ncclSimInfo_t. */
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* winFlags of ncclCommWindowRegister. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01

#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* shrinkFlags of ncclCommShrink: plain shrink, or abort the parent's pending work first. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* revokeFlags of ncclCommRevoke; no other value is valid yet. */
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator options. Append-only: size, magic and version identify what the caller filled
 * in. Always start from NCCL_CONFIG_INITIALIZER; fields left undefined take defaults. */
typedef struct ncclConfig_v22800 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

/* clang-format off */
#define NCCL_CONFIG_INITIALIZER {                                             \
  sizeof(ncclConfig_t),                                                       \
  0xcafebeef,                                       /* magic */               \
  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */             \
  NCCL_CONFIG_UNDEF_INT,                            /* blocking */            \
  NCCL_CONFIG_UNDEF_INT,                            /* cgaClusterSize */      \
  NCCL_CONFIG_UNDEF_INT,                            /* minCTAs */             \
  NCCL_CONFIG_UNDEF_INT,                            /* maxCTAs */             \
  NCCL_CONFIG_UNDEF_PTR,                            /* netName */             \
  NCCL_CONFIG_UNDEF_INT,                            /* splitShare */          \
  NCCL_CONFIG_UNDEF_INT,                            /* trafficClass */        \
  NCCL_CONFIG_UNDEF_PTR,                            /* commName */            \
  NCCL_CONFIG_UNDEF_INT,                            /* collnetEnable */       \
  NCCL_CONFIG_UNDEF_INT,                            /* CTAPolicy */           \
  NCCL_CONFIG_UNDEF_INT,                            /* shrinkShare */         \
  NCCL_CONFIG_UNDEF_INT,                            /* nvlsCTAs */            \
  NCCL_CONFIG_UNDEF_INT,                            /* nChannelsPerNetPeer */ \
  NCCL_CONFIG_UNDEF_INT                             /* nvlinkCentricSched */  \
}
/* clang-format on */

/* Result of ncclGroupSimulateEnd. Start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

/* clang-format off */
#define NCCL_SIM_INFO_INITIALIZER {                                           \
  sizeof(ncclSimInfo_t),                                                      \
  0x74685283,                                       /* magic */               \
  NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */             \
  NCCL_UNDEF_FLOAT                                  /* estimatedTime */       \
}
/* clang-format on */

/* Reduction operators. Values from ncclNumOps up to ncclMaxRedOp are handles returned by
 * ncclRedOpCreatePreMulSum. ncclMaxRedOp is the largest value that fits the enum's size, which
 * the dummy enum measures, so sizeof(ncclRedOp_t) never changes. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives: read by the collective from device
 * memory, or read from host memory before the create call returns. */
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every function has a pnccl twin with the same signature, for profiling tools. */

/* Memory suited to registration and zero-copy use; may round the size up. */
CHORUS_NCCL_API ncclResult_t ncclMemAlloc(void** ptr, size_t size);
CHORUS_NCCL_API ncclResult_t pncclMemAlloc(void** ptr, size_t size);
CHORUS_NCCL_API ncclResult_t ncclMemFree(void* ptr);
CHORUS_NCCL_API ncclResult_t pncclMemFree(void* ptr);

/* The library's API level, coded as NCCL_VERSION_CODE. */
CHORUS_NCCL_API ncclResult_t ncclGetVersion(int* version);
CHORUS_NCCL_API ncclResult_t pncclGetVersion(int* version);

/* Create on one rank, then hand to every rank of the communicator-to-be. */
CHORUS_NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
CHORUS_NCCL_API ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* Communicator creation. Collective over the nranks ranks: call from one thread or process per
 * rank, or from one thread inside ncclGroupStart/ncclGroupEnd. */
CHORUS_NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                    ncclUniqueId commId, int rank,
                                                    ncclConfig_t* config);
CHORUS_NCCL_API ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank,
                                                     ncclConfig_t* config);
CHORUS_NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                              int rank);
CHORUS_NCCL_API ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                               int rank);
/* ndev communicators of one process; devlist NULL means devices 0..ndev-1. */
CHORUS_NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
CHORUS_NCCL_API ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/* Like ncclCommInitRankConfig with nId unique ids (same count and order on every rank). */
CHORUS_NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                      int nId, ncclUniqueId* commIds,
                                                      ncclConfig_t* config);
CHORUS_NCCL_API ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                       int nId, ncclUniqueId* commIds,
                                                       ncclConfig_t* config);

/* Teardown: Finalize completes outstanding work (ncclInProgress until quiescent), Destroy frees
 * local resources, Abort stops everything and frees. */
CHORUS_NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t pncclCommFinalize(ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Stops in-flight work so that destroy, split or shrink can proceed; revokeFlags must be
 * NCCL_REVOKE_DEFAULT. */
CHORUS_NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
CHORUS_NCCL_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* New communicators from an existing one: by color (ordered by key; NCCL_SPLIT_NOCOLOR yields
 * NULL), or without the excluded ranks. config NULL inherits the parent's. */
CHORUS_NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                           ncclConfig_t* config);
CHORUS_NCCL_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key,
                                            ncclComm_t* newcomm, ncclConfig_t* config);
CHORUS_NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                            int excludeRanksCount, ncclComm_t* newcomm,
                                            ncclConfig_t* config, int shrinkFlags);
CHORUS_NCCL_API ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                             int excludeRanksCount, ncclComm_t* newcomm,
                                             ncclConfig_t* config, int shrinkFlags);

/* Errors: a fixed text per code, and the last detailed message (comm may be NULL). */
CHORUS_NCCL_API const char* ncclGetErrorString(ncclResult_t result);
CHORUS_NCCL_API const char* pncclGetErrorString(ncclResult_t result);
CHORUS_NCCL_API const char* ncclGetLastError(ncclComm_t comm);
CHORUS_NCCL_API const char* pncclGetLastError(ncclComm_t comm);

/* Re-reads the logging settings from the environment. */
CHORUS_NCCL_DEPRECATED(
    "ncclResetDebugInit is not part of the supported NCCL API and will be removed")
CHORUS_NCCL_API void ncclResetDebugInit(void);
CHORUS_NCCL_DEPRECATED(
    "pncclResetDebugInit is not part of the supported NCCL API and will be removed")
CHORUS_NCCL_API void pncclResetDebugInit(void);

/* Communicator queries. */
CHORUS_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
CHORUS_NCCL_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
CHORUS_NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
CHORUS_NCCL_API ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
CHORUS_NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
CHORUS_NCCL_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
CHORUS_NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
CHORUS_NCCL_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* Buffer registration for zero-copy transfers. */
CHORUS_NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                              void** handle);
CHORUS_NCCL_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                               void** handle);
CHORUS_NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
CHORUS_NCCL_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/* Window registration (collective); winFlags is one of NCCL_WIN_*. */
CHORUS_NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                    ncclWindow_t* win, int winFlags);
CHORUS_NCCL_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                     ncclWindow_t* win, int winFlags);
CHORUS_NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
CHORUS_NCCL_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* A sum whose inputs are first multiplied by *scalar; valid only with comm and datatype. */
CHORUS_NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                      ncclDataType_t datatype,
                                                      ncclScalarResidence_t residence,
                                                      ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                       ncclDataType_t datatype,
                                                       ncclScalarResidence_t residence,
                                                       ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
CHORUS_NCCL_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* Collectives and point-to-point. Every rank of comm makes the matching call; counts are in
 * elements. sendbuff == recvbuff (or the rank's block of it) runs in place. */
CHORUS_NCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, ncclRedOp_t op, int root,
                                        ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclRedOp_t op, int root,
                                         ncclComm_t comm, cudaStream_t stream);
/* In-place broadcast (older form of ncclBroadcast). */
CHORUS_NCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                       ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                        ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, int root, ncclComm_t comm,
                                           cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, int root, ncclComm_t comm,
                                            cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op,
                                            ncclComm_t comm, cudaStream_t stream);
/* sendbuff holds nranks * recvcount elements; rank i keeps block i of the reduction. */
CHORUS_NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                               size_t recvcount, ncclDataType_t datatype,
                                               ncclRedOp_t op, ncclComm_t comm,
                                               cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                size_t recvcount, ncclDataType_t datatype,
                                                ncclRedOp_t op, ncclComm_t comm,
                                                cudaStream_t stream);
/* recvbuff holds nranks * sendcount elements; rank i's data lands at block i. */
CHORUS_NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           ncclDataType_t datatype, ncclComm_t comm,
                                           cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                            ncclDataType_t datatype, ncclComm_t comm,
                                            cudaStream_t stream);
/* Block j of sendbuff goes to rank j; block i of recvbuff comes from rank i (count each). */
CHORUS_NCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclComm_t comm,
                                          cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                           ncclDataType_t datatype, ncclComm_t comm,
                                           cudaStream_t stream);
/* Rank i's count elements land at block i of root's recvbuff. */
CHORUS_NCCL_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream);
/* Block i of root's sendbuff goes to rank i's recvbuff. */
CHORUS_NCCL_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                         ncclDataType_t datatype, int root, ncclComm_t comm,
                                         cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream);
/* Point-to-point: peer makes the matching call with the same count and datatype. Exchanges that
 * must progress together belong in one group. */
CHORUS_NCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                      int peer, ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                       int peer, ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                      int peer, ncclComm_t comm, cudaStream_t stream);
CHORUS_NCCL_API ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype,
                                       int peer, ncclComm_t comm, cudaStream_t stream);

/* Groups: calls between Start and End are issued together at End (nesting allowed).
 * SimulateEnd reports the estimated cost instead of running them. */
CHORUS_NCCL_API ncclResult_t ncclGroupStart(void);
CHORUS_NCCL_API ncclResult_t pncclGroupStart(void);
CHORUS_NCCL_API ncclResult_t ncclGroupEnd(void);
CHORUS_NCCL_API ncclResult_t pncclGroupEnd(void);
CHORUS_NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
CHORUS_NCCL_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
}
#endif

#endif /* NCCL_H_ */
