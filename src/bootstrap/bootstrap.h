// Bootstrap: the out-of-band TCP network that ranks use to find each other at init and to
// exchange setup data (connector addresses, topology). Not on any data path.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wait.h"

namespace chorus {

constexpr size_t kUniqueIdBytes = 128;

// What a unique id carries: where the rendezvous root listens and the secret every
// connection must present. Encoded into the 128 opaque bytes of ncclUniqueId.
struct UniqueIdInfo {
  sockaddr_storage rootAddr;  // IPv4 or IPv6 address of the root listener
  uint64_t secret;            // random, or from CHORUS_COMM_SECRET
  uint64_t magic;             // identifies this id (random per ncclGetUniqueId)
};

// 64 random bits from the kernel; without getrandom, a mix of clock, pid and a counter, which
// still tells values apart but is guessable (logged once).
uint64_t random64();

// Encodes/decodes the opaque id. decode rejects ids that are not Chorus ids or are corrupted
// (kInvalidArgument naming "uniqueId").
void encodeUniqueId(const UniqueIdInfo& info, unsigned char out[kUniqueIdBytes]);
Result<UniqueIdInfo> decodeUniqueId(const unsigned char in[kUniqueIdBytes]);

// ncclGetUniqueId: picks an interface (CHORUS_SOCKET_IFNAME), opens the root listener and
// starts the root thread that will run the rendezvous for whatever nranks the ranks announce.
// With CHORUS_COMM_ID/NCCL_COMM_ID set, returns the id derived from that address instead and
// starts nothing (rank 0 hosts the root inside Bootstrap::init).
Result<UniqueIdInfo> createUniqueId();

// Like createUniqueId but always a new root of its own, whatever CHORUS_COMM_ID/NCCL_COMM_ID
// say (for communicators made from others: ncclCommSplit).
Result<UniqueIdInfo> createFreshUniqueId();

// Like createUniqueId but ignores CHORUS_COMM_ID/NCCL_COMM_ID and listens on loopback: for
// cliques that live inside one process (ncclCommInitAll).
Result<UniqueIdInfo> createLocalUniqueId();

// The id derived from CHORUS_COMM_ID/NCCL_COMM_ID, or an error when unset/unparsable.
bool commIdFromEnvironment();  // whether CHORUS_COMM_ID or NCCL_COMM_ID is set
Result<UniqueIdInfo> uniqueIdFromEnvironment();

struct BootstrapOptions {
  double initTimeoutSeconds = 120;   // rendezvous deadline (CHORUS_INIT_TIMEOUT)
  double timeoutSeconds = 600;       // every later exchange (CHORUS_TIMEOUT); <= 0: none
  const AbortFlag* abort = nullptr;  // raised -> every pending call returns an error
  // Interface names to prefer when several can reach the peers, best first (the ones closest
  // to this process's CPUs); the others keep their order after them.
  std::vector<std::string> preferredInterfaces;
  // The id's root was listening before the id was handed out (a communicator made from
  // another: split, shrink, the hierarchical phases): a refused connection to it means that
  // its process ended or gave up, and fails at once instead of being tried again.
  bool rootListening = false;
};

// One rank's handle on the bootstrap network of a communicator. Methods are called by one
// thread at a time per Bootstrap (the communicator serialises them).
class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  // Joins the rendezvous described by id as rank of nranks. Fails with a message naming the
  // missing ranks when not all ranks joined before initTimeoutSeconds.
  static Result<std::unique_ptr<Bootstrap>> init(const UniqueIdInfo& id, int rank, int nranks,
                                                 const BootstrapOptions& options);

  virtual int rank() const = 0;
  virtual int nranks() const = 0;

  // data holds nranks blocks of bytesPerRank; this rank's block (at rank*bytesPerRank) is
  // filled in, and on return every block holds that rank's contribution.
  virtual Status allGather(void* data, size_t bytesPerRank) = 0;
  // Point-to-point messages matched by (peer, tag); sizes must agree on both sides.
  virtual Status send(int peer, int tag, const void* data, size_t bytes) = 0;
  virtual Status recv(int peer, int tag, void* data, size_t bytes) = 0;
  virtual Status barrier() = 0;
  // The flag whose raising ends pending calls from now on (null: none). A communicator whose
  // own flag was raised by a failure swaps in another to agree on a successor
  // (ncclCommShrink).
  virtual void setAbort(const AbortFlag* abort) = 0;
  // The address other ranks can reach this rank at (the interface bootstrap chose).
  virtual const sockaddr_storage& localAddress() const = 0;
  // True when peer's connections with this rank were closed from its end (its process ended,
  // or it destroyed its communicator): for waits outside the bootstrap that the peer ends.
  virtual bool peerGone(int peer) const {
    (void)peer;
    return false;
  }
};

}  // namespace chorus
