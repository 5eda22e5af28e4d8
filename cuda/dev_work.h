// What a device kernel is given: the communicator as the device sees it (its ring channels'
// FIFOs in memory the device reaches) and a launch of work descriptors. Flat plain data without
// pointers into host structures, so that a launch is passed by value as the kernel's parameter
// and a CUDA graph that captured it replays it unchanged. Compiles without the CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/hd.h"

namespace chorus {
namespace dev {

constexpr int kMaxChannels = 32;  // ring channels of a device communicator
// A large point-to-point transfer is cut into up to this many parts, each moved by a block of
// its own through a FIFO of its own (every pair of ranks has this many links each way).
constexpr int kP2pParts = 4;
// A point-to-point launch serves this many peer distances: the parts of a send and of a
// receive each (the copy to itself, distance 0, its parts).
constexpr int kP2pDistancesPerLaunch = 4;
// Collectives (or point-to-point parts) one launch carries.
constexpr int kMaxLaunchWorks = 2 * kP2pParts * kP2pDistancesPerLaunch;
// Threads of one channel's block: at most kBlockThreads (CHORUS_DEVICE_THREADS chooses).
constexpr int kBlockThreads = 512;
constexpr int kMinBlockThreads = 64;

// How a collective's work moves its data: along the ring channels' FIFOs, (all-reduce of
// ranks that all reach each other's memory) through every rank's direct region
// (algorithms/direct_allreduce.h, cuda/dev_direct.h), or (all-reduce) up and down the double
// binary tree (algorithms/tree_allreduce.h, cuda/dev_tree.h), or (all-reduce) by recursive
// doubling (algorithms/rd_allreduce.h, cuda/dev_rd.h).
enum class Algo : uint8_t {
  kRing = 0,
  kOneShot = 1,  // every rank stages its input and reduces all the staged inputs itself
  kTwoShot = 2,  // every rank reduces one share and copies the others' finished shares
  kTree = 3,     // partial sums up two trees, the result down them
  kRd = 4,       // recursive doubling: log2 n exchanges of the whole buffer between partners
};
constexpr int kNumAlgos = 5;

// The tree all-reduce runs on at most this many channels; each has links of its own to the
// rank's parent and children in both trees (two links per channel for each pair of tree
// neighbours, after the pair's point-to-point links).
constexpr int kMaxTreeChannels = 2;
// Recursive doubling likewise: one link per channel between exchange partners (after the tree
// links).
constexpr int kMaxRdChannels = 2;
constexpr int kDevTrees = 2;

enum class Proto : uint8_t {
  kLl = 0,      // 16-byte lines of 8 data bytes and two flags: no separate flag wait
  kSimple = 1,  // whole slots, one counter per slot, a fence between data and counter
};
constexpr int kNumProtos = 2;

// Collectives a kernel runs (the values of Collective, algorithms/algorithm.h).
enum class Coll : uint8_t {
  kAllReduce = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kBroadcast = 3,
  kReduce = 4,
  // Point-to-point transfers of bytes, one block each: to a peer, from a peer, and from this
  // rank to itself (a send paired with a receive of the same group).
  kSend = 5,
  kRecv = 6,
  kCopy = 7,
};

// One end of a connector FIFO of one protocol. The slots, tail and head live in the receiver's
// memory (device memory of its GPU, or mapped host memory); `step` in this end's own memory
// holds how many slots this end has moved through the FIFO so far, so a kernel starts where
// the last one stopped without the host tracking it.
//
// A FIFO whose far end is a host proxy (transport/device_proxy.h: the link goes through host
// memory and a host transport) lives in mapped host memory on the side of the kernel that uses
// it and has `sizes`: the sender writes each slot's byte count there and publishes tail for LL
// too, so that the proxy knows what to forward without parsing lines.
struct Fifo {
  char* slots = nullptr;      // nslots x slotBytes (LL: lines)
  uint64_t* tail = nullptr;   // Simple (and LL with sizes): slots the sender published
  uint64_t* head = nullptr;   // slots the receiver released
  uint64_t* step = nullptr;   // this end's position
  uint32_t* sizes = nullptr;  // per slot: bytes the sender wrote (proxied FIFOs only)
  uint32_t nslots = 0;
  uint32_t slotBytes = 0;
};

// The connectors of one ring channel: to the next rank and from the previous, per protocol.
struct Channel {
  Fifo send[kNumProtos];
  Fifo recv[kNumProtos];
};

// The direct all-reduce's memory: one region per rank in its own GPU memory, mapped by every
// other rank, and in it a part per channel: the rank's two counters (the last sequence it
// staged, the last whose reduced share is in its result buffer), each on a line of its own,
// then its buffers. Sequence s uses the buffers of parity s % 2 (the argument that they are
// free again is algorithms/direct_allreduce.h's and transport/shm/direct_region.h's). LL
// staging has buffers of its own: LL lines carry flags a reader trusts, which data staged
// with Simple in the same memory could imitate.
constexpr int kMaxDirectRanks = 8;
constexpr uint32_t kDirectHeaderBytes = 256;
enum class DirectBuffer : int {
  kStaging = 0,    // two: Simple staging of parity 0 and 1
  kResult = 2,     // two: two-shot reduced shares
  kLlStaging = 4,  // two: LL lines
};
constexpr int kDirectBuffers = 6;

struct Direct {
  char* regions[kMaxDirectRanks] = {};  // every rank's region as this rank reaches it
  uint64_t channelBytes = 0;            // from one channel's part of a region to the next
  uint32_t bufferBytes = 0;             // one buffer (a multiple of 256)
};

CHORUS_HD inline uint64_t directChannelBytes(uint32_t bufferBytes) {
  return kDirectHeaderBytes + static_cast<uint64_t>(kDirectBuffers) * bufferBytes;
}

// A rank's place in one of the two trees (algorithms/double_binary_tree.h), by rank.
struct DevTreeNode {
  int32_t parent = -1;  // -1: the root
  int32_t children[2] = {-1, -1};
  int32_t nchildren = 0;
  int32_t depth = 0;
};

// The communicator as its kernels see it; lives in memory the device reads.
struct Comm {
  int32_t rank = 0;
  int32_t nranks = 1;
  int32_t ringIndex = 0;               // this rank's position in the ring
  int32_t nchannels = 1;               // channels connected; every launch runs this many blocks
  const int32_t* ringRanks = nullptr;  // rank at each ring position
  uint64_t* barrier = nullptr;         // grid barrier between the works of a launch (only grows)
  const volatile uint32_t* abortFlag = nullptr;  // set by the host: stop waiting
  uint32_t* errorFlag = nullptr;  // set by a kernel that gave up (abort); read by the host
  // By rank and link (rank * peerLinks + link): send[] the FIFOs into that rank's memory for
  // this rank's sends to it, recv[] this rank's FIFOs for its receives from it (null slots
  // where no link exists). Links [0, p2pParts) carry sends and receives; tree neighbours have
  // 2 treeChannels more, link p2pParts + 2 c + t for channel c of tree t, and recursive
  // doubling's partners rdChannels more after those, link p2pParts + 2 treeChannels + c.
  const Channel* peers = nullptr;
  int32_t p2pParts = 1;
  int32_t peerLinks = 1;
  // Channels of the tree all-reduce (0: no tree links, only the other algorithms run), and
  // this rank's node in each tree.
  int32_t treeChannels = 0;
  DevTreeNode trees[kDevTrees];
  int32_t rdChannels = 0;  // channels of recursive doubling (0: none)
  // Ranks of the direct regions (nranks when every rank reaches every other's memory and
  // direct all-reduce is on, else 0: only ring works).
  int32_t directRanks = 0;
  Direct direct;
  Channel channels[kMaxChannels];
};

// One collective call of a launch.
struct Work {
  uint64_t count = 0;  // elements per rank (all-gather/reduce-scatter: per rank block)
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  const void* scalarPtr = nullptr;  // PreMulSum scalar in device memory; null: scalarBits
  uint64_t scalarBits = 0;          // PreMulSum scalar in the element type's encoding
  Coll coll = Coll::kAllReduce;
  Proto proto = Proto::kSimple;
  Algo algo = Algo::kRing;  // all-reduce only: the others always run the ring
  uint8_t type = 7;         // DataType
  uint8_t redKind = 0;      // RedKind
  int16_t nchannels = 1;
  int16_t rootIndex = 0;  // broadcast/reduce: the root's ring position
  int32_t peer = 0;       // send/receive: the other rank
  int32_t part = 0;       // send/receive: which of the pair's links (< Comm::p2pParts)
};

// One kernel launch, on the kernel chosen by (type, redKind) of the first work. Collectives:
// comm->nchannels blocks run the works in order. Point-to-point (p2p set): nworks blocks,
// block b runs works[b], all at once (a rank's sends and receives of a group progress
// together; in order they could wait on each other across ranks).
struct Launch {
  const Comm* comm = nullptr;
  int32_t nworks = 0;
  int32_t p2p = 0;
  Work works[kMaxLaunchWorks];
};
static_assert(sizeof(Launch) <= 4096, "a launch is a kernel's parameter (at most 4 KiB)");

// The elements [begin, end) of count that channel c of nchannels moves: equal contiguous
// slices, each starting on a 64-byte multiple of elements (the host executor cuts the same).
CHORUS_HD inline void channelSliceOf(uint64_t count, uint32_t eltSize, int c, int nchannels,
                                     uint64_t* begin, uint64_t* end) {
  uint64_t align = eltSize >= 64 ? 1 : 64 / eltSize;
  uint64_t per = (count + static_cast<uint64_t>(nchannels) - 1) / static_cast<uint64_t>(nchannels);
  per = (per + align - 1) / align * align;
  uint64_t b = per * static_cast<uint64_t>(c);
  *begin = b < count ? b : count;
  *end = b + per < count ? b + per : count;
}

}  // namespace dev
}  // namespace chorus
