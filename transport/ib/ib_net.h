// Chorus's InfiniBand / RoCE network: the NetPlugin interface (net_plugin/net_plugin.h) over
// verbs, so the plugin transport carries FIFO slots over it like over any NCCL net plugin. Each
// active HCA port the filters allow is one device. A connection is set up over a TCP socket
// (the handle holds the listener's address) and runs 1 to 16 reliable-connected queue pairs.
// A receive writes a FIFO entry (address, key, size, tag) into its sender's memory with an RDMA
// write; the matching send writes the data straight into the receive buffer with RDMA writes
// with immediate (the size), one per queue pair, which complete the receive.
#pragma once

#include <memory>

#include "common/status.h"
#include "transport/ib/verbs.h"
#include "transport/net_plugin/net_plugin.h"

namespace chorus {

// Finds the devices through verbs and opens them; an error says why the IB network cannot be
// used (no device, every port filtered out or down, an option out of range).
Result<std::unique_ptr<NetPlugin>> makeIbNet(const VerbsApi* verbs);

}  // namespace chorus
