// Recursive-doubling all-reduce: log2(p) exchanges of the whole buffer between partners
// rank ^ 2^k, where p is the largest power of two not above nranks; the ranks past p first fold
// their data into rank - p and get the result back from it at the end. Each exchange costs one
// message latency, against 2 (n - 1) for the ring and 2 log2(n) for a tree, so it serves small
// messages between hosts (one exchange for two ranks).
//
// Every rank ends with the same bits: both partners of an exchange combine the lower-ranked
// group's partial first, so all compute the same expression tree.
//
// Prims:
//   bool init()                      output = this rank's input (scaled by its PreMulSum scalar)
//   bool send(peer, off, n)          output[off, off + n) to peer
//   bool recvReduce(peer, off, n, mineFirst, last)
//                                    output[off, +n) = mineFirst ? op(output, received)
//                                                                : op(received, output),
//                                    finalised (Avg divides) when last
//   bool recvCopy(peer, off, n)      output[off, +n) = received
// Sends of one chunk precede its receives on both partners, so a FIFO of one slot suffices.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct RdAllReduceShape {
  size_t count;       // elements
  size_t chunkElems;  // elements per message (at least 1)
  int nranks;
  int rank;
};

CHORUS_HOST_DEVICE inline int rdPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// The i-th partner rank r of n exchanges with in rdAllReduce, in the order of its exchanges
// (-1 past the last): a folded rank's partner below; else the folded rank above it, if any,
// then r ^ 2^k for each step k.
CHORUS_HOST_DEVICE inline int rdPartner(int n, int r, int i) {
  const int pw = rdPowerOfTwo(n);
  if (r >= pw) return i == 0 ? r - pw : -1;
  if (r + pw < n) {
    if (i == 0) return r + pw;
    --i;
  }
  return (1 << i) < pw ? r ^ (1 << i) : -1;
}

template <class Prims>
CHORUS_HOST_DEVICE bool rdAllReduce(Prims& p, const RdAllReduceShape& s) {
  const int n = s.nranks, r = s.rank;
  const int pw = rdPowerOfTwo(n);
  const int extra = n - pw;
  int steps = 0;
  while ((1 << steps) < pw) ++steps;
  if (!p.init()) return false;
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    const size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    if (r >= pw) {
      // Folded: hand the data to the partner below and take the result back.
      if (!p.send(r - pw, base, len)) return false;
      if (!p.recvCopy(r - pw, base, len)) return false;
      continue;
    }
    if (r < extra && !p.recvReduce(r + pw, base, len, true, steps == 0)) return false;
    for (int k = 0; k < steps; ++k) {
      const int partner = r ^ (1 << k);
      if (!p.send(partner, base, len)) return false;
      if (!p.recvReduce(partner, base, len, r < partner, k == steps - 1)) return false;
    }
    if (r < extra && !p.send(r + pw, base, len)) return false;
  }
  return true;
}

}  // namespace chorus
