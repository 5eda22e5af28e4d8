// What each thread of a collective waits for, kept for the timeout message and for dumps of
// pending operations (CHORUS_DUMP, read by tools/chorus-waitfor): the algorithm, the step it
// reached, the peer it waits on and for what, and the bytes it moved so far. Executors count
// steps and bytes in their own variables and write the note only just before a wait that may
// block (the data or room was not there at the first look), so calls that never wait pay
// nothing; a dump reads the notes from another thread at any time.
#pragma once

#include <atomic>
#include <cstdint>

#include "transport/connector.h"

namespace chorus {

enum class WaitFor : uint32_t {
  kNothing = 0,
  kData,     // a slot from the peer
  kRoom,     // a free slot in the FIFO to the peer
  kStaged,   // the peer's staged input in the shared region
  kReduced,  // the peer's reduced share in the shared region
  kDone,     // the peer to finish reading this rank's buffers
};
const char* waitForName(WaitFor w);

// Where a thread of a call is: kept by the executor, copied into its note before a wait.
struct WaitPlace {
  const char* algo = "";    // a static name: "ring", "tree", ...
  uint64_t launch = 0;      // the communicator's launch it belongs to (ExecContext::launch)
  uint32_t step = 0;        // steps begun on this channel in this call
  uint64_t bytesDone = 0;   // bytes received (direct: of chunks finished) on this channel
  uint64_t bytesTotal = 0;  // bytes of the call on this channel (its slice)
};

struct alignas(kCacheLine) WaitNote {
  std::atomic<const char*> algo{""};
  std::atomic<uint64_t> launch{0};
  std::atomic<int32_t> peer{-1};
  std::atomic<uint32_t> waitFor{0};
  std::atomic<uint32_t> step{0};
  std::atomic<uint64_t> bytesDone{0};
  std::atomic<uint64_t> bytesTotal{0};

  void waiting(const WaitPlace& at, int p, WaitFor w) {
    algo.store(at.algo, std::memory_order_relaxed);
    launch.store(at.launch, std::memory_order_relaxed);
    step.store(at.step, std::memory_order_relaxed);
    bytesDone.store(at.bytesDone, std::memory_order_relaxed);
    bytesTotal.store(at.bytesTotal, std::memory_order_relaxed);
    peer.store(p, std::memory_order_relaxed);
    waitFor.store(static_cast<uint32_t>(w), std::memory_order_relaxed);
  }
};

// Where executors run without a context that keeps notes (some tests): one shared note.
WaitNote& spareWaitNote();

}  // namespace chorus
