// The primitive steps ring algorithms are written in. A Primitives type provides, with
// offsets and sizes in elements (input offsets into the send buffer, output offsets into the
// receive buffer):
//   bool send(size_t in, size_t n)                       input -> next
//   bool copySend(size_t in, size_t out, size_t n)       input -> output and next
//   bool recvReduceSend(size_t in, size_t n)             prev + input -> next
//   bool recvReduceCopySend(size_t in, size_t out, size_t n)
//                                                        prev + input -> output and next (final)
//   bool recvReduceCopy(size_t in, size_t out, size_t n) prev + input -> output (final)
//   bool recvCopySend(size_t out, size_t n)              prev -> output and next
//   bool recv(size_t out, size_t n)                      prev -> output
// Each step moves one FIFO slot. A primitive returns false when it failed; the algorithm
// stops at once. Headers using it stay free of containers, allocation and virtual calls so
// that they also compile as device code.
#pragma once

#ifndef CHORUS_HOST_DEVICE
#if defined(__CUDACC__)
#define CHORUS_HOST_DEVICE __host__ __device__
#else
#define CHORUS_HOST_DEVICE
#endif
#endif

#include <cstddef>

namespace chorus {

// The shape of a ring collective over per-rank blocks (all-gather output, reduce-scatter
// input): block c belongs to ringRanks[c] and starts blockStride elements after block c-1.
struct RingBlockedShape {
  size_t count;       // elements of each rank's block this channel moves
  size_t chunkElems;  // elements one FIFO slot holds
  int nranks;
  int ringIndex;         // this rank's position in the ring
  const int* ringRanks;  // rank at each ring position (block c belongs to ringRanks[c])
  size_t blockStride;    // elements from one rank's block to the next (count, unless this
                         // channel moves only a slice of every block)
};

}  // namespace chorus
