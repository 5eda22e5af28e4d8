// Communicator lifecycle and queries of the NCCL C API.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "api/api_util.h"
#include "chorus.h"
#include "common/host_alloc.h"
#include "common/log.h"
#include "core/group.h"
#include "cuda/dev_comm.h"

using namespace chorus;  // NOLINT: this file is the C API only

extern "C" ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                int rank, ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankConfig", [&]() -> Status {
    Result<CommOptions> o = optionsFrom(config, false);
    if (!o.isOk()) return o.status().withContext("ncclCommInitRankConfig");
    return initOrDefer(comm, InitRequest{nranks, rank, commId, o.value()});
  });
}
NCCL_ALIAS(ncclCommInitRankConfig)

extern "C" ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                          int rank) {
  return pncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}
NCCL_ALIAS(ncclCommInitRank)

extern "C" ncclResult_t chorusCommInitRankHost(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                               int rank, ncclConfig_t* config) {
  return guarded(nullptr, "chorusCommInitRankHost", [&]() -> Status {
    Result<CommOptions> o = optionsFrom(config, true);
    if (!o.isOk()) return o.status().withContext("chorusCommInitRankHost");
    return initOrDefer(comm, InitRequest{nranks, rank, commId, o.value()});
  });
}

extern "C" ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId* commIds,
                                                  ncclConfig_t* config) {
  return guarded(nullptr, "ncclCommInitRankScalable", [&]() -> Status {
    if (nId < 1) return invalidArgument("ncclCommInitRankScalable: nId %d must be >= 1", nId);
    if (commIds == nullptr) return invalidArgument("ncclCommInitRankScalable: commIds is NULL");
    Result<CommOptions> o = optionsFrom(config, false);
    if (!o.isOk()) return o.status().withContext("ncclCommInitRankScalable");
    // Several ids only spread the rendezvous load; the first alone describes the clique.
    return initOrDefer(newcomm, InitRequest{nranks, myrank, commIds[0], o.value()});
  });
}
NCCL_ALIAS(ncclCommInitRankScalable)

extern "C" ncclResult_t pncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  return guarded(nullptr, "ncclCommInitAll", [&]() -> Status {
    if (comms == nullptr) return invalidArgument("ncclCommInitAll: comm is NULL");
    if (ndev < 1) return invalidArgument("ncclCommInitAll: ndev %d must be at least 1", ndev);
    if (devlist != nullptr) {
      for (int i = 0; i < ndev; ++i)
        if (devlist[i] < 0)
          return invalidArgument("ncclCommInitAll: devlist[%d] = %d is not a device", i,
                                 devlist[i]);
    }
    Result<CommOptions> o = optionsFrom(nullptr, false);
    if (!o.isOk()) return o.status().withContext("ncclCommInitAll");
    // The clique lives in this process only: never take the rendezvous address from
    // NCCL_COMM_ID, which describes the process's multi-process clique.
    Result<UniqueIdInfo> info = createLocalUniqueId();
    if (!info.isOk()) return info.status().withContext("ncclCommInitAll");
    ncclUniqueId id;
    encodeUniqueId(info.value(), reinterpret_cast<unsigned char*>(id.internal));
    std::vector<ncclComm_t> handles(ndev, nullptr);
    std::vector<Status> results(ndev);
    std::vector<std::thread> threads;
    // Device communicators: rank r on devlist[r], else on device r (several ranks share a GPU
    // when there are fewer GPUs than ranks).
    int devices = 1;
    if (!o.value().host) {
      Result<int> count = dev::usableDevices();
      if (!count.isOk()) return count.status().withContext("ncclCommInitAll");
      devices = count.value();
      if (devlist != nullptr)
        for (int i = 0; i < ndev; ++i)
          if (devlist[i] >= devices)
            return invalidArgument("ncclCommInitAll: devlist[%d] = %d, but there are %d devices", i,
                                   devlist[i], devices);
    }
    for (int r = 0; r < ndev; ++r) {
      handles[r] = new ncclComm();
      threads.emplace_back([&, r] {
        if (!o.value().host) {
          results[r] = dev::setCurrentDevice(devlist != nullptr ? devlist[r] : r % devices);
          if (!results[r].isOk()) return;
        }
        results[r] = initComm(handles[r], InitRequest{ndev, r, id, o.value()});
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < ndev; ++r) {
      if (!results[r].isOk()) {
        for (int k = 0; k < ndev; ++k) {
          if (CommRef impl = handles[k]->get()) impl->abort();
          retire(handles[k]);
          delete handles[k];
        }
        return results[r].withContext("ncclCommInitAll");
      }
    }
    for (int r = 0; r < ndev; ++r) comms[r] = handles[r];
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommInitAll)

extern "C" ncclResult_t pncclCommFinalize(ncclComm_t comm) {
  return guarded(comm, "ncclCommFinalize", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommFinalize");
    if (!c.isOk()) return c.status();
    if (comm->runner) {
      // Runs after the work queued before it; polling then reports when it is done.
      CommRef held = c.take();
      Status s = submitAsync(comm, "ncclCommFinalize", [held]() { return held->finalize(); });
      comm->finalizing.store(true);
      return s;
    }
    return c.value()->finalize();
  });
}
NCCL_ALIAS(ncclCommFinalize)

extern "C" ncclResult_t pncclCommDestroy(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommDestroy", [&]() -> Status {
    // NCCL accepts a NULL communicator here and does nothing.
    if (comm == nullptr) return Status::ok();
    const uint64_t state = comm->magic.load();
    if (state == kCommInitializing)
      return invalidUsage(
          "ncclCommDestroy: comm is still being initialized; poll ncclCommGetAsyncError until it "
          "is not ncclInProgress, or call ncclCommAbort");
    if (state != kCommLive && state != kCommInitFailed)
      return invalidUsage("ncclCommDestroy: comm was already destroyed or aborted");
    // A non-blocking communicator's queued work runs first.
    retire(comm);
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommDestroy)

extern "C" ncclResult_t pncclCommAbort(ncclComm_t comm) {
  return guarded(nullptr, "ncclCommAbort", [&]() -> Status {
    if (comm == nullptr) return Status::ok();
    // From here on an init still running cannot make the handle live.
    const uint64_t state = comm->requestAbort();
    if (state == kCommLive) {
      if (CommRef impl = comm->get()) impl->abort();
    } else if (state == kCommInitializing || state == kCommInitFailed) {
      // An init waiting for its peers returns as soon as its abort flag is up; one not started
      // yet (queued in a group or behind a runner) fails when it starts.
      if (comm->cancel.cancel() && !comm->cancel.waitDetached(5.0))
        LOG_WARN(kSubsysInit, "ncclCommAbort: the aborted init did not return within 5 s");
    } else {
      return invalidUsage("ncclCommAbort: comm was already destroyed or aborted");
    }
    retire(comm, true);
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommAbort)

namespace {
// No call runs on comm: no pin (calls of this thread pin nothing here) and an idle runner.
bool quiescent(ncclComm_t comm) {
  return comm->pins.load() == 0 && (!comm->runner || comm->runner->idle());
}
}  // namespace

extern "C" ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return guarded(comm, "ncclCommRevoke", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommRevoke");
    if (!c.isOk()) return c.status();
    if (revokeFlags != NCCL_REVOKE_DEFAULT)
      return invalidArgument("ncclCommRevoke: revokeFlags must be NCCL_REVOKE_DEFAULT (0)");
    // Every wait ends; work queued and not started is dropped. Quiescent once no call runs
    // (the one pin left is this call's).
    c.value()->revoke();
    if (comm->runner) comm->runner->discardQueued();
    return quiescent(comm) ? Status::ok() : inProgress();
  });
}
NCCL_ALIAS(ncclCommRevoke)

namespace {

// Joins the communicator a split or shrink planned (at ncclGroupEnd inside a group).
Status initPlanned(ncclComm_t* newcomm, const Communicator::SplitPlan& plan,
                   const CommOptions& options) {
  ncclUniqueId id;
  encodeUniqueId(plan.id, reinterpret_cast<unsigned char*>(id.internal));
  CommOptions o = options;
  o.derived = true;
  Status s = initOrDefer(newcomm, InitRequest{plan.newSize, plan.newRank, id, o});
  if (!s.isOk() && plan.idRank >= 0)
    return s.withContext(
        formatString("the new communicator (rendezvous hosted by rank %d)", plan.idRank));
  return s;
}

}  // namespace

extern "C" ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  return guarded(comm, "ncclCommSplit", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommSplit");
    if (!c.isOk()) return c.status();
    quiesce(comm);
    if (newcomm == nullptr) return invalidArgument("ncclCommSplit: newcomm is NULL");
    *newcomm = nullptr;
    if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
      return invalidArgument(
          "ncclCommSplit: color %d must be >= 0, or NCCL_SPLIT_NOCOLOR (%d) to join none", color,
          NCCL_SPLIT_NOCOLOR);
    // The new communicator keeps the parent's kind (host or device) unless config says.
    Result<CommOptions> o = optionsFrom(config, c.value()->isHost());
    if (!o.isOk()) return o.status().withContext("ncclCommSplit");
    Result<Communicator::SplitPlan> plan = c.value()->planSplit(color, key);
    if (!plan.isOk()) return plan.status();
    if (plan.value().newRank < 0) return Status::ok();
    return initPlanned(newcomm, plan.value(), o.value());
  });
}
NCCL_ALIAS(ncclCommSplit)

extern "C" ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  return guarded(comm, "ncclCommShrink", [&]() -> Status {
    // A communicator whose peer failed is what shrink is for: only a destroyed or unknown
    // handle is refused here.
    Result<CommRef> c = usableComm(comm, "ncclCommShrink");
    if (!c.isOk()) return c.status();
    // Not for NCCL_SHRINK_ABORT: the work queued may be what waits for the failed ranks.
    if (shrinkFlags != NCCL_SHRINK_ABORT) quiesce(comm);
    if (newcomm == nullptr) return invalidArgument("ncclCommShrink: newcomm is NULL");
    *newcomm = nullptr;
    if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
      return invalidArgument(
          "ncclCommShrink: shrinkFlags %d is neither NCCL_SHRINK_DEFAULT (0) nor "
          "NCCL_SHRINK_ABORT (1)",
          shrinkFlags);
    if (excludeRanksCount < 0)
      return invalidArgument("ncclCommShrink: excludeRanksCount %d is negative", excludeRanksCount);
    if (excludeRanksCount > 0 && excludeRanksList == nullptr)
      return invalidArgument("ncclCommShrink: excludeRanksList is NULL but excludeRanksCount is %d",
                             excludeRanksCount);
    const int n = c.value()->nranks();
    const int me = c.value()->rank();
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    std::sort(excluded.begin(), excluded.end());
    for (size_t i = 0; i < excluded.size(); ++i) {
      if (excluded[i] < 0 || excluded[i] >= n)
        return invalidArgument("ncclCommShrink: excludeRanksList holds rank %d, outside [0, %d)",
                               excluded[i], n);
      if (i > 0 && excluded[i] == excluded[i - 1])
        return invalidArgument("ncclCommShrink: excludeRanksList holds rank %d twice", excluded[i]);
      if (excluded[i] == me)
        return invalidArgument(
            "ncclCommShrink: excludeRanksList holds this rank (%d); excluded ranks do not call "
            "ncclCommShrink",
            me);
    }
    Result<CommOptions> o = optionsFrom(config, c.value()->isHost());
    if (!o.isOk()) return o.status().withContext("ncclCommShrink");
    Result<Communicator::SplitPlan> plan =
        c.value()->planShrink(excluded, shrinkFlags == NCCL_SHRINK_ABORT);
    if (!plan.isOk()) return plan.status();
    return initPlanned(newcomm, plan.value(), o.value());
  });
}
NCCL_ALIAS(ncclCommShrink)

extern "C" ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return guarded(comm, "ncclCommGetAsyncError", [&]() -> Status {
    if (asyncError == nullptr) return invalidArgument("ncclCommGetAsyncError: asyncError is NULL");
    // An init that runs (non-blocking, or queued in an open group) or failed.
    const uint64_t state = comm != nullptr ? comm->magic.load() : kCommDead;
    if (state == kCommInitializing) {
      *asyncError = ncclInProgress;
      return Status::ok();
    }
    if (state == kCommInitFailed && comm->runner) {
      Status why = comm->runner->state();
      *asyncError = static_cast<ncclResult_t>(why.code());
      if (!why.isOk() && why.code() != Code::kInProgress) report(nullptr, why);
      return Status::ok();
    }
    Result<CommRef> c = usableComm(comm, "ncclCommGetAsyncError");
    if (!c.isOk()) return c.status();
    // The communicator's failure first, then its runner's: a failed call, or work not done.
    // A revoked communicator: in progress until no call runs any more, then success (the
    // calls it stopped failed, as they were meant to).
    if (c.value()->revoked()) {
      *asyncError = quiescent(comm) ? ncclSuccess : ncclInProgress;
      return Status::ok();
    }
    Status s = c.value()->asyncError();
    if (s.isOk() && comm->runner) s = comm->runner->state();
    // ncclGetLastError(comm) says why.
    if (!s.isOk() && s.code() != Code::kInProgress) c.value()->setLastError(s.message());
    *asyncError = static_cast<ncclResult_t>(s.code());
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommGetAsyncError)

extern "C" ncclResult_t pncclCommCount(const ncclComm_t comm, int* count) {
  return guarded(comm, "ncclCommCount", [&]() -> Status {
    if (count == nullptr) return invalidArgument("ncclCommCount: count is NULL");
    Result<CommRef> c = usableComm(comm, "ncclCommCount");
    if (!c.isOk()) return c.status();
    *count = c.value()->nranks();
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommCount)

extern "C" ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device) {
  return guarded(comm, "ncclCommCuDevice", [&]() -> Status {
    if (device == nullptr) return invalidArgument("ncclCommCuDevice: device is NULL");
    Result<CommRef> c = usableComm(comm, "ncclCommCuDevice");
    if (!c.isOk()) return c.status();
    *device = c.value()->cudaDev();
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommCuDevice)

extern "C" ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank) {
  return guarded(comm, "ncclCommUserRank", [&]() -> Status {
    if (rank == nullptr) return invalidArgument("ncclCommUserRank: rank is NULL");
    Result<CommRef> c = usableComm(comm, "ncclCommUserRank");
    if (!c.isOk()) return c.status();
    *rank = c.value()->rank();
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommUserRank)

extern "C" ncclResult_t chorusCommMemType(const ncclComm_t comm, chorusMemType_t* memType) {
  return guarded(comm, "chorusCommMemType", [&]() -> Status {
    if (memType == nullptr) return invalidArgument("chorusCommMemType: memType is NULL");
    Result<CommRef> c = usableComm(comm, "chorusCommMemType");
    if (!c.isOk()) return c.status();
    *memType = c.value()->isHost() ? chorusMemHost : chorusMemDevice;
    return Status::ok();
  });
}

extern "C" ncclResult_t chorusCommSetCompression(ncclComm_t comm, chorusCompression_t mode) {
  return guarded(comm, "chorusCommSetCompression", [&]() -> Status {
    const int m = static_cast<int>(mode);
    if (m < chorusCompressNone || m > chorusCompressFp8)
      return invalidArgument("chorusCommSetCompression: mode %d is not a chorusCompression_t", m);
    Result<CommRef> c = usableComm(comm, "chorusCommSetCompression");
    if (!c.isOk()) return c.status();
    if (!c.value()->isHost())
      return invalidUsage(
          "chorusCommSetCompression: compression is for host communicators (comm is a device "
          "one)");
    // Calls queued before this one keep the mode they were made with.
    quiesce(comm);
    c.value()->setCompression(m);
    return Status::ok();
  });
}

extern "C" ncclResult_t chorusCommCompressionStats(const ncclComm_t comm,
                                                   unsigned long long* rawBytes,
                                                   unsigned long long* wireBytes) {
  return guarded(comm, "chorusCommCompressionStats", [&]() -> Status {
    if (rawBytes == nullptr) return invalidArgument("chorusCommCompressionStats: rawBytes is NULL");
    if (wireBytes == nullptr)
      return invalidArgument("chorusCommCompressionStats: wireBytes is NULL");
    Result<CommRef> c = usableComm(comm, "chorusCommCompressionStats");
    if (!c.isOk()) return c.status();
    uint64_t raw = 0, wire = 0;
    c.value()->compressionStats(&raw, &wire);
    *rawBytes = raw;
    *wireBytes = wire;
    return Status::ok();
  });
}

// Registration only hints that a buffer will be reused; host communicators copy through their
// own FIFOs, so the handle just records the range for Deregister to check.
struct ChorusRegistration {
  ncclComm_t comm;
  void* buff;
  size_t size;
};

extern "C" ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size,
                                          void** handle) {
  return guarded(comm, "ncclCommRegister", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommRegister");
    if (!c.isOk()) return c.status();
    if (handle == nullptr) return invalidArgument("ncclCommRegister: handle is NULL");
    if (buff == nullptr && size > 0) return invalidArgument("ncclCommRegister: buff is NULL");
    *handle = new ChorusRegistration{comm, buff, size};
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommRegister)

extern "C" ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle) {
  return guarded(comm, "ncclCommDeregister", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommDeregister");
    if (!c.isOk()) return c.status();
    if (handle == nullptr) return invalidArgument("ncclCommDeregister: handle is NULL");
    auto* reg = static_cast<ChorusRegistration*>(handle);
    if (reg->comm != comm)
      return invalidArgument("ncclCommDeregister: handle was registered on another communicator");
    delete reg;
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommDeregister)

// A window handle is the communicator's HostWindow; Deregister looks it up before using it.
extern "C" ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size,
                                                ncclWindow_t* win, int winFlags) {
  return guarded(comm, "ncclCommWindowRegister", [&]() -> Status {
    if (win == nullptr) return invalidArgument("ncclCommWindowRegister: win is NULL");
    *win = nullptr;
    Result<CommRef> c = usableComm(comm, "ncclCommWindowRegister");
    if (!c.isOk()) return c.status();
    quiesce(comm);
    if (buff == nullptr && size > 0) return invalidArgument("ncclCommWindowRegister: buff is NULL");
    if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0)
      return invalidArgument(
          "ncclCommWindowRegister: winFlags 0x%x: expected NCCL_WIN_DEFAULT or "
          "NCCL_WIN_COLL_SYMMETRIC",
          static_cast<unsigned>(winFlags));
    if (!c.value()->isHost())
      return notImplemented("ncclCommWindowRegister on a device communicator");
    Result<const HostWindow*> w = c.value()->registerWindow(buff, size, winFlags);
    if (!w.isOk()) return w.status();
    *win = reinterpret_cast<ncclWindow_t>(const_cast<HostWindow*>(w.value()));
    return Status::ok();
  });
}
NCCL_ALIAS(ncclCommWindowRegister)

extern "C" ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return guarded(comm, "ncclCommWindowDeregister", [&]() -> Status {
    Result<CommRef> c = usableComm(comm, "ncclCommWindowDeregister");
    if (!c.isOk()) return c.status();
    quiesce(comm);
    if (win == nullptr) return invalidArgument("ncclCommWindowDeregister: win is NULL");
    return c.value()->deregisterWindow(reinterpret_cast<const HostWindow*>(win));
  });
}
NCCL_ALIAS(ncclCommWindowDeregister)

// Host communicators: page-aligned, zero-filled memory that the other processes of the host can
// map, so that windows over it are read in place (common/host_alloc.h).
extern "C" ncclResult_t pncclMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, "ncclMemAlloc", [&]() -> Status {
    if (ptr == nullptr) return invalidArgument("ncclMemAlloc: ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return Status::ok();
    Result<void*> p = sharedHostAlloc(size);
    if (!p.isOk())
      return p.status().code() == Code::kInvalidArgument
                 ? invalidArgument("ncclMemAlloc: size %zu is too large", size)
                 : p.status().withContext(formatString("ncclMemAlloc of %zu bytes", size));
    *ptr = p.value();
    return Status::ok();
  });
}
NCCL_ALIAS(ncclMemAlloc)

extern "C" ncclResult_t pncclMemFree(void* ptr) {
  return guarded(nullptr, "ncclMemFree", [&]() -> Status {
    if (ptr == nullptr) return Status::ok();
    if (!sharedHostFree(ptr))
      return invalidArgument("ncclMemFree: %p was not returned by ncclMemAlloc (or was freed)",
                             ptr);
    return Status::ok();
  });
}
NCCL_ALIAS(ncclMemFree)
