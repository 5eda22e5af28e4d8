// Group calls (ncclGroupStart/End): per calling thread, collectives and inits are queued and run
// at the outermost ncclGroupEnd; a communicator's collectives run as one launch. Work for one
// communicator runs in order on one thread; work for several communicators runs concurrently, one
// thread each, since their ranks wait on each other.
#pragma once

#include <functional>
#include <vector>

#include "common/status.h"
#include "exec/host_executor.h"
#include "exec/host_launch.h"

namespace chorus {

bool groupActive();
void groupStart();
// Key identifies the communicator whose ordered queue the task joins.
void groupEnqueue(const void* key, std::function<Status()> task);
// Collectives of one communicator gather into one launch, run by runner in call order after
// the communicator's other queued tasks (its init) and before its point-to-point ops.
using CollRunner = std::function<Status(std::vector<HostWork>&)>;
void groupEnqueueColl(const void* key, const HostWork& work, const CollRunner& runner);
// Point-to-point ops of one communicator gather into one batch, run by runner after the
// communicator's other queued tasks, so that all its sends and receives progress together.
using P2pRunner = std::function<Status(const std::vector<P2pOp>&)>;
void groupEnqueueP2p(const void* key, const P2pOp& op, const P2pRunner& runner);
// Ends one nesting level; at the outermost runs every queued task and returns the first error.
// A non-blocking communicator's tasks go to its runner instead (see setGroupAsyncHandoff):
// then, when nothing else failed, kInProgress.
Status groupEnd();

// Set once by the API layer: isAsync(key) says whether key's communicator is non-blocking, and
// submit hands it one job that runs all of key's queued tasks in order (kInProgress, or why
// not).
using GroupIsAsync = bool (*)(const void* key);
using GroupSubmit = Status (*)(const void* key, std::function<Status()> job);
void setGroupAsyncHandoff(GroupIsAsync isAsync, GroupSubmit submit);

}  // namespace chorus
