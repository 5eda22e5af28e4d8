// The constants of the selector's cost model, all in one place. The shared-memory and direct
// figures were fitted to all_reduce_perf runs of each algorithm forced with CHORUS_ALGO (2 and 4
// ranks on a 2-core host, 8 B to 64 MiB); the network ones follow iperf3 between two network
// namespaces (one TCP stream about 1.2 GB/s, four about 3 GB/s). Each algorithm's predicted time is
// built from a latency term (hand-offs between ranks, each costing a step latency) and a bandwidth
// term (bytes each rank moves divided by a throughput). The figures describe a current x86 server;
// CHORUS_DEBUG_SUBSYS=TUNING shows what they predict and chorus-tune prints the resulting decision
// tables.
#pragma once

namespace chorus {

struct CostModel {
  // Shared memory between ranks of one host (FIFO connectors).
  double shmStepUs = 0.7;  // one FIFO hand-off: post, the peer sees it, consumes it
  double shmGBps = 4.0;    // fused reduce-copy throughput of one ring channel
  double shmMaxGBps = 20;  // what all channels of a rank together can reach (memory bound)
  // The network (TCP sockets through the proxy).
  double netStepUs = 20.0;  // one hand-off through the proxy and the kernel
  double netGBps = 1.2;     // one channel (one stream)
  double netMaxGBps = 3.0;  // all channels of a rank together
  // Direct algorithms: ranks read each other's staged inputs from a shared region.
  double directSyncUs = 0.5;  // publishing a flag and seeing every peer's
  double memGBps = 18.0;      // one core streaming bytes read plus bytes written
  // Scheduling: a hand-off whose peer is not running (more ranks than cores) waits for the peer
  // to get the core, which the waiting rank yields to it after a short spin.
  double wakeUs = 3.0;
  // Starting a channel's worker thread for one collective (wake, then join at the end).
  double channelLaunchUs = 8.0;
};

// The model every communicator and chorus-tune use.
inline const CostModel& costModel() {
  static const CostModel model;
  return model;
}

}  // namespace chorus
