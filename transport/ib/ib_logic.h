// The parts of the IB transport that are plain logic, kept apart from the verbs calls so that
// they are tested without RDMA hardware: the knobs, what the two ends of a connection exchange,
// the queue pair transitions, how a message is split over queue pairs, the FIFO entries a
// receiver writes into its sender, the memory registration cache, and port descriptions.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>

#include "common/status.h"

namespace chorus {
namespace ib {

constexpr int kMaxQps = 16;       // queue pairs per connection (NCCL_IB_QPS_PER_CONNECTION)
constexpr int kMaxRequests = 32;  // requests of each direction in flight per connection
constexpr int kMaxRecvs = 8;      // buffers of one grouped receive (the network's maxRecvs)
constexpr size_t kGroupedMaxBytes = (size_t(1) << 29) - 1;  // a grouped receive's buffer

struct Options {
  int qpsPerConnection = 1;
  int timeout = 20;    // local ACK timeout: 4.096 us * 2^timeout
  int retryCount = 7;  // transport retries before a send fails
  int serviceLevel = 0;
  int trafficClass = 0;
  bool adaptiveRouting = false;  // data as plain writes, then a zero-byte write with immediate
  // GPU memory registered by its address (a peer memory module, nvidia-peermem or nv_peer_mem,
  // lets the HCA reach it): -1 where /sys shows the module, 0 never, 1 always.
  int peerMemory = -1;
};
// From NCCL_IB_QPS_PER_CONNECTION, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, NCCL_IB_SL, NCCL_IB_TC,
// NCCL_IB_ADAPTIVE_ROUTING (CHORUS_ names first) and CHORUS_IB_PEER_MEMORY; a value out of
// range is an error naming the variable and the range.
Result<Options> optionsFromEnvironment();

// Whether a peer memory module that lets an HCA register GPU memory by its address is loaded,
// as sysRoot ("/sys") shows it: nvidia-peermem (as a module or a memory-peers client) or the
// older nv_peer_mem.
bool peerMemoryLoaded(const std::string& sysRoot);

// What each end sends the other over the setup socket: the sender first (with its FIFO), the
// receiver's answer (queue pairs only), then one byte from the sender once its queue pairs can
// receive.
struct ConnInfo {
  uint32_t nqps = 0;
  uint16_t lid = 0;
  uint8_t linkLayer = IBV_LINK_LAYER_INFINIBAND;  // IBV_LINK_LAYER_*
  uint8_t mtu = IBV_MTU_1024;                     // enum ibv_mtu
  uint8_t gid[16] = {};
  uint32_t qpn[kMaxQps] = {};
  uint32_t psn = 0;       // first packet sequence number of every queue pair (24 bits)
  uint64_t fifoAddr = 0;  // sender: where the receiver writes FIFO entries
  uint32_t fifoRkey = 0;
};
constexpr size_t kConnInfoBytes = 128;
void encodeConnInfo(const ConnInfo& info, uint8_t out[kConnInfoBytes]);
// Checks the magic, the version and every field's range.
Result<ConnInfo> decodeConnInfo(const uint8_t in[kConnInfoBytes]);

// The local end of a connection's queue pairs.
struct LocalPort {
  uint8_t port = 1;
  bool roce = false;
  uint16_t lid = 0;
  int gidIndex = 0;
  ibv_mtu mtu = IBV_MTU_1024;
};
// RESET -> INIT, INIT -> RTR (towards remote's queue pair qp) and RTR -> RTS: the attributes and
// the mask each transition needs.
void initTransition(const LocalPort& local, ibv_qp_attr* attr, int* mask);
void rtrTransition(const LocalPort& local, const ConnInfo& remote, int qp, const Options& options,
                   ibv_qp_attr* attr, int* mask);
void rtsTransition(uint32_t psn, const Options& options, ibv_qp_attr* attr, int* mask);

// Queue pair qp's share of a message of total bytes split over nqps: contiguous pieces in queue
// pair order, 128-byte aligned except the last.
struct Chunk {
  size_t offset = 0;
  size_t bytes = 0;
};
Chunk chunkOfQp(size_t total, int nqps, int qp);

// What a receiver writes into slot (index % kMaxRequests) of its sender's FIFO when it posts a
// receive of n buffers: an entry per buffer, the slot's first n of kMaxRecvs, in one write;
// seq (index + 1) in each tells the sender the entry is new, and the slot is whole when all n
// have it.
struct FifoEntry {
  uint64_t addr;
  uint32_t rkey;
  uint32_t size;
  int32_t tag;
  uint32_t nreqs;  // n: the buffers of the receive
  uint64_t seq;
};
static_assert(sizeof(FifoEntry) == 32, "a FIFO entry is 32 bytes");

// The entry of a whole FIFO slot (its n entries) that a send tagged `tag` writes into: the
// first not yet written (bit i of sentMask: entry i written) with that tag; -1: none.
int matchFifoEntry(const FifoEntry* entries, int n, uint32_t sentMask, int tag);

// The immediate of the writes of a message into buffer `index` of a receive of n buffers: its
// size when n is 1, else the index in the top 3 bits and the size (at most kGroupedMaxBytes)
// below; decodeImm reads it back.
uint32_t encodeImm(int index, int n, size_t size);
void decodeImm(uint32_t imm, int n, int* index, size_t* size);

// Registrations of memory with one protection domain, shared by everything that registers
// overlapping pages: acquire returns the registration that covers the pages of [data,
// data+bytes), registering them when none does; release drops one reference and deregisters
// at the last.
class MrCache {
 public:
  struct Entry {
    uintptr_t begin = 0;  // page aligned
    uintptr_t end = 0;
    void* mr = nullptr;
    int refs = 0;
    bool shared = true;  // later registrations of its pages may take it
  };
  using Register = std::function<Result<void*>(void* begin, size_t bytes)>;
  using Deregister = std::function<Status(void* mr)>;
  explicit MrCache(size_t pageBytes = 4096) : page_(pageBytes) {}
  // The registration of the pages holding data: an entry that covers them, else a new one made
  // with reg. shared = false makes an entry of its own that no later call takes (memory whose
  // pages another device exports, which the same addresses may not hold next time).
  Result<Entry*> acquire(const void* data, size_t bytes, const Register& reg, bool shared = true);
  size_t pageBytes() const { return page_; }
  Status release(Entry* entry, const Deregister& dereg);
  size_t entries() const { return entries_.size(); }

 private:
  size_t page_;
  std::list<Entry> entries_;  // stable addresses: handles point at entries
};

// Link rate of a port from ibv_port_attr's active_width and active_speed codes (0: unknown).
double portRateGbps(uint8_t activeWidth, uint32_t activeSpeed);
// "fe80:0000:...:0a3c", as the topology writes GIDs.
std::string gidToString(const uint8_t gid[16]);
// The topology's name of an ibv_gid_type: "IB/RoCE v1" or "RoCE v2".
const char* gidTypeName(int type);
const char* mtuName(int mtu);

}  // namespace ib
}  // namespace chorus
