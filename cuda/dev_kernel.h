// The body of the collective kernel: block `channel` of a launch runs that channel's share of
// every work in order, with the ring algorithms (algorithms/ring_*.h) over the device ring
// primitives. One instantiation per (element format, reduction kind); the collective and the
// protocol are read from each work. The CPU runs the same body in tests (Block: dev_prims.h).
#pragma once

#include <cstring>
#include <type_traits>

#include "algorithms/ring_allgather.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/ring_broadcast.h"
#include "algorithms/ring_reduce.h"
#include "algorithms/ring_reduce_scatter.h"
#include "algorithms/rd_allreduce.h"
#include "algorithms/tree_allreduce.h"
#include "cuda/dev_direct.h"
#include "cuda/dev_prims.h"
#include "cuda/dev_rd.h"
#include "cuda/dev_tree.h"

namespace chorus {
namespace dev {

// Every block of the launch waits here until all have arrived. Each barrier adds nchannels to
// the counter and every launch runs nchannels blocks, so the counter is a multiple of it at
// each barrier's start, whatever ran before (also when a CUDA graph replays the launch).
template <class Block>
CHORUS_HD bool gridBarrier(const Comm& comm, Block& b) {
  b.sync();
  bool aborted = false;
  if (b.tid == 0) {
    // Releases what this block wrote in the earlier works (the sync gathered its threads'
    // writes), and after the wait acquires what the others wrote.
    fenceDevice();
    const uint64_t n = static_cast<uint64_t>(comm.nchannels);
    uint64_t old = fetchAdd(comm.barrier, 1);
    uint64_t target = old - old % n + n;
    uint32_t spins = 0;
    while (loadAcquire(comm.barrier) < target) {
      if ((++spins & 63u) == 0 && comm.abortFlag != nullptr && *comm.abortFlag != 0) {
        flagKernelError(comm);
        aborted = true;
        break;
      }
      pollPause();
    }
    fenceDevice();
  }
  return !b.syncOr(aborted);
}

// The PreMulSum scalar of a work, decoded.
template <class F>
CHORUS_HD typename F::Compute workScalar(const Work& w) {
  using S = typename F::Store;
  S v;
  if (w.scalarPtr != nullptr) {
    v = *static_cast<const S*>(w.scalarPtr);
  } else {
    uint64_t bits = w.scalarBits;
    memcpy(&v, &bits, sizeof v);  // the encoding sits in the low bytes
  }
  return F::decode(v);
}

// One rank alone: out = finalize(op(in)), this channel's slice.
template <class F, RedKind K, class Block>
CHORUS_HD void runLocal(const Comm& comm, const Work& w, int channel, Block& b) {
  using S = typename F::Store;
  uint64_t begin, end;
  channelSliceOf(w.count, sizeof(S), channel, w.nchannels, &begin, &end);
  const bool reduce =
      w.coll == Coll::kAllReduce || w.coll == Coll::kReduceScatter || w.coll == Coll::kReduce;
  const S* in = static_cast<const S*>(w.sendbuff);
  S* out = static_cast<S*>(w.recvbuff);
  const typename F::Compute scalar = workScalar<F>(w);
  for (uint64_t i = begin + static_cast<uint64_t>(b.tid); i < end;
       i += static_cast<uint64_t>(b.nthreads)) {
    S v = in[i];
    if (reduce && K == RedKind::kPreMulSum) {
      v = applyStep<F, Step::kScale>(v, v, scalar, comm.nranks);
    } else if (reduce && K == RedKind::kAvg) {
      v = applyStep<F, Step::kDivide>(v, v, scalar, comm.nranks);
    }
    out[i] = v;
  }
}

template <class F, RedKind K, Proto P, class Block>
CHORUS_HD bool runRing(const Comm& comm, const Work& w, int channel, Block& b) {
  using S = typename F::Store;
  const Channel& ch = comm.channels[channel];
  uint64_t begin, end;
  channelSliceOf(w.count, sizeof(S), channel, w.nchannels, &begin, &end);
  if (begin == end) return true;
  const char* input = static_cast<const char*>(w.sendbuff) + begin * sizeof(S);
  char* output = static_cast<char*>(w.recvbuff) + begin * sizeof(S);
  RingPrims<F, K, P, Block> p(comm, ch, input, output, workScalar<F>(w), b);
  const size_t chunk = p.chunkElems();
  bool ok = true;
  switch (w.coll) {
    case Coll::kAllReduce: {
      RingAllReduceShape s{end - begin, chunk, comm.nranks, comm.ringIndex};
      ok = ringAllReduce(p, s);
      break;
    }
    case Coll::kReduceScatter: {
      RingReduceScatterShape s{end - begin,    chunk,          comm.nranks,
                               comm.ringIndex, comm.ringRanks, w.count};
      ok = ringReduceScatter(p, s);
      break;
    }
    case Coll::kReduce: {
      RingReduceShape s{end - begin, chunk, comm.nranks, comm.ringIndex, w.rootIndex};
      ok = ringReduce(p, s);
      break;
    }
    case Coll::kAllGather:
      if constexpr (K == RedKind::kSum) {
        RingAllGatherShape s{end - begin,    chunk,          comm.nranks,
                             comm.ringIndex, comm.ringRanks, w.count};
        ok = ringAllGather(p, s);
      }
      break;
    case Coll::kBroadcast:
      if constexpr (K == RedKind::kSum) {
        RingBroadcastShape s{end - begin,    chunk,       comm.nranks,
                             comm.ringIndex, w.rootIndex, w.sendbuff == w.recvbuff};
        ok = ringBroadcast(p, s);
      }
      break;
    default:  // point-to-point works run in launches of their own (runP2p)
      break;
  }
  p.finish();
  return ok;
}

// The direct all-reduce of this channel's slice through the ranks' direct regions.
template <class F, RedKind K, Proto P, class Block>
CHORUS_HD bool runDirect(const Comm& comm, const Work& w, int channel, Block& b) {
  using S = typename F::Store;
  uint64_t begin, end;
  channelSliceOf(w.count, sizeof(S), channel, w.nchannels, &begin, &end);
  if (begin == end) return true;
  DirectPrims<F, K, P, Block> p(
      comm, channel, static_cast<const char*>(w.sendbuff) + begin * sizeof(S),
      static_cast<char*>(w.recvbuff) + begin * sizeof(S), workScalar<F>(w), b);
  // Two-shot shares start on 16 bytes, so that every share moves in 16-byte packs.
  const size_t align = sizeof(S) >= 16 ? 1 : 16 / sizeof(S);
  DirectAllReduceShape s{end - begin,      p.chunkElems(), align,
                         comm.directRanks, comm.rank,      w.algo == Algo::kTwoShot};
  return directAllReduce(p, s);
}

// The tree all-reduce of this channel's slice over the channel's tree links.
template <class F, RedKind K, Proto P, class Block>
CHORUS_HD bool runTree(const Comm& comm, const Work& w, int channel, Block& b) {
  using S = typename F::Store;
  uint64_t begin, end;
  channelSliceOf(w.count, sizeof(S), channel, w.nchannels, &begin, &end);
  if (begin == end) return true;
  TreePrims<F, K, P, Block> p(
      comm, channel, static_cast<const char*>(w.sendbuff) + begin * sizeof(S),
      static_cast<char*>(w.recvbuff) + begin * sizeof(S), workScalar<F>(w), b);
  const size_t chunk = p.chunkElems();
  bool ok = chunk > 0 && p.fifoSlots() >= 2;
  if (!ok && b.tid == 0) flagKernelError(comm);  // no tree link: refused, not a hang
  if (ok) {
    // Tree 1's half starts on 16 bytes, so that both halves move in 16-byte packs.
    TreeAllReduceShape s{end - begin,
                         chunk,
                         p.fifoSlots(),
                         {comm.trees[0].depth, comm.trees[1].depth},
                         sizeof(S) >= 16 ? 1 : 16 / sizeof(S)};
    ok = treeAllReduce(p, s);
  }
  p.finish();
  return ok;
}

// Recursive doubling of this channel's slice over the channel's links between partners.
template <class F, RedKind K, Proto P, class Block>
CHORUS_HD bool runRd(const Comm& comm, const Work& w, int channel, Block& b) {
  using S = typename F::Store;
  uint64_t begin, end;
  channelSliceOf(w.count, sizeof(S), channel, w.nchannels, &begin, &end);
  if (begin == end) return true;
  RdPrims<F, K, P, Block> p(comm, channel, static_cast<const char*>(w.sendbuff) + begin * sizeof(S),
                            static_cast<char*>(w.recvbuff) + begin * sizeof(S), end - begin,
                            workScalar<F>(w), b);
  const size_t chunk = p.chunkElems();
  bool ok = chunk > 0;
  if (!ok && b.tid == 0) flagKernelError(comm);  // no partner link: refused
  if (ok) {
    RdAllReduceShape s{end - begin, chunk, comm.nranks, comm.rank};
    ok = rdAllReduce(p, s);
  }
  return ok;
}

// The kernel that point-to-point launches run on: bytes, no reduction.
template <class F, RedKind K>
constexpr bool kP2pKernel = K == RedKind::kSum&& std::is_same<F, NativeFormat<uint8_t>>::value;

// One point-to-point transfer of w.count bytes by this block: through the FIFO of the link to
// or from w.peer in slot-sized steps, or a copy to this rank itself.
template <class F, Proto P, class Block>
CHORUS_HD bool runP2p(const Comm& comm, const Work& w, Block& b) {
  const char* in = static_cast<const char*>(w.sendbuff);
  char* out = static_cast<char*>(w.recvbuff);
  if (w.coll == Coll::kCopy) {
    if (in != out) blockCopy<false>(b, out, in, w.count);
    return true;
  }
  // Only this transfer's direction: the other direction of the same link may run on another
  // block at the same time, and each block writes back the step of the FIFO end it moved.
  const Channel& link = comm.peers[w.peer * comm.peerLinks + w.part];
  Channel one;
  if (w.coll == Coll::kSend) {
    one.send[static_cast<int>(P)] = link.send[static_cast<int>(P)];
  } else {
    one.recv[static_cast<int>(P)] = link.recv[static_cast<int>(P)];
  }
  RingPrims<F, RedKind::kSum, P, Block> p(comm, one, in, out, typename F::Compute{}, b);
  const uint64_t chunk = p.chunkElems();
  if (chunk == 0) {
    // No FIFO for this direction (the host refuses such a transfer before launching): report
    // it rather than loop forever.
    if (b.tid == 0) flagKernelError(comm);
    p.finish();
    return false;
  }
  bool ok = true;
  for (uint64_t off = 0; ok && off < w.count; off += chunk) {
    const uint64_t n = w.count - off < chunk ? w.count - off : chunk;
    ok = w.coll == Coll::kSend ? p.send(off, n) : p.recv(off, n);
  }
  p.finish();
  return ok;
}

template <class F, RedKind K, class Block>
CHORUS_HD void runChannel(const Launch& launch, int channel, Block& b) {
  const Comm& comm = *launch.comm;
  if (b.tid == 0) b.shared->aborted = 0;
  b.sync();
  if (launch.p2p != 0) {
    if constexpr (kP2pKernel<F, K>) {
      if (channel < launch.nworks) {
        const Work& w = launch.works[channel];
        if (w.proto == Proto::kLl) {
          runP2p<F, Proto::kLl>(comm, w, b);
        } else {
          runP2p<F, Proto::kSimple>(comm, w, b);
        }
      }
    }
    return;
  }
  for (int i = 0; i < launch.nworks; ++i) {
    const Work& w = launch.works[i];
    // Later works may read what earlier ones wrote on other channels.
    if (i > 0 && !gridBarrier(comm, b)) return;
    if (channel >= w.nchannels) continue;
    if (comm.nranks == 1) {
      runLocal<F, K>(comm, w, channel, b);
      continue;
    }
    bool ok;
    const bool direct = w.algo == Algo::kOneShot || w.algo == Algo::kTwoShot;
    if (w.algo == Algo::kTree && w.coll == Coll::kAllReduce && w.nchannels <= comm.treeChannels) {
      ok = w.proto == Proto::kLl ? runTree<F, K, Proto::kLl>(comm, w, channel, b)
                                 : runTree<F, K, Proto::kSimple>(comm, w, channel, b);
    } else if (w.algo == Algo::kRd && w.coll == Coll::kAllReduce &&
               w.nchannels <= comm.rdChannels) {
      ok = w.proto == Proto::kLl ? runRd<F, K, Proto::kLl>(comm, w, channel, b)
                                 : runRd<F, K, Proto::kSimple>(comm, w, channel, b);
    } else if (direct && w.coll == Coll::kAllReduce && comm.directRanks == comm.nranks) {
      // Two-shot publishes finished shares with counters: Simple only.
      ok = w.proto == Proto::kLl && w.algo == Algo::kOneShot
               ? runDirect<F, K, Proto::kLl>(comm, w, channel, b)
               : runDirect<F, K, Proto::kSimple>(comm, w, channel, b);
    } else {
      ok = w.proto == Proto::kLl ? runRing<F, K, Proto::kLl>(comm, w, channel, b)
                                 : runRing<F, K, Proto::kSimple>(comm, w, channel, b);
    }
    if (!ok) return;
  }
}

}  // namespace dev
}  // namespace chorus
