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
    const int where = enumArg(residence);
    if (where != ncclScalarHostImmediate && where != ncclScalarDevice)
      return invalidArgument("%s: residence %d is not an ncclScalarResidence_t", fn, where);
    Result<int> id = c.value()->createPreMulSum(scalar, static_cast<DataType>(datatype),
                                                where == ncclScalarHostImmediate);
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
    return c.value()->destroyOp(enumArg(op));
  });
}
NCCL_ALIAS(ncclRedOpDestroy)

namespace {

// What every collective checks first: the communicator, the datatype, the op and the root.
// Fills args->type/op/root and pins the communicator.
Status prepare(ncclComm_t comm, const char* fn, const ncclDataType_t& datatype, const int* op,
               const int* root, CollArgs* args, CommPin* c) {
  CHORUS_TRY(pinComm(comm, fn, c));
  CHORUS_TRY(checkType(datatype, fn));
  args->type = static_cast<DataType>(datatype);
  if (op != nullptr) {
    Status s = (*c)->resolveOp(*op, args->type, &args->op, &args->scalarDevice);
    if (!s.isOk()) return s.withContext(fn);
  }
  if (root != nullptr) {
    int n = (*c)->nranks();
    if (*root < 0 || *root >= n)
      return invalidArgument("%s: root %d is outside [0, %d)", fn, *root, n);
    args->root = *root;
  }
  return Status::ok();
}

// The owning reference for work queued in an open group: it outlives this call.
Result<CommRef> queuedRef(ncclComm_t comm, const char* fn) {
  CommRef ref = comm->get();
  if (!ref) return invalidUsage("%s: comm was destroyed or aborted", fn);
  return ref;
}

// Hands work on a non-blocking communicator to its runner; the communicator must be usable now,
// and the job keeps it alive.
template <class Job>
Status submitOn(ncclComm_t comm, Communicator& impl, const char* fn, Job job) {
  CHORUS_TRY(impl.checkUsable());
  Result<CommRef> ref = queuedRef(comm, fn);
  if (!ref.isOk()) return ref.status();
  CommRef held = ref.take();
  return submitAsync(comm, fn, [held, job]() mutable { return job(*held); });
}

// Buffers may be identical (in place) or disjoint, never partially overlapping.
Status checkInPlaceOrDisjoint(const void* send, size_t sendBytes, const void* recv,
                              size_t recvBytes, const void* inPlaceSend, const char* fn) {
  if (send == inPlaceSend) return Status::ok();
  return checkOverlap(send, sendBytes, recv, recvBytes, fn);
}

// Runs the collective now, or adds it to the open group's launch for this communicator.
Status launch(ncclComm_t comm, Communicator& impl, Collective collective, const CollArgs& args,
              cudaStream_t stream) {
  HostWork work;
  work.coll = collective;
  work.args = args;
  work.stream = stream;
  if (groupActive()) {
    Result<CommRef> ref = queuedRef(comm, "group");
    if (!ref.isOk()) return ref.status();
    CommRef held = ref.take();
    groupEnqueueColl(comm, work, [held](std::vector<HostWork>& works) { return held->run(works); });
    return Status::ok();
  }
  if (comm->runner)
    return submitOn(comm, impl, "collective",
                    [work](Communicator& c) mutable { return c.run(&work, 1); });
  return impl.run(&work, 1);
}

}  // namespace

extern "C" ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  return guarded(comm, "ncclAllReduce", [&]() -> Status {
    const char* fn = "ncclAllReduce";
    CollArgs a;
    int opValue = enumArg(op);
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, &opValue, nullptr, &a, &c));
    CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes, recvbuff, bytes, recvbuff, fn));
    a.sendbuff = sendbuff;
    a.recvbuff = recvbuff;
    a.count = count;
    return launch(comm, *c, Collective::kAllReduce, a, stream);
  });
}
NCCL_ALIAS(ncclAllReduce)

extern "C" ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  return guarded(comm, "ncclAllGather", [&]() -> Status {
    const char* fn = "ncclAllGather";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, nullptr, &a, &c));
    size_t n = static_cast<size_t>(c->nranks());
    CHORUS_TRY(checkBuffer(sendbuff, sendcount, 1, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, sendcount, n, datatype, "recvbuff", fn));
    size_t bytes = sendcount * dataTypeSize(a.type);
    // In place: sendbuff is this rank's block of recvbuff.
    const char* mine = static_cast<const char*>(recvbuff) + bytes * c->rank();
    CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes, recvbuff, bytes * n, mine, fn));
    a.sendbuff = sendbuff;
    a.recvbuff = recvbuff;
    a.count = sendcount;
    return launch(comm, *c, Collective::kAllGather, a, stream);
  });
}
NCCL_ALIAS(ncclAllGather)

extern "C" ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                           cudaStream_t stream) {
  return guarded(comm, "ncclReduceScatter", [&]() -> Status {
    const char* fn = "ncclReduceScatter";
    CollArgs a;
    int opValue = enumArg(op);
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, &opValue, nullptr, &a, &c));
    size_t n = static_cast<size_t>(c->nranks());
    CHORUS_TRY(checkBuffer(sendbuff, recvcount, n, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, recvcount, 1, datatype, "recvbuff", fn));
    size_t bytes = recvcount * dataTypeSize(a.type);
    // In place: recvbuff is this rank's block of sendbuff.
    const char* mine = static_cast<const char*>(sendbuff) + bytes * c->rank();
    if (recvbuff != mine) CHORUS_TRY(checkOverlap(sendbuff, bytes * n, recvbuff, bytes, fn));
    a.sendbuff = sendbuff;
    a.recvbuff = recvbuff;
    a.count = recvcount;
    return launch(comm, *c, Collective::kReduceScatter, a, stream);
  });
}
NCCL_ALIAS(ncclReduceScatter)

extern "C" ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream) {
  return guarded(comm, "ncclBroadcast", [&]() -> Status {
    const char* fn = "ncclBroadcast";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, &root, &a, &c));
    bool isRoot = c->rank() == root;
    // Only the root reads sendbuff.
    if (isRoot) CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    if (isRoot) CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes, recvbuff, bytes, recvbuff, fn));
    a.sendbuff = sendbuff;
    a.recvbuff = recvbuff;
    a.count = count;
    return launch(comm, *c, Collective::kBroadcast, a, stream);
  });
}
NCCL_ALIAS(ncclBroadcast)

extern "C" ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream) {
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
NCCL_ALIAS(ncclBcast)

extern "C" ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclReduce", [&]() -> Status {
    const char* fn = "ncclReduce";
    CollArgs a;
    int opValue = enumArg(op);
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, &opValue, &root, &a, &c));
    bool isRoot = c->rank() == root;
    CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    // Only the root writes recvbuff; elsewhere it may be NULL.
    if (isRoot) CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    if (isRoot) CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes, recvbuff, bytes, recvbuff, fn));
    a.sendbuff = sendbuff;
    a.recvbuff = isRoot ? recvbuff : nullptr;
    a.count = count;
    return launch(comm, *c, Collective::kReduce, a, stream);
  });
}
NCCL_ALIAS(ncclReduce)

namespace {

// Queues point-to-point ops in the open group, or runs them as a group of their own.
Status runP2p(ncclComm_t comm, Communicator& impl, const std::vector<P2pOp>& ops) {
  if (groupActive()) {
    Result<CommRef> ref = queuedRef(comm, "group");
    if (!ref.isOk()) return ref.status();
    CommRef held = ref.take();
    P2pRunner runner = [held](const std::vector<P2pOp>& all) { return held->p2p(all); };
    for (const P2pOp& op : ops) groupEnqueueP2p(comm, op, runner);
    return Status::ok();
  }
  if (comm->runner)
    return submitOn(comm, impl, "point-to-point", [ops](Communicator& c) { return c.p2p(ops); });
  return impl.p2p(ops);
}

Status checkPeer(int peer, int nranks, const char* fn) {
  if (peer < 0 || peer >= nranks)
    return invalidArgument("%s: peer %d is outside [0, %d)", fn, peer, nranks);
  return Status::ok();
}

P2pOp sendOp(int peer, const void* buf, size_t bytes, cudaStream_t stream) {
  P2pOp op;
  op.stream = stream;
  op.isSend = true;
  op.peer = peer;
  op.sendbuff = buf;
  op.bytes = bytes;
  return op;
}

P2pOp recvOp(int peer, void* buf, size_t bytes, cudaStream_t stream) {
  P2pOp op;
  op.stream = stream;
  op.peer = peer;
  op.recvbuff = buf;
  op.bytes = bytes;
  return op;
}

}  // namespace

extern "C" ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclSend", [&]() -> Status {
    const char* fn = "ncclSend";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, nullptr, &a, &c));
    CHORUS_TRY(checkPeer(peer, c->nranks(), fn));
    CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    return runP2p(comm, *c, {sendOp(peer, sendbuff, count * dataTypeSize(a.type), stream)});
  });
}
NCCL_ALIAS(ncclSend)

extern "C" ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  return guarded(comm, "ncclRecv", [&]() -> Status {
    const char* fn = "ncclRecv";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, nullptr, &a, &c));
    CHORUS_TRY(checkPeer(peer, c->nranks(), fn));
    CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    return runP2p(comm, *c, {recvOp(peer, recvbuff, count * dataTypeSize(a.type), stream)});
  });
}
NCCL_ALIAS(ncclRecv)

extern "C" ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream) {
  return guarded(comm, "ncclAlltoAll", [&]() -> Status {
    const char* fn = "ncclAlltoAll";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, nullptr, &a, &c));
    int n = c->nranks();
    CHORUS_TRY(checkBuffer(sendbuff, count, n, datatype, "sendbuff", fn));
    CHORUS_TRY(checkBuffer(recvbuff, count, n, datatype, "recvbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    // In place (one buffer): the host executor sends overwritten blocks from a copy, and a
    // device communicator copies the sends that overlap receives before the transfers start.
    CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes * n, recvbuff, bytes * n, recvbuff, fn));
    std::vector<P2pOp> ops;
    for (int p = 0; p < n; ++p) {
      ops.push_back(sendOp(p, static_cast<const char*>(sendbuff) + bytes * p, bytes, stream));
      ops.push_back(recvOp(p, static_cast<char*>(recvbuff) + bytes * p, bytes, stream));
    }
    return runP2p(comm, *c, ops);
  });
}
NCCL_ALIAS(ncclAlltoAll)

extern "C" ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  return guarded(comm, "ncclGather", [&]() -> Status {
    const char* fn = "ncclGather";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, &root, &a, &c));
    int n = c->nranks();
    bool isRoot = c->rank() == root;
    CHORUS_TRY(checkBuffer(sendbuff, count, 1, datatype, "sendbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    std::vector<P2pOp> ops;
    if (isRoot) {
      // Only the root's recvbuff is used; in place when sendbuff is the root's own block.
      CHORUS_TRY(checkBuffer(recvbuff, count, n, datatype, "recvbuff", fn));
      const char* mine = static_cast<const char*>(recvbuff) + bytes * root;
      CHORUS_TRY(checkInPlaceOrDisjoint(sendbuff, bytes, recvbuff, bytes * n, mine, fn));
      for (int p = 0; p < n; ++p)
        ops.push_back(recvOp(p, static_cast<char*>(recvbuff) + bytes * p, bytes, stream));
    }
    ops.push_back(sendOp(root, sendbuff, bytes, stream));
    return runP2p(comm, *c, ops);
  });
}
NCCL_ALIAS(ncclGather)

extern "C" ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream) {
  return guarded(comm, "ncclScatter", [&]() -> Status {
    const char* fn = "ncclScatter";
    CollArgs a;
    CommPin c;
    CHORUS_TRY(prepare(comm, fn, datatype, nullptr, &root, &a, &c));
    int n = c->nranks();
    bool isRoot = c->rank() == root;
    CHORUS_TRY(checkBuffer(recvbuff, count, 1, datatype, "recvbuff", fn));
    size_t bytes = count * dataTypeSize(a.type);
    std::vector<P2pOp> ops;
    if (isRoot) {
      // Only the root's sendbuff is used; in place when recvbuff is the root's own block.
      CHORUS_TRY(checkBuffer(sendbuff, count, n, datatype, "sendbuff", fn));
      const char* mine = static_cast<const char*>(sendbuff) + bytes * root;
      if (recvbuff != mine) CHORUS_TRY(checkOverlap(sendbuff, bytes * n, recvbuff, bytes, fn));
      for (int p = 0; p < n; ++p)
        ops.push_back(sendOp(p, static_cast<const char*>(sendbuff) + bytes * p, bytes, stream));
    }
    ops.push_back(recvOp(root, recvbuff, bytes, stream));
    return runP2p(comm, *c, ops);
  });
}
NCCL_ALIAS(ncclScatter)
