// Shared helpers of the C API entry points: error reporting, argument checks, init.
#include "api/api_util.h"

#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "common/log.h"
#include "common/param.h"
#include "core/device.h"
#include "cuda/dev_comm.h"
#include "core/group.h"

namespace chorus {

namespace {
std::mutex gLastErrorMutex;
std::string gLastError;  // the most recent error of any call in the process
}  // namespace

std::string lastProcessError() {
  std::lock_guard<std::mutex> lock(gLastErrorMutex);
  return gLastError;
}

ncclResult_t report(ncclComm_t comm, const Status& s) {
  if (s.isOk()) return ncclSuccess;
  if (s.code() == Code::kInProgress) return ncclInProgress;
  LOG_WARN(kSubsysInit, "%s", s.message().c_str());
  {
    std::lock_guard<std::mutex> lock(gLastErrorMutex);
    gLastError = s.message();
  }
  if (std::shared_ptr<Communicator> c = liveComm(comm)) c->setLastError(s.message());
  return static_cast<ncclResult_t>(s.code());
}

namespace {
Status unusableComm(ncclComm_t comm, const char* fn) {
  if (comm == nullptr) return invalidArgument("%s: comm is NULL", fn);
  if (comm->magic.load() == kCommInitializing)
    return invalidUsage(
        "%s: comm is still being initialized (inside ncclGroupStart/End, or non-blocking: poll "
        "ncclCommGetAsyncError until it is not ncclInProgress)",
        fn);
  if (comm->magic.load() == kCommInitFailed)
    return invalidUsage(
        "%s: comm's non-blocking init failed (ncclCommGetAsyncError says why); only "
        "ncclCommAbort or ncclCommDestroy may follow",
        fn);
  return invalidUsage("%s: comm was destroyed, aborted or is not a communicator", fn);
}
}  // namespace

Result<CommRef> usableComm(ncclComm_t comm, const char* fn) {
  CommRef c = comm != nullptr && comm->magic.load() == kCommLive ? comm->get() : nullptr;
  if (!c) return unusableComm(comm, fn);
  setLogRank(c->rank());
  return c;
}

Status pinComm(ncclComm_t comm, const char* fn, CommPin* pin) {
  if (comm == nullptr || comm->magic.load(std::memory_order_relaxed) != kCommLive ||
      !pin->pin(comm))
    return unusableComm(comm, fn);
  setLogRank((*pin)->rank());
  return Status::ok();
}

Status checkType(const ncclDataType_t& type, const char* fn) {
  const int v = enumArg(type);
  if (v < 0 || v >= ncclNumTypes)
    return invalidArgument("%s: datatype %d is not a valid ncclDataType_t", fn, v);
  return Status::ok();
}

// count elements of type at ptr: non-NULL unless empty, and no size overflow.
Status checkBuffer(const void* ptr, size_t count, size_t multiplier, ncclDataType_t type,
                   const char* name, const char* fn) {
  size_t elt = dataTypeSize(static_cast<DataType>(type));
  size_t eltTimes = 0, bytes = 0;
  if (__builtin_mul_overflow(elt, multiplier, &eltTimes) ||
      __builtin_mul_overflow(count, eltTimes, &bytes) || bytes > SIZE_MAX / 2)
    return invalidArgument("%s: count %zu of %s overflows the address space", fn, count,
                           dataTypeName(static_cast<DataType>(type)));
  if (count > 0 && ptr == nullptr) return invalidArgument("%s: %s is NULL", fn, name);
  return Status::ok();
}

// NCCL runs in place only when both pointers are equal; any other overlap is a user error.
Status checkOverlap(const void* a, size_t aBytes, const void* b, size_t bBytes, const char* fn) {
  if (a == nullptr || b == nullptr || a == b || aBytes == 0 || bBytes == 0) return Status::ok();
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  if (pa < pb + bBytes && pb < pa + aBytes)
    return invalidArgument("%s: sendbuff and recvbuff overlap without being identical", fn);
  return Status::ok();
}

Result<ncclUniqueId> makeUniqueId() {
  Result<UniqueIdInfo> info = createUniqueId();
  if (!info.isOk()) return info.status();
  ncclUniqueId id;
  encodeUniqueId(info.value(), reinterpret_cast<unsigned char*>(id.internal));
  return id;
}

Result<CommOptions> optionsFrom(const ncclConfig_t* config, bool forceHost) {
  CommOptions o;
  if (config != nullptr) {
    const size_t header = offsetof(ncclConfig_t, blocking);
    if (config->size < header || config->magic != 0xcafebeef)
      return invalidArgument(
          "config was not initialised with NCCL_CONFIG_INITIALIZER (size %zu, magic 0x%x)",
          config->size, config->magic);
    if (config->size > offsetof(ncclConfig_t, blocking)) {
      int b = config->blocking;
      if (b != NCCL_CONFIG_UNDEF_INT && b != 0 && b != 1)
        return invalidArgument("config->blocking must be 0 or 1, not %d", b);
      o.blocking = b != 0;
    }
    if (config->size >= offsetof(ncclConfig_t, commName) + sizeof(const char*) &&
        config->commName != nullptr)
      o.name = config->commName;
  }
  int64_t hostParam = paramInt("HOST_COMM");
  if (forceHost || hostParam == 1) {
    o.host = true;
  } else if (hostParam == 0 || cudaDeviceCount() > 0) {
    // A device communicator, bound to the calling thread's current device at init.
    Result<int> devices = dev::usableDevices();
    if (!devices.isOk())
      return invalidUsage(
          "a device communicator was asked for (%s), but %s; set "
          "CHORUS_HOST_COMM=1 to run collectives on host memory",
          hostParam == 0 ? "CHORUS_HOST_COMM=0" : "the CUDA driver reports a GPU",
          devices.status().message().c_str());
    o.host = false;
  }
  return o;
}

namespace {

Result<UniqueIdInfo> checkInit(const InitRequest& req) {
  if (req.nranks < 1)
    return invalidArgument("ncclCommInitRank: nranks %d must be at least 1", req.nranks);
  if (req.rank < 0 || req.rank >= req.nranks)
    return invalidArgument("ncclCommInitRank: rank %d is outside [0, %d)", req.rank, req.nranks);
  Result<UniqueIdInfo> info =
      decodeUniqueId(reinterpret_cast<const unsigned char*>(req.id.internal));
  if (!info.isOk()) return info.status().withContext("ncclCommInitRank");
  return info;
}

// Runs handle's init (on device, when >= 0, made current first) and records how it ended:
// live, or (failed) dead for a blocking init or one that ncclCommAbort stopped,
// kCommInitFailed for a non-blocking one (its runner keeps the error for
// ncclCommGetAsyncError).
Status runInit(ncclComm_t handle, const InitRequest& req, int device) {
  Status s = device >= 0 ? dev::setCurrentDevice(device) : Status::ok();
  if (s.isOk()) s = initComm(handle, req);
  if (!s.isOk())
    handle->magic.store(req.options.blocking || handle->cancel.cancelled() ? kCommDead
                                                                           : kCommInitFailed);
  return s;
}

}  // namespace

Status initComm(ncclComm_t handle, const InitRequest& req) {
  Result<UniqueIdInfo> info = checkInit(req);
  if (!info.isOk()) return info.status();
  setLogRank(req.rank);
  Result<std::unique_ptr<Communicator>> c =
      Communicator::create(info.value(), req.nranks, req.rank, req.options, &handle->cancel);
  if (!c.isOk()) return c.status();
  CommRef ref(c.take().release());
  if (!handle->finishInit(ref)) {
    ref->abort();
    return invalidUsage("rank %d init: aborted by ncclCommAbort", req.rank);
  }
  return Status::ok();
}

Status initOrDefer(ncclComm_t* out, const InitRequest& req) {
  if (out == nullptr) return invalidArgument("ncclCommInitRank: comm is NULL");
  __atomic_store_n(out, static_cast<ncclComm_t>(nullptr), __ATOMIC_RELEASE);
  // Bad arguments fail here, also for an init that runs later.
  Result<UniqueIdInfo> info = checkInit(req);
  if (!info.isOk()) return info.status();
  // A device communicator's init that runs on another thread (non-blocking, or at the group's
  // end) binds to the device current on the calling thread now, as the call would.
  int device = -1;
  if (!req.options.host && (!req.options.blocking || groupActive())) {
    Result<int> current = dev::currentDevice();
    if (!current.isOk()) return current.status().withContext("ncclCommInitRank");
    device = current.value();
  }
  // The handle is visible while the init runs, so that another thread may abort it; it is
  // never freed (a failed init leaves it behind as a tombstone).
  auto* handle = new ncclComm();
  handle->magic.store(kCommInitializing);
  if (!req.options.blocking) handle->runner.reset(new AsyncRunner());
  // Atomic: a thread that reads the caller's variable while the init waits may abort it.
  __atomic_store_n(out, handle, __ATOMIC_RELEASE);
  std::function<Status()> job = [handle, req, device]() { return runInit(handle, req, device); };
  if (groupActive()) {
    groupEnqueue(handle, std::move(job));
    return Status::ok();
  }
  if (handle->runner) return handle->runner->submit(std::move(job));
  Status s = job();
  if (!s.isOk()) __atomic_store_n(out, static_cast<ncclComm_t>(nullptr), __ATOMIC_RELEASE);
  return s;
}

// Destroyed handles are kept as tombstones so that a later call with the stale pointer gets an
// error instead of touching freed memory.
void retire(ncclComm_t comm, bool discardQueued) {
  comm->magic.store(kCommDead);
  if (comm->runner) comm->runner->stop(discardQueued);
  comm->set(nullptr);
}

Status submitAsync(ncclComm_t comm, const char* fn, std::function<Status()> job) {
  if (comm->finalizing.load())
    return invalidUsage(
        "%s: comm was finalized (ncclCommFinalize); only ncclCommDestroy may follow", fn);
  return comm->runner->submit(std::move(job));
}

void quiesce(ncclComm_t comm) {
  if (comm->runner) comm->runner->drain();
}

namespace {
// ncclGroupEnd hands a non-blocking communicator's share of the group to its runner.
const bool gGroupHandoff = [] {
  setGroupAsyncHandoff(
      [](const void* key) {
        auto* comm = static_cast<ncclComm*>(const_cast<void*>(key));
        return comm->runner != nullptr;
      },
      [](const void* key, std::function<Status()> job) {
        auto* comm = static_cast<ncclComm*>(const_cast<void*>(key));
        return submitAsync(comm, "ncclGroupEnd", std::move(job));
      });
  return true;
}();
}  // namespace

Status notImplemented(const char* fn) {
  return invalidUsage("%s is not implemented in this version of Chorus", fn);
}

// Runs a task now, hands it to a non-blocking communicator's runner, or queues it when a
// group is open.
Status runOrQueue(ncclComm_t comm, std::function<Status()> task) {
  if (groupActive()) {
    groupEnqueue(comm, std::move(task));
    return Status::ok();
  }
  if (comm->runner) return submitAsync(comm, "call", std::move(task));
  return task();
}

}  // namespace chorus
