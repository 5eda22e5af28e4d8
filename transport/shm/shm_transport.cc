// Shared-memory transport: the receiver creates a segment holding the FIFO, the sender maps
// it. Names carry the communicator tag, both ranks and the channel, never the host name.
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/log.h"
#include "common/shm.h"
#include "transport/transport.h"

namespace chorus {

namespace {

struct ShmInfo {
  char name[200];
  uint64_t bytes;
};
static_assert(sizeof(ShmInfo) <= sizeof(ConnectInfo), "ShmInfo must fit a ConnectInfo");

class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const TransportContext& ctx) : ctx_(ctx) {}
  // A receiver still waiting for this rank learns that nothing more will come, and why when
  // the communicator failed, as it does when a socket closes (a rank that destroys its
  // communicator in the middle of a call). A failure the peers read on this rank's board is
  // left to it: the board says first what a peer must report (a mismatch of its own call).
  ~ShmTransport() override {
    if (ctx_.errors != nullptr && ctx_.errors->failurePublished()) return;
    const std::string why = ctx_.errors != nullptr ? ctx_.errors->failureText() : std::string();
    for (FifoHeader* h : sendFifos_) {
      snprintf(h->peerError, sizeof(h->peerError), "%s", why.c_str());
      h->peerClosed.store(1, std::memory_order_release);
      wakeSleepers(h->tail, h->tailSleepers);
    }
  }
  const char* name() const override { return "shm"; }

  Status setupRecv(int peer, int channel, bool /*sendsBack*/, ConnectInfo* info,
                   RecvConnector* conn) override {
    std::string name = segmentName(peer, channel);
    Result<ShmSegment> seg = ShmSegment::create(name, ctx_.geometry.totalBytes());
    if (!seg.isOk()) return seg.status().withContext("shm transport");
    fifoInit(seg.value().data(), ctx_.geometry);
    *conn = RecvConnector(seg.value().data());
    ShmInfo si = {};
    snprintf(si.name, sizeof(si.name), "%s", name.c_str());
    si.bytes = ctx_.geometry.totalBytes();
    memcpy(info->bytes, &si, sizeof(si));
    segments_.push_back(seg.take());
    LOG_TRACE(kSubsysShm, "shm recv FIFO %s from rank %d channel %d", name.c_str(), peer, channel);
    return Status::ok();
  }

  Status connectSend(int peer, int channel, const ConnectInfo& info, SendConnector* conn) override {
    ShmInfo si;
    memcpy(&si, info.bytes, sizeof(si));
    si.name[sizeof(si.name) - 1] = '\0';
    Result<ShmSegment> seg = ShmSegment::open(si.name, si.bytes);
    if (!seg.isOk())
      return seg.status().withContext(formatString(
          "shm transport: rank %d attaching to rank %d channel %d", ctx_.rank, peer, channel));
    CHORUS_TRY(fifoCheck(seg.value().data(), si.bytes));
    *conn = SendConnector(seg.value().data());
    sendFifos_.push_back(static_cast<FifoHeader*>(seg.value().data()));
    segments_.push_back(seg.take());
    // Tell the receiver its segment is mapped, so that it can remove the name.
    uint8_t attached = 1;
    return ctx_.bootstrap->send(peer, kTagAttached + channel, &attached, sizeof(attached));
  }

  // Once the sender has mapped the segment the name can go: nothing is left in /dev/shm even
  // if a process is killed later.
  Status finishRecv(int peer, int channel) override {
    uint8_t attached = 0;
    CHORUS_TRY(ctx_.bootstrap->recv(peer, kTagAttached + channel, &attached, sizeof(attached)));
    std::string name = segmentName(peer, channel);
    for (ShmSegment& s : segments_)
      if (s.name() == name) s.unlink();
    return Status::ok();
  }

 private:
  // Bootstrap tags of the "segment mapped" messages, one per channel.
  static constexpr int kTagAttached = 3000;

  std::string segmentName(int peer, int channel) const {
    return "/chorus-" + ctx_.commTag + "-" + std::to_string(ctx_.rank) + "-" +
           std::to_string(peer) + "-" + std::to_string(channel);
  }

  TransportContext ctx_;
  std::vector<ShmSegment> segments_;
  std::vector<FifoHeader*> sendFifos_;  // in segments_, mapped for sending
};

}  // namespace

std::unique_ptr<Transport> makeShmTransport(const TransportContext& ctx) {
  return std::make_unique<ShmTransport>(ctx);
}

}  // namespace chorus
