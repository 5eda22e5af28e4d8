// Direct all-reduce for ranks that share memory: every rank stages its input where every other
// rank can read it, then reads the peers' staged data in place. Written once over a Primitives
// type so the CPU executor, a device kernel and a recording test harness can all run it.
// Header-only and free of containers, allocation and virtual calls so that it also compiles as
// device code.
//
// The buffer is cut into chunks of at most chunkElems elements; each chunk is one sequence
// number of the region (see transport/shm/direct_region.h).
//   one-shot: each rank stages its chunk, then reduces all nranks staged chunks itself in rank
//     order 0, 1, ..., n-1 into its output and finalises. Every rank computes every element
//     from the same operands in the same order with the same kernel, so all ranks end with
//     bitwise-identical results. Latency: one exchange; work: n reads per element per rank.
//   two-shot: each rank stages its chunk but for its own share; rank r reduces share r of the
//     chunk (in rank order, its own operand from its input; finalised) into its result buffer
//     and its output, and publishes it; then every rank copies the peers' shares into its
//     output. Each final value is computed once and copied, so results are bitwise identical.
//     Work: about two reads per element per rank, for larger messages.
//
// Primitives. Offsets and sizes are in elements; `in` indexes the send buffer, `out` the
// receive buffer, `from` a chunk-sized staging or result buffer:
//   bool stage(size_t in, size_t n, size_t skip, size_t skipLen)
//       starts the next sequence: input[in, in+n) -> this rank's staging buffer [0, n), except
//       [skip, skip+skipLen), which nobody reads; then publishes it
//   bool reduceToOutput(int peer, size_t from, size_t out, size_t n, bool first, bool last)
//       waits for peer's staged chunk; output[out+k] = first ? op(staged[from+k])
//       : output[out+k] (op) staged[from+k], finalised (Avg division) when last. Every staged
//       operand is taken once as an input (PreMulSum scales it exactly once).
//   bool reduceToResult(int peer, size_t from, size_t out, size_t n, bool first, bool last)
//       the same into this rank's result buffer at [from, from+n), the operand of peer == this
//       rank read from its input at [in+from, ...) of the staged chunk; when last the finished
//       values also go to output[out, out+n)
//   bool publishResult()
//       the result buffer holds this rank's finished share of the current sequence
//   bool copyResult(int peer, size_t from, size_t out, size_t n)
//       waits for peer's published share; output[out+k] = peer's result[from+k]
//   bool finish()
//       this rank has finished reading every peer's buffers of the current sequence
// A primitive returns false when it failed; the algorithm stops at once.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct DirectAllReduceShape {
  size_t count;       // elements of the whole buffer
  size_t chunkElems;  // elements one staging buffer holds (at least 1)
  size_t alignElems;  // two-shot shares start at multiples of this (at least 1)
  int nranks;
  int rank;
  bool twoShot;
};

// Start of rank r's two-shot share of a chunk of len elements; share r is [begin(r), begin(r+1)).
// Shares are equal multiples of alignElems except the last ones, which may be short or empty.
CHORUS_HOST_DEVICE inline size_t directShareBegin(size_t len, int nranks, size_t alignElems,
                                                  int r) {
  size_t per = (len + static_cast<size_t>(nranks) - 1) / static_cast<size_t>(nranks);
  per = (per + alignElems - 1) / alignElems * alignElems;
  size_t b = per * static_cast<size_t>(r);
  return b < len ? b : len;
}

template <class Prims>
CHORUS_HOST_DEVICE bool directAllReduce(Prims& p, const DirectAllReduceShape& s) {
  const int n = s.nranks;
  for (size_t base = 0; base < s.count; base += s.chunkElems) {
    const size_t len = s.count - base < s.chunkElems ? s.count - base : s.chunkElems;
    if (!s.twoShot) {
      if (!p.stage(base, len, 0, 0)) return false;
      for (int q = 0; q < n; ++q)
        if (!p.reduceToOutput(q, 0, base, len, q == 0, q == n - 1)) return false;
    } else {
      const size_t mine = directShareBegin(len, n, s.alignElems, s.rank);
      const size_t mineEnd = directShareBegin(len, n, s.alignElems, s.rank + 1);
      // Only the peers read a rank's staged input, and only their shares: its own share stays
      // in its input buffer, where it reduces it from.
      if (!p.stage(base, len, mine, mineEnd - mine)) return false;
      // An empty share is neither computed nor published; every rank knows which are empty.
      // The last operand writes the finished share to the result buffer and the output.
      if (mineEnd > mine) {
        for (int q = 0; q < n; ++q)
          if (!p.reduceToResult(q, mine, base + mine, mineEnd - mine, q == 0, q == n - 1))
            return false;
        if (!p.publishResult()) return false;
      }
      // The peers' shares, next rank first: the nearest is the most likely to be ready.
      for (int j = 1; j < n; ++j) {
        const int q = (s.rank + j) % n;
        const size_t b = directShareBegin(len, n, s.alignElems, q);
        const size_t e = directShareBegin(len, n, s.alignElems, q + 1);
        if (e > b && !p.copyResult(q, b, base + b, e - b)) return false;
      }
    }
    if (!p.finish()) return false;
  }
  return true;
}

}  // namespace chorus
