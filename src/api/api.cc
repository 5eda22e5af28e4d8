// The NCCL C API: the only extern "C" code of Chorus. Every entry point checks its arguments,
// forwards to the core, and turns a Status into an ncclResult_t plus a message for
// ncclGetLastError. Nothing thrown inside may cross this boundary.
#include "nccl.h"
#include "chorus.h"

#include <string>

#include "api/api_util.h"
#include "chorus_config.h"
#include "common/log.h"

namespace {
thread_local std::string tLastErrorCopy;  // keeps ncclGetLastError's pointer valid
}  // namespace

using namespace chorus;  // NOLINT: the rest of the file is the C API only

// ---------------------------------------------------------------------------------------------
// Versions, errors, ids
// ---------------------------------------------------------------------------------------------

extern "C" ncclResult_t pncclGetVersion(int* version) {
  if (version == nullptr)
    return report(nullptr, invalidArgument("ncclGetVersion: version is NULL"));
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion)

extern "C" const char* pncclGetErrorString(ncclResult_t result) {
  switch (enumArg(result)) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with CHORUS_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with CHORUS_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the Chorus developers";
    case ncclInvalidArgument:
      return "invalid argument (run with CHORUS_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with CHORUS_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "operation in progress";
    default:
      return "unknown result code";
  }
}
NCCL_ALIAS(ncclGetErrorString)

extern "C" const char* pncclGetLastError(ncclComm_t comm) {
  try {
    if (CommRef c = liveComm(comm)) {
      std::string e = c->lastError();
      if (!e.empty()) {
        tLastErrorCopy = e;
        return tLastErrorCopy.c_str();
      }
    }
    tLastErrorCopy = lastProcessError();
  } catch (...) {
    return "";
  }
  return tLastErrorCopy.c_str();
}
NCCL_ALIAS(ncclGetLastError)

extern "C" void pncclResetDebugInit() {
  logReinit();
}
NCCL_ALIAS(ncclResetDebugInit)

extern "C" ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId) {
  return guarded(nullptr, "ncclGetUniqueId", [&]() -> Status {
    if (uniqueId == nullptr) return invalidArgument("ncclGetUniqueId: uniqueId is NULL");
    Result<ncclUniqueId> id = makeUniqueId();
    if (!id.isOk()) return id.status().withContext("ncclGetUniqueId");
    *uniqueId = id.value();
    return Status::ok();
  });
}
NCCL_ALIAS(ncclGetUniqueId)

extern "C" const char* chorusGetVersionString(void) {
  return CHORUS_VERSION;
}
