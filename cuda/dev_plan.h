// From collective calls on device buffers to kernel launches: the protocol (LL or Simple) and
// channel count of each call, chosen by a cost model or forced by CHORUS_PROTO / NCCL_PROTO,
// and the calls of one group packed into as few launches as the kernels allow (one kernel per
// data type and reduction kind; copies run on any type's Sum kernel). Host code, no CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/status.h"
#include "cuda/dev_work.h"
#include "exec/reduce.h"

namespace chorus {
namespace dev {

const char* protoName(Proto p);  // "LL", "Simple"
const char* algoName(Algo a);    // "ring", "oneshot", "twoshot", "tree", "rd" (CHORUS_ALGO's)

// Rank's node in tree 0 or 1 of nranks ranks (algorithms/double_binary_tree.h), and whether
// ranks a and b are parent and child in either tree (then they have tree links).
DevTreeNode devTreeNode(int nranks, int rank, int tree);
bool treeNeighbours(int nranks, int a, int b);
// Whether ranks a and b exchange in recursive doubling: b is one of a's rdPartner
// (algorithms/rd_allreduce.h).
bool rdPartners(int nranks, int a, int b);

// The protocols the user allows: one bit per Proto.
struct ProtoMask {
  uint32_t bits = (1u << kNumProtos) - 1;
  bool isSet = false;
  std::string text;  // "NCCL_PROTO=LL" for messages
  bool allows(Proto p) const { return (bits >> static_cast<int>(p)) & 1u; }
};

// A comma list of LL, LL128, Simple (any case), ^ in front to exclude them. LL128 is accepted
// and has no effect (Chorus has no LL128 protocol); a list that leaves no protocol, or an
// unknown name, is an error naming the variable and the accepted values.
Result<ProtoMask> parseProtoList(const std::string& value, const std::string& source);
// CHORUS_PROTO, else NCCL_PROTO; unset or empty allows both.
Result<ProtoMask> protoOverride();

// What the planner knows of a device communicator (the same on every rank).
struct DeviceShape {
  int nranks = 1;
  int nchannels = 1;  // channels connected
  int minChannels = 1;
  int maxChannels = kMaxChannels;
  const int32_t* ringRanks = nullptr;  // host copy: rank at each ring position
  ProtoMask protos;
  AlgorithmMask algos;  // CHORUS_ALGO / NCCL_ALGO: ring, oneshot, twoshot, tree, rd apply here
  // Bytes of one direct-region buffer per channel (Comm::direct); 0: no direct all-reduce.
  uint32_t directBytes = 0;
  // Links per pair of ranks for sends and receives (Comm::p2pParts), and the fewest bytes a
  // part of a transfer moves: a transfer of b bytes runs as min(p2pParts, b / p2pPartBytes)
  // parts (at least one), each on a block and a link of its own.
  int p2pParts = 1;
  size_t p2pPartBytes = size_t(256) << 10;
  // Channels with tree links (Comm::treeChannels) and recursive-doubling links
  // (Comm::rdChannels); 0: no such all-reduce.
  int treeChannels = 0;
  int rdChannels = 0;
};

struct DeviceChoice {
  Algo algo = Algo::kRing;
  Proto proto = Proto::kSimple;
  int nchannels = 1;
  double us = 0;
};

// Predicted microseconds of a collective moving `bytes` (the nccl-tests size) with algo and
// proto over nchannels (directBytes: the direct regions' buffer size, for the direct
// algorithms' sequences). The constants are estimates, not yet fitted on a GPU.
double predictDeviceUs(int nranks, Collective coll, Algo algo, Proto proto, int nchannels,
                       size_t bytes, uint32_t directBytes = 0);
DeviceChoice chooseDevice(const DeviceShape& shape, Collective coll, size_t bytes);

// One collective call on device buffers.
struct DeviceCall {
  Collective coll = Collective::kAllReduce;
  DataType type = DataType::kFloat32;
  RedOp op;
  const void* scalarDevice = nullptr;  // PreMulSum scalar in device memory (else op.scalar)
  size_t count = 0;                    // elements per rank, as the API takes it
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  int root = 0;
};

// The nccl-tests size of a call.
size_t deviceCallBytes(const DeviceCall& call, int nranks);

// Appends the launches that run calls[0..n) in order to *out (none for calls of no elements).
// comm is the device address every launch carries.
Status encodeLaunches(const DeviceShape& shape, const Comm* comm, const DeviceCall* calls, size_t n,
                      std::vector<Launch>* out);

// One send or receive of a group on device buffers (bytes; the peers must post the same sizes,
// as with NCCL).
struct DeviceP2p {
  bool isSend = false;
  int peer = -1;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t bytes = 0;
};

// The sends of a group whose bytes overlap a receive of the same group (an in-place all-to-all,
// a send and a receive of one buffer): (*at)[i] is send i's offset in one copy buffer, SIZE_MAX
// for the others; returns the copy's size (0: none overlaps). The group's transfers run at
// once, so such a send is read from a copy taken before them. O(n log n) in the group's size.
size_t planSendCopies(const DeviceP2p* ops, size_t n, std::vector<size_t>* at);

// The protocol of a transfer of `bytes`: both ends choose from the size alone, so they agree.
Proto chooseP2pProto(const ProtoMask& protos, size_t bytes);

// How many parts a transfer of `bytes` runs as, and where part p starts (16-byte multiples,
// so that parts of aligned buffers stay aligned); both ends compute them from the size alone.
int p2pPartsOf(const DeviceShape& shape, size_t bytes);
size_t p2pPartBegin(size_t bytes, int parts, int p);

// Appends the launches that run one group's sends and receives of `rank` to *out. The k-th
// send to rank + d and the k-th receive from rank - d (mod nranks) go into launch (k, d / 4),
// launches in that order: the peer puts the matching receive and send in the launch of the same
// key, so every rank's launches meet their peers' in the same order and none can wait on a
// later one. Within a launch each part of a transfer has a block of its own (part p of a send
// goes through link p of the pair, as part p of the matching receive does). Sends to itself are
// paired with receives from itself (same count and sizes, else an error) and become copies.
Status encodeP2pLaunches(const DeviceShape& shape, const Comm* comm, int rank, const DeviceP2p* ops,
                         size_t n, std::vector<Launch>* out);

}  // namespace dev
}  // namespace chorus
