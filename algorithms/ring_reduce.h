// Reduce along the ring towards the root: the rank after the root sends its input, each next
// rank adds its own and forwards, and the root adds its input last and writes the result.
// Pieces of one slot keep every link of the chain busy at once.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct RingReduceShape {
  size_t count;       // elements reduced
  size_t chunkElems;  // elements one FIFO slot holds
  int nranks;
  int ringIndex;  // this rank's position in the ring
  int rootIndex;  // the root's position in the ring
};

template <class Prims>
CHORUS_HOST_DEVICE bool ringReduce(Prims& p, const RingReduceShape& s) {
  const int n = s.nranks;
  const int hops = (s.ringIndex - s.rootIndex + n) % n;  // 1 starts the chain, 0 is the root
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    bool ok;
    if (hops == 0)
      ok = p.recvReduceCopy(base, base, len);
    else if (hops == 1)
      ok = p.send(base, len);
    else
      ok = p.recvReduceSend(base, len);
    if (!ok) return false;
  }
  return true;
}

}  // namespace chorus
