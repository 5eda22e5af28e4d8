// Group calls (ncclGroupStart/End): per calling thread, collectives and inits are queued and run
// at the outermost ncclGroupEnd. Work for one communicator runs in order on one thread; work
// for several communicators runs concurrently, one thread each, since their ranks wait on
// each other.
#pragma once

#include <functional>

#include "common/status.h"

namespace chorus {

bool groupActive();
void groupStart();
// Key identifies the communicator whose ordered queue the task joins.
void groupEnqueue(const void* key, std::function<Status()> task);
// Ends one nesting level; at the outermost runs every queued task and returns the first error.
Status groupEnd();

}  // namespace chorus
