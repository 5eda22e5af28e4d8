// The device kernels' code run on the CPU: a clique of ranks whose FIFOs live in host memory,
// each rank's launch run by host threads standing in for the blocks (and the threads of each
// block) of a kernel. Tests prove the primitives, the protocols and the work encoding with it
// where there is no GPU; nothing here touches CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/dev_work.h"

namespace chorus {
class DeviceProxy;
class SendConnector;
class RecvConnector;
}  // namespace chorus

namespace chorus {
namespace dev {

struct EmuGeometry {
  int nchannels = 2;
  uint32_t nslots[kNumProtos] = {4, 4};
  uint32_t slotBytes[kNumProtos] = {1024, 4096};  // LL, Simple
  // Every link as a device communicator builds one that is not peer-to-peer: the sender's
  // kernel writes into a FIFO of its own, a proxy thread of the sending rank forwards each slot
  // through a host FIFO, and one of the receiving rank delivers it into the receiver's FIFO
  // (transport/device_proxy.h).
  bool proxied = false;
  // Bytes of each direct-region buffer (dev_work.h: Direct) per channel; 0: no direct regions
  // (only ring works). At most kMaxDirectRanks ranks.
  uint32_t directBytes = 0;
  // Links per pair of ranks for sends and receives (Comm::p2pParts).
  int p2pParts = kP2pParts;
  // Channels of the tree all-reduce (Comm::treeChannels, at most kMaxTreeChannels): every pair
  // gets two links more per channel (link p2pParts + 2 c + t).
  int treeChannels = 0;
  // Channels of recursive doubling (Comm::rdChannels, at most kMaxRdChannels): one link more
  // per channel for every pair, after the tree links.
  int rdChannels = 0;
  // Where a proxied link's host connectors come from (in tests of a communicator's own
  // transports): the sending rank's connector to `receiver` and the receiving rank's from
  // `sender`, for ring channel `channel` (-1 - link: link `link` of the pair, point-to-point
  // parts first, then tree links) and protocol `proto`.
  // Null, or false returned: a host FIFO the clique makes itself.
  std::function<bool(int sender, int receiver, int channel, int proto, SendConnector** send,
                     RecvConnector** recv)>
      hostLinks;
  // Proxied links: the Simple slots of both ends are offered to the host connectors'
  // transport to move data from and into in place (DeviceProxy::addSend/addRecv's place), as a
  // device communicator offers its FIFOs; in memfd memory offered as a dma-buf when
  // dmabufSlots.
  bool placeSimple = false;
  bool dmabufSlots = false;
  // Which ends' Simple slots are offered as GPU memory (host memory standing in for it): the
  // sender's of the link sender -> receiver when gpuMemory(sender, receiver, true), the
  // receiver's when gpuMemory(receiver, sender, false), as a device communicator asks its
  // transport (Transport::gpuDirect) where to put them; links through hostLinks only. Null:
  // host memory.
  std::function<bool(int rank, int peer, bool send)> gpuMemory;
};

// Host memory for the FIFOs of nranks ranks in a ring 0 -> 1 -> ... -> nranks-1 -> 0 (or the
// order given) and of point-to-point links between every pair, wired the way a device
// communicator wires device memory.
class EmuClique {
 public:
  EmuClique(int nranks, const EmuGeometry& geometry, const std::vector<int>& ringOrder = {});
  ~EmuClique();
  EmuClique(const EmuClique&) = delete;
  EmuClique& operator=(const EmuClique&) = delete;

  int nranks() const { return nranks_; }
  Comm* comm(int rank) { return comms_[static_cast<size_t>(rank)].get(); }
  const int32_t* ringRanks() const { return ring_.data(); }
  // Stops every waiting block (as ncclCommAbort raises the device's abort flag).
  void abort() { __atomic_store_n(&abortFlag_, 1u, __ATOMIC_RELEASE); }
  // The first failure a proxy met (proxied cliques), or "".
  std::string proxyError() const;
  // Link ends whose slots a transport placed in the clique's memory (placeSimple).
  int placedLinks() const;

 private:
  struct FifoMemory;
  struct HostFifo;
  static Fifo fifoView(FifoMemory& m, int p, uint64_t* step, const EmuGeometry& g);
  // Room for protocol p's slots in m (memfd memory for Simple when g.dmabufSlots).
  static void allocSlots(FifoMemory& m, int p, size_t bytes, const EmuGeometry& g);
  // The sender's own end of a proxied link (slots and their sizes).
  FifoMemory& newSenderMemory(const EmuGeometry& g);
  // Sends of `sender` written into `local`, delivered into `remote` of `receiver`.
  // channel: the ring channel, -1 - part for the point-to-point link's part.
  void bridge(FifoMemory& local, FifoMemory& remote, int sender, int receiver, int channel,
              const EmuGeometry& g);
  int nranks_;
  std::vector<int32_t> ring_;
  std::vector<std::unique_ptr<Comm>> comms_;
  std::vector<std::unique_ptr<FifoMemory>> memory_;
  std::vector<std::unique_ptr<FifoMemory>> peerMemory_;  // point-to-point links, per part
  std::vector<std::vector<Channel>> peers_;              // by rank, then peer and part
  std::vector<std::vector<uint64_t>> directRegions_;     // by rank (zeroed, 8-byte aligned)
  std::vector<uint64_t> barriers_;
  std::vector<uint32_t> errors_;
  uint32_t abortFlag_ = 0;
  std::vector<std::unique_ptr<FifoMemory>> local_;  // senders' ends of proxied links
  std::vector<std::unique_ptr<HostFifo>> hostFifos_;
  std::vector<std::unique_ptr<DeviceProxy>> proxies_;  // by rank; stopped before the rest goes
};

// Runs one launch of one rank to completion on this thread plus (blocks x threadsPerBlock - 1)
// others, blocks being comm->nchannels (point-to-point launches: nworks); false when the
// launch's kernel key is unknown.
bool emuRunLaunch(const Launch& launch, int threadsPerBlock);

}  // namespace dev
}  // namespace chorus
