// The constants of the selector's cost model, all in one place. The built-in figures were fitted
// to all_reduce_perf runs of each algorithm forced with CHORUS_ALGO (2 and 4 ranks on a 2-core
// AMD EPYC host, 8 B to 64 MiB); the network ones follow iperf3 between two network namespaces
// (one TCP stream about 1.2 GB/s, four about 3 GB/s). Each algorithm's predicted time is built
// from a latency term (hand-offs between ranks, each costing a step latency) and a bandwidth
// term (bytes each rank moves divided by a throughput). Machines differ: `chorus-tune
// --calibrate` measures the algorithms on the machine it runs on and fits these figures to what
// it measured, into a tuning file that CHORUS_TUNING_FILE points the selector (and chorus-tune)
// to. CHORUS_DEBUG_SUBSYS=TUNING shows what the model predicts.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

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
  // Beyond the caches: of a call whose buffers on a host (every local rank's input and output)
  // exceed cacheMiB, the share that does not fit streams at dramGBps per core at most (reads
  // plus writes). A ring's or tree's fused reduce-copy step makes ringTraffic bytes of memory
  // traffic per byte of payload there: about 3 (its input, the peer's data, its output), more
  // where writes first read their lines or the cores contend for the memory.
  double cacheMiB = 32.0;
  double dramGBps = 40.0;
  double ringTraffic = 3.0;
  // A tree step's time per byte against a ring step's (at least 1: the ring is bandwidth
  // optimal). Its steps wait on two children and a parent in turn, with smaller pieces.
  double treeCost = 1.0;
  // Scheduling: a hand-off whose peer is not running (more ranks than cores) waits for the peer
  // to get the core, which the waiting rank yields to it after a short spin: per rank ahead of
  // the peer on its core.
  double wakeUs = 1.5;
  // The same through the network: the peer's proxy thread and its socket's wake-up too.
  double netWakeUs = 1.5;
  // Ranks that outnumber the cores: the share of its part of the cores a rank turns into
  // throughput (at most 1; switching between ranks, their caches and sockets, costs the rest).
  double oversubShare = 1.0;
  // Of that, what a ring through sockets keeps (at most 1): every byte passes every rank on its
  // way, each of them running only part of the time, where an exchange (recursive doubling)
  // waits for one partner at a time.
  double netRingShare = 1.0;
  // Starting a channel's worker thread for one collective (wake, then join at the end).
  double channelLaunchUs = 8.0;
};

// One figure of the model: its name in tuning files, and what it means.
struct CostField {
  const char* name;
  double CostModel::*member;
  const char* doc;
  bool probed = false;  // measured directly by the calibration's probe, not fitted
  // Where the figure means something, the fit keeps it (0: no bound).
  double lowest = 0;
  double highest = 0;
  bool within(double v) const {
    return (lowest <= 0 || v >= lowest) && (highest <= 0 || v <= highest);
  }
  double clamp(double v) const {
    if (lowest > 0 && v < lowest) return lowest;
    return highest > 0 && v > highest ? highest : v;
  }
};
const std::vector<CostField>& costFields();

// The model of this process: the built-in figures, or those of the tuning file CHORUS_TUNING_FILE
// names (read once, at the first use). A file that cannot be used leaves the built-in figures
// and costModelStatus() says why (communicator init then fails with that reason).
const CostModel& costModel();
Status costModelStatus();

// A tuning file: lines "name value" ('#' starts a comment), each name a CostField's, each value
// a positive number; figures it leaves out keep the built-in value. Errors name the file, the
// line and what is wrong.
Result<CostModel> readTuningFile(const std::string& path);
// Writes every figure, each with its meaning, after the comment lines given.
Status writeTuningFile(const std::string& path, const CostModel& model,
                       const std::vector<std::string>& comments);

}  // namespace chorus
