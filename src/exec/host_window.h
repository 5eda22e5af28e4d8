// Collectives on window buffers: host buffers that every rank of a one-host communicator
// registered together (ncclCommWindowRegister) over memory its peers can map (ncclMemAlloc), so
// that each rank reads its peers' send and receive buffers in place, with no staging copy:
//   all-reduce      one-shot while nranks x bytes fits in ctx.windowOneShotBytes: every rank
//                   reduces all inputs into its output; else two-shot: rank r reduces share r
//                   of every input into its output, then copies the other shares from the
//                   peers' outputs. When any rank makes the call in place (and it is below
//                   ctx.windowInPlaceBytes) the ranks run the usual algorithms instead.
//   all-gather      rank r copies every peer's input into its block of r's output
//   reduce-scatter  rank r reduces block r of every rank's input into its output
//   broadcast       every other rank copies the root's input
// The ranks meet on the communicator's direct region (transport/shm/direct_region.h), one
// sequence number per call: each rank publishes which windows and offsets its buffers are at
// and a description of the call, waits for every peer to do the same (a peer that made another
// call, or the direct all-reduce, fails the call on both), works, and before it returns waits
// until every peer that reads its buffers has finished, so the caller may reuse them at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/host_alloc.h"
#include "common/status.h"
#include "exec/host_executor.h"

namespace chorus {

class DirectRegion;

// The most ranks a window collective serves (more run the usual algorithms).
constexpr int kMaxWindowRanks = 256;
// Window ids stay below this (registration refuses more windows).
constexpr uint32_t kMaxWindowId = 0x7fffffffu;

// One window as this rank sees it.
struct HostWindow {
  uint32_t id = 0;       // the same on every rank: windows are numbered in registration order
  char* base = nullptr;  // this rank's registered range
  size_t bytes = 0;
  int flags = 0;
  // Every rank's range is mapped here (rankBase), so collectives may read them in place.
  bool shared = false;
  std::vector<const char*> rankBase;  // by rank: that rank's range in this address space
  std::vector<size_t> rankBytes;      // by rank
  std::vector<PeerMapping> maps;      // by rank (empty for this rank)
};

using HostWindowList = std::vector<std::unique_ptr<HostWindow>>;

// A buffer's place: the window holding it and its offset there (window null: none).
struct WindowRef {
  const HostWindow* window = nullptr;
  size_t offset = 0;
};

// Runs coll on window buffers, or sets *runUsual when the ranks, having met, found that the
// call runs faster through the usual algorithms (an all-reduce that some rank makes in place,
// below ctx.windowInPlaceBytes): the caller then runs those, on every rank alike. send and recv are
// where args' buffers lie (a broadcast's root needs only send, the other ranks only recv); windows
// are the communicator's (to resolve the peers' buffers). Every rank must make the same call, on
// window buffers too. A failure leaves the region unusable, as a failed direct all-reduce does. Not
// for PreMulSum.
Status hostWindowCollective(const ExecContext& ctx, Collective coll, const CollArgs& args,
                            const WindowRef& send, const WindowRef& recv,
                            const HostWindowList& windows, DirectRegion& region, bool* runUsual);

}  // namespace chorus
