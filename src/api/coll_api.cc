// Collectives, reduction operators and group calls of the NCCL C API.
#include "api/api_util.h"
#include "core/group.h"

using namespace chorus;  // NOLINT: this file is the C API only

extern "C" ncclResult_t pncclGroupStart() {
  groupStart();
  return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart)

extern "C" ncclResult_t pncclGroupEnd() {
  return guarded(nullptr, "ncclGroupEnd", [&]() -> Status { return groupEnd(); });
}
NCCL_ALIAS(ncclGroupEnd)

extern "C" ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  return guarded(nullptr, "ncclGroupSimulateEnd", [&]() -> Status {
    if (simInfo == nullptr) return invalidArgument("ncclGroupSimulateEnd: simInfo is NULL");
    return notImplemented("ncclGroupSimulateEnd");
  });
}
NCCL_ALIAS(ncclGroupSimulateEnd)

extern "C" ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm) {
  return guarded(comm, "ncclRedOpCreatePreMulSum", [&]() -> Status {
    const char* fn = "ncclRedOpCreatePreMulSum";
    Result<CommRef> c = usableComm(comm, fn);
    if (!c.isOk()) return c.status();
    if (op == nullptr) return invalidArgument("%s: op is NULL", fn);
    if (scalar == nullptr) return invalidArgument("%s: scalar is NULL", fn);
    CHORUS_TRY(checkType(datatype, fn));
    if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
      return invalidArgument("%s: residence %d is not an ncclScalarResidence_t", fn,
                             static_cast<int>(residence));
    Result<int> id = c.value()->createPreMulSum(scalar, static_cast<DataType>(datatype),
                                                residence == ncclScalarHostImmediate);
    if (!id.isOk()) return id.status();
    *op = static_cast<ncclRedOp_t>(id.value());
    return Status::ok();
  });
}
NCCL_ALIAS(ncclRedOpCreatePreMulSum)

extern "C" ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return guarded(comm, "ncclRedOpDestroy", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclRedOpDestroy");
    if (!c.isOk()) return c.status();
    return c.value()->destroyOp(static_cast<int>(op));
  });
}
NCCL_ALIAS(ncclRedOpDestroy)

extern "C" ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  (void)stream;  // host communicators complete the call before returning
  return guarded(comm, "ncclAllReduce", [&]() -> Status {
    const char* fn = "ncclAllReduce";
    Result<CommRef> c = usableComm(comm, fn);
    if (!c.isOk()) return c.status();
    CHORUS_TRY(checkType(datatype, fn));
    CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    DataType type = static_cast<DataType>(datatype);
    size_t bytes = count * dataTypeSize(type);
    CHORUS_TRY(checkOverlap(sendbuff, bytes, recvbuff, bytes, fn));
    Result<RedOp> redop = c.value()->resolveOp(static_cast<int>(op), type);
    if (!redop.isOk()) return redop.status().withContext(fn);
    CommRef impl = c.value();
    RedOp resolved = redop.value();
    return runOrQueue(comm,
                      [=]() { return impl->allReduce(sendbuff, recvbuff, count, type, resolved); });
  });
}
NCCL_ALIAS(ncclAllReduce)

extern "C" ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  (void)stream;
  return guarded(comm, "ncclAllGather", [&]() -> Status {
    const char* fn = "ncclAllGather";
    Result<CommRef> c = usableComm(comm, fn);
    if (!c.isOk()) return c.status();
    CHORUS_TRY(checkType(datatype, fn));
    int n = c.value()->nranks();
    CHORUS_TRY(checkBuffer(sendbuff, sendcount, 1, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, sendcount, static_cast<size_t>(n), datatype, "recvbuff", fn));
    DataType type = static_cast<DataType>(datatype);
    size_t bytes = sendcount * dataTypeSize(type);
    // In place means sendbuff is this rank's block of recvbuff; other overlaps are errors.
    const char* inPlace = static_cast<const char*>(recvbuff) + bytes * c.value()->rank();
    if (sendbuff != inPlace) CHORUS_TRY(checkOverlap(sendbuff, bytes, recvbuff, bytes * n, fn));
    CommRef impl = c.value();
    return runOrQueue(comm, [=]() { return impl->allGather(sendbuff, recvbuff, sendcount, type); });
  });
}
NCCL_ALIAS(ncclAllGather)

// The collectives below are declared by the API but not provided by this version yet: they
// validate the communicator and fail with a message saying so, never silently succeed.
#define CHORUS_NOT_YET(name, params, ...)          \
  extern "C" ncclResult_t p##name params {         \
    return guarded(comm, #name, [&]() -> Status {  \
      Result<CommRef> c = usableComm(comm, #name); \
      if (!c.isOk()) return c.status();            \
      return notImplemented(#name);                \
    });                                            \
  }                                                \
  NCCL_ALIAS(name)

CHORUS_NOT_YET(ncclReduce, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int,
                            ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclBcast, (void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclBroadcast,
               (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclReduceScatter, (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclAlltoAll,
               (const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclGather,
               (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclScatter,
               (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclSend, (const void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
CHORUS_NOT_YET(ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t comm, cudaStream_t))
