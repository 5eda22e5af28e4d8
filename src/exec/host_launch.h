// One launch: the collectives a communicator runs together (one call, or every collective of a
// group), each with the algorithm and channel count the selector chose. Ring work is split
// across channels, channel 0 on the calling thread and the others on the channel workers, which
// are woken once for the whole launch; tree and direct work runs on the calling thread. The
// collectives complete in order: no channel starts collective k+1 before every channel of this
// rank finished collective k, so a collective may read what an earlier one in the group wrote.
#pragma once

#include <vector>

#include "algorithms/algorithm.h"
#include "exec/host_executor.h"
#include "exec/host_tree.h"
#include "exec/host_window.h"

namespace chorus {

class DirectRegion;

struct HostWork {
  Collective coll = Collective::kAllReduce;
  Algorithm algo = Algorithm::kRing;
  CollArgs args;  // args.nchannels: ring channels (1 for other algorithms)
  // Set when the buffers lie in shared windows and the call reads them in place instead
  // (host_window.h); algo is then unused.
  bool windowed = false;
  WindowRef sendWindow;
  WindowRef recvWindow;
  // The caller's cudaStream_t (device communicators queue the call there; host ones ignore it).
  void* stream = nullptr;
};

// What the launch's algorithms run over; trees and direct may be null when no work uses them.
struct LaunchResources {
  TreeLinks* trees = nullptr;
  DirectRegion* direct = nullptr;
  SlotStreamPolicy* directStores = nullptr;  // how this rank writes the region's buffers
  std::vector<P2pConnection>* rd = nullptr;  // by peer: the recursive-doubling partners
  const HostWindowList* windows = nullptr;   // the communicator's windows
};

// Runs works[0..n) in order (all channels through one call before the next).
Status hostLaunch(const ExecContext& ctx, const HostWork* works, size_t n,
                  const LaunchResources& resources);

}  // namespace chorus
