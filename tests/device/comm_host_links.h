// Host communicators whose own transports carry emulated device links: the connectors a device
// communicator's proxy drives for pairs without a P2P path (Communicator::connectDeviceHost),
// made on every rank at once and handed to an EmuClique (EmuGeometry::hostLinks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/comm.h"
#include "cuda/dev_comm.h"
#include "cuda/dev_emulator.h"

namespace chorus {
namespace dev {

class CommHostLinks {
 public:
  // nranks host communicators (threads of this process) over shared memory, or over TCP when
  // tcp; each connects the host channels of ring channels [0, ringChannels) to its ring
  // neighbours (ring 0 -> 1 -> ... -> nranks-1), when p2p the point-to-point host channels of
  // every part to every other rank, and those of the extraLinks links after the parts (the tree
  // and recursive-doubling links, Comm::peers) to every other rank. error() says what failed,
  // if anything.
  CommHostLinks(int nranks, bool tcp, int ringChannels, bool p2p, int extraLinks = 0);
  ~CommHostLinks();  // the communicators are closed together
  CommHostLinks(const CommHostLinks&) = delete;
  CommHostLinks& operator=(const CommHostLinks&) = delete;

  const std::string& error() const { return error_; }
  // For EmuGeometry::hostLinks: the connectors of the link, counting those handed out.
  bool link(int sender, int receiver, int channel, int proto, SendConnector** send,
            RecvConnector** recv);
  int supplied() const { return supplied_; }
  // Whether rank's device links to peer may have their slots in GPU memory (its transport's).
  Result<NetGdr> gpuDirect(int rank, int peer) {
    return comms_[static_cast<size_t>(rank)]->deviceGpuDirect(peer);
  }

 private:
  int nranks_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::vector<HostLinks>> links_;  // by rank, then host channel
  std::string error_;
  int supplied_ = 0;
};

}  // namespace dev
}  // namespace chorus
