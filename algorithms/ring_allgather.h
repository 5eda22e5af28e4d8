// Ring all-gather: each rank's block travels nranks-1 hops around the ring, copied into every
// output on the way. Blocks move in slot-sized pieces so the ring stays pipelined.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

using RingAllGatherShape = RingBlockedShape;

template <class Prims>
CHORUS_HOST_DEVICE bool ringAllGather(Prims& p, const RingAllGatherShape& s) {
  const int n = s.nranks;
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    auto outOff = [&](int position) -> size_t {
      return static_cast<size_t>(s.ringRanks[position]) * s.blockStride + base;
    };
    if (!p.copySend(base, outOff(s.ringIndex), len)) return false;
    for (int j = 1; j < n - 1; ++j) {
      if (!p.recvCopySend(outOff((s.ringIndex + n - j) % n), len)) return false;
    }
    if (!p.recv(outOff((s.ringIndex + 1) % n), len)) return false;
  }
  return true;
}

}  // namespace chorus
