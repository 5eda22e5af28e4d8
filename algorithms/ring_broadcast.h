// Broadcast along the ring, starting at the root: the root sends, each following rank copies
// what it receives into its output and forwards it, and the rank before the root only
// receives. Pieces of one slot keep every link of the chain busy at once.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct RingBroadcastShape {
  size_t count;       // elements broadcast
  size_t chunkElems;  // elements one FIFO slot holds
  int nranks;
  int ringIndex;     // this rank's position in the ring
  int rootIndex;     // the root's position in the ring
  bool rootInPlace;  // the root's input already is its output
};

template <class Prims>
CHORUS_HOST_DEVICE bool ringBroadcast(Prims& p, const RingBroadcastShape& s) {
  const int n = s.nranks;
  const int hops = (s.ringIndex - s.rootIndex + n) % n;  // distance from the root
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    bool ok;
    if (hops == 0)
      ok = s.rootInPlace ? p.send(base, len) : p.copySend(base, base, len);
    else if (hops == n - 1)
      ok = p.recv(base, len);
    else
      ok = p.recvCopySend(base, len);
    if (!ok) return false;
  }
  return true;
}

}  // namespace chorus
