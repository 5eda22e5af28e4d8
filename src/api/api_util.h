// Helpers shared by the C API entry points (src/api/*.cc): error reporting with
// ncclGetLastError messages, argument checks, communicator creation.
#pragma once

#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "nccl.h"
#include "api/handle.h"
#include "common/status.h"
#include "core/comm.h"

// pnccl* holds the code; ncclX is a weak alias of pncclX so profiling tools can interpose.
#define NCCL_ALIAS(name) \
  extern "C" __attribute__((weak, alias("p" #name), visibility("default"))) decltype(p##name) name;

namespace chorus {

using CommRef = std::shared_ptr<Communicator>;

// The value a caller passed for an enum parameter. C lets any int through there, and in C++ a
// value outside the enum's range must not be read as the enum type, so an argument is read
// through its bytes until it is checked.
template <class E>
int enumArg(const E& e) {
  static_assert(std::is_enum<E>::value && sizeof(E) == sizeof(int), "an int-sized enum");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Records a failed Status for ncclGetLastError (process-wide and on comm) and maps its code.
ncclResult_t report(ncclComm_t comm, const Status& s);
std::string lastProcessError();

// Runs body, converting anything thrown into an error: no exception leaves the library.
template <class Body>
ncclResult_t guarded(ncclComm_t comm, const char* fn, Body&& body) noexcept {
  try {
    return report(comm, body());
  } catch (const std::bad_alloc&) {
    return report(comm, systemError("%s: out of host memory", fn));
  } catch (const std::exception& e) {
    return report(comm, internalError("%s: unexpected failure: %s", fn, e.what()));
  } catch (...) {
    return report(comm, internalError("%s: unexpected failure", fn));
  }
}

// The communicator behind a handle, or why it cannot be used; sets the log rank.
Result<CommRef> usableComm(ncclComm_t comm, const char* fn);
// The same for the length of one call, without a reference count (collectives).
Status pinComm(ncclComm_t comm, const char* fn, CommPin* pin);
Status checkType(const ncclDataType_t& type, const char* fn);
// count elements (times multiplier) of type at ptr: non-NULL unless empty, no size overflow.
Status checkBuffer(const void* ptr, size_t count, size_t multiplier, ncclDataType_t type,
                   const char* name, const char* fn);
// NCCL runs in place only when both pointers are equal; any other overlap is a user error.
Status checkOverlap(const void* a, size_t aBytes, const void* b, size_t bBytes, const char* fn);

Result<ncclUniqueId> makeUniqueId();

struct InitRequest {
  int nranks;
  int rank;
  ncclUniqueId id;
  CommOptions options;
};
// Options from an ncclConfig_t (may be NULL) and the host/device choice.
Result<CommOptions> optionsFrom(const ncclConfig_t* config, bool forceHost);
Status initComm(ncclComm_t handle, const InitRequest& req);
// Inside a group the init is deferred to ncclGroupEnd (so one thread can init several ranks);
// the handle exists at once and reports "initializing" until then. A non-blocking one
// (options.blocking false) runs on the handle's runner and returns kInProgress.
Status initOrDefer(ncclComm_t* out, const InitRequest& req);
// Frees the communicator; the handle stays behind as a tombstone. A non-blocking one's runner
// stops first: its queued work runs, or with discardQueued is dropped (abort).
void retire(ncclComm_t comm, bool discardQueued = false);
// Hands job to a non-blocking communicator's runner (kInProgress), refused once finalized.
Status submitAsync(ncclComm_t comm, const char* fn, std::function<Status()> job);
// Waits until a non-blocking communicator ran all its queued work (no-op when blocking): for
// calls that use the communicator from the caller's thread (split, shrink, windows).
void quiesce(ncclComm_t comm);
Status notImplemented(const char* fn);
// Runs a task now, hands it to a non-blocking communicator's runner, or queues it when a group
// is open.
Status runOrQueue(ncclComm_t comm, std::function<Status()> task);

}  // namespace chorus
