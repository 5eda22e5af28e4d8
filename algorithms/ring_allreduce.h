// Ring all-reduce, written once over a Primitives type so the CPU executor, a device kernel and
// a recording test harness can all run it. Header-only and free of containers, allocation and
// virtual calls so that it also compiles as device code.
//
// The slice is cut into loops of nranks chunks. In each loop a rank first sends one chunk, then
// for nranks-2 steps adds its input to what it received and passes it on; the chunk that
// arrives complete it finalises (writing its output and forwarding), and the remaining
// nranks-1 steps copy finished chunks around the ring. Every final value is computed by one
// rank and then copied, so all ranks end with bitwise-identical results.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct RingAllReduceShape {
  size_t count;       // elements in this channel's slice
  size_t chunkElems;  // elements one FIFO slot holds
  int nranks;
  int ringIndex;  // this rank's position in the ring
};

// Uses the ring primitives described in ring_prims.h; input and output offsets coincide.
template <class Prims>
CHORUS_HOST_DEVICE bool ringAllReduce(Prims& p, const RingAllReduceShape& s) {
  const int n = s.nranks;
  const size_t loopElems = s.chunkElems * static_cast<size_t>(n);
  for (size_t base = 0; base < s.count; base += loopElems) {
    size_t remaining = s.count - base;
    size_t chunk = (remaining + n - 1) / n;
    if (chunk > s.chunkElems) chunk = s.chunkElems;
    // Offset and length of chunk c within this loop (the last chunks may be short or empty).
    auto off = [&](int c) -> size_t {
      size_t o = static_cast<size_t>(c) * chunk;
      return base + (o < remaining ? o : remaining);
    };
    auto len = [&](int c) -> size_t {
      size_t o = static_cast<size_t>(c) * chunk;
      if (o >= remaining) return 0;
      return remaining - o < chunk ? remaining - o : chunk;
    };
    int c = (s.ringIndex + n - 1) % n;
    if (!p.send(off(c), len(c))) return false;
    for (int j = 2; j < n; ++j) {
      c = (s.ringIndex + n - j) % n;
      if (!p.recvReduceSend(off(c), len(c))) return false;
    }
    c = s.ringIndex;
    if (!p.recvReduceCopySend(off(c), off(c), len(c))) return false;
    for (int j = 1; j < n - 1; ++j) {
      c = (s.ringIndex + n - j) % n;
      if (!p.recvCopySend(off(c), len(c))) return false;
    }
    c = (s.ringIndex + 1) % n;
    if (!p.recv(off(c), len(c))) return false;
  }
  return true;
}

}  // namespace chorus
