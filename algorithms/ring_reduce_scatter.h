// Ring reduce-scatter: block c of every rank's input is reduced on its way around the ring and
// arrives complete at the rank that owns block c, which writes it to its output. Blocks move in
// slot-sized pieces so the ring stays pipelined.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

using RingReduceScatterShape = RingBlockedShape;

template <class Prims>
CHORUS_HOST_DEVICE bool ringReduceScatter(Prims& p, const RingReduceScatterShape& s) {
  const int n = s.nranks;
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    auto inOff = [&](int position) -> size_t {
      return static_cast<size_t>(s.ringRanks[position]) * s.blockStride + base;
    };
    if (!p.send(inOff((s.ringIndex + n - 1) % n), len)) return false;
    for (int j = 2; j < n; ++j) {
      if (!p.recvReduceSend(inOff((s.ringIndex + n - j) % n), len)) return false;
    }
    if (!p.recvReduceCopy(inOff(s.ringIndex), base, len)) return false;
  }
  return true;
}

}  // namespace chorus
