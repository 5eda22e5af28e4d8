// Tree all-reduce over the double binary tree (double_binary_tree.h), written once over a
// Primitives type so the CPU executor, a device kernel and a recording test harness can all run
// it. Header-only and free of containers, allocation and virtual calls so that it also compiles
// as device code.
//
// Tree 0 reduces and broadcasts the first half of the elements, tree 1 the second half. Within
// a tree the data moves in slot-sized chunks: partial sums flow up (leaves send their input,
// interior ranks add their children's partials to their input and pass the sum on), the root
// adds its children's partials to its input, finalises (Avg division) and writes the result,
// then the result flows down (each rank writes it and forwards it to its children). Every final
// value is computed once, at the root, and copied, so all ranks end with bitwise-identical
// results.
//
// Primitives. A tree Primitives type knows, for each tree, this rank's parent and its 0-2
// children and provides (offsets and sizes in elements; input offsets index the send buffer,
// output offsets the receive buffer; each call moves one FIFO slot on every link it uses):
//   bool recvReduceSend(int tree, size_t in, size_t n)
//       children's partials + input -> parent (a plain send of the input for a leaf)
//   bool recvReduceCopySend(int tree, size_t in, size_t out, size_t n)
//       root: children's partials + input, finalised -> output and every child
//   bool recvCopySend(int tree, size_t out, size_t n)
//       parent's result -> output and every child (a plain receive for a leaf)
// A primitive returns false when it failed; the algorithm stops at once.
//
// Pipelining. Step s sends chunk s up and, at a rank of depth d, passes chunk s - g*d down,
// where g = min(2, FIFO slots - 1): a rank at depth d gets chunk k back about 2d hops after it
// sent it up, so up and down traffic overlap along the tree instead of each chunk waiting for a
// round trip.
//
// Deadlock freedom: order the events by (step, tree, up before down, deeper first for up and
// shallower first for down). Every wait is for an event earlier in this order: a child's
// up of the same chunk, the parent's down g steps before, or, for a free slot, the consumption
// of a chunk at least FIFO-slots steps older (down: at the child's step k - slots + g(d+1),
// which precedes step k + gd because g < slots). So no cycle of waits can form, with any
// number of ranks and both trees interleaved on one thread.
#pragma once

#include <cstddef>

#include "algorithms/ring_prims.h"

namespace chorus {

struct TreeAllReduceShape {
  size_t count;       // elements of the whole buffer
  size_t chunkElems;  // elements one FIFO slot holds
  int fifoSlots;      // slots of every tree FIFO (at least 2)
  int depth[2];       // this rank's depth in tree 0 and tree 1 (0: the root)
  size_t align;       // tree 1's half starts on a multiple of this many elements (0, 1: anywhere)
};

template <class Prims>
CHORUS_HOST_DEVICE bool treeAllReduce(Prims& p, const TreeAllReduceShape& s) {
  size_t firstHalf = s.count - s.count / 2;
  if (s.align > 1) {
    firstHalf = (firstHalf + s.align - 1) / s.align * s.align;
    if (firstHalf > s.count) firstHalf = s.count;
  }
  const size_t begin[2] = {0, firstHalf};
  const size_t length[2] = {firstHalf, s.count - firstHalf};
  const size_t lagPerLevel = s.fifoSlots - 1 < 2 ? static_cast<size_t>(s.fifoSlots - 1) : 2;
  size_t chunks[2];
  size_t lag[2];
  size_t steps = 0;
  for (int t = 0; t < 2; ++t) {
    chunks[t] = (length[t] + s.chunkElems - 1) / s.chunkElems;
    lag[t] = lagPerLevel * static_cast<size_t>(s.depth[t]);
    if (chunks[t] > 0 && chunks[t] + lag[t] > steps) steps = chunks[t] + lag[t];
  }
  for (size_t step = 0; step < steps; ++step) {
    for (int t = 0; t < 2; ++t) {
      if (step < chunks[t]) {
        size_t off = begin[t] + step * s.chunkElems;
        size_t left = length[t] - step * s.chunkElems;
        size_t n = left < s.chunkElems ? left : s.chunkElems;
        bool ok =
            s.depth[t] == 0 ? p.recvReduceCopySend(t, off, off, n) : p.recvReduceSend(t, off, n);
        if (!ok) return false;
      }
      if (s.depth[t] > 0 && step >= lag[t] && step - lag[t] < chunks[t]) {
        size_t k = step - lag[t];
        size_t off = begin[t] + k * s.chunkElems;
        size_t left = length[t] - k * s.chunkElems;
        size_t n = left < s.chunkElems ? left : s.chunkElems;
        if (!p.recvCopySend(t, off, n)) return false;
      }
    }
  }
  return true;
}

}  // namespace chorus
