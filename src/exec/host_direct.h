// Direct all-reduce on host buffers for ranks that share memory: the executor entry point that
// runs algorithms/direct_allreduce.h over a DirectRegion.
#pragma once

#include "common/status.h"
#include "exec/host_executor.h"
#include "transport/shm/direct_region.h"

namespace chorus {

// All-reduce through region, one-shot or two-shot (see direct_allreduce.h). The region must
// belong to this communicator (ctx.rank and ctx.nranks); any sequence of calls, modes and sizes
// may share it as long as every rank makes the same calls. Uses ctx.timeoutSeconds, ctx.abort
// and ctx.spinCount for every wait; a failure leaves the region unusable (later calls fail).
// stores chooses, and learns, how this rank writes the buffers its peers read (staged chunks,
// two-shot results; see slot_stream.h); it lives as long as the region.
Status hostAllReduceDirect(const ExecContext& ctx, const CollArgs& args, DirectRegion& region,
                           bool twoShot, SlotStreamPolicy& stores);

}  // namespace chorus
