// The host end of device links that are not peer-to-peer. A kernel sends into a FIFO in mapped
// host memory of its own process (dev::Fifo with sizes); the proxy forwards each published slot
// into a host connector (shared memory, a socket, an NCCL net plugin: whatever transport the
// communicator has for that peer) and releases the device slot. On the receiving side it takes
// the host connector's slots into the receiving kernel's FIFO (mapped host memory) as that
// kernel frees them. Plain host code: the same proxy serves GPU kernels and the CPU emulator.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "cuda/dev_work.h"
#include "transport/connector.h"

namespace chorus {

class DeviceProxy {
 public:
  // onError: called once, from the proxy's thread, with the first failure (a peer that closed
  // its connection, a slot larger than the far end's FIFO): the owner stops its kernels.
  // busy: whether the owner's kernels may still wait on a link (null: always). A peer that
  // closes its connection while nothing waits is no failure: the link is marked closed
  // (closedLink) and the owner refuses new work over it.
  explicit DeviceProxy(std::function<void(const Status&)> onError = nullptr,
                       std::function<bool()> busy = nullptr);
  ~DeviceProxy();
  DeviceProxy(const DeviceProxy&) = delete;
  DeviceProxy& operator=(const DeviceProxy&) = delete;

  // Before start: forwards what a kernel publishes in `fifo` (its sending end; sizes set) to
  // `host`. `what` names the link in errors ("ring channel 3 to rank 5, LL"). With `place`
  // (the memory of fifo's slots), the host connector's transport is asked to send from the
  // kernel's slots themselves (ProxyLink::placeSlots): where it does, only sizes and counters
  // are forwarded, and a slot is the kernel's again once the network sent it.
  Status addSend(const dev::Fifo& fifo, SendConnector* host, const std::string& what,
                 const SlotMemory* place = nullptr);
  // Before start: delivers `host`'s slots into the receiving kernel's `fifo`. LL slots are
  // copied in 8-byte halves, each whole, so that a kernel polling a line's flags never sees a
  // flag before its datum. With `place` (Simple only), the transport is asked to receive into
  // the kernel's slots themselves; where it does, a slot goes back to the network when the
  // kernel releases it. Without, a transport holding receives for a placement is let go.
  // For both: slots in GPU memory (place->device) that the transport does not take are an
  // error, since the proxy copies host memory only.
  Status addRecv(RecvConnector* host, const dev::Fifo& fifo, dev::Proto proto,
                 const std::string& what, const SlotMemory* place = nullptr);
  size_t links() const { return sends_.size() + recvs_.size(); }
  // Links whose slots the transport placed in the kernel's memory.
  int placedLinks() const { return placed_; }

  // Starts the thread that drives every link. It polls while slots move and for a while after;
  // then it looks every millisecond until kick() says work was queued.
  void start();
  // Stops the thread after forwarding what kernels published and the far end can still take
  // (a kernel does not wait for its last slots to leave): until every send link is empty, the
  // proxy failed, `abort` says so, or `drainFor` passed.
  void stop(std::chrono::milliseconds drainFor = std::chrono::milliseconds(0),
            std::function<bool()> abort = nullptr);
  void kick();

  // One pass over every link (without the thread: tests); true when a slot moved.
  bool progress();
  // The first failure, else ok.
  Status error() const;
  // The first link whose peer closed its connection while nothing waited on it, or "".
  std::string closedLink() const;
  // Whether a send link holds slots a kernel published that are not forwarded yet (placed:
  // not sent yet, as they are still in the kernel's memory).
  bool sendsPending() const;

 private:
  struct SendLink {
    dev::Fifo fifo;
    SendConnector* host;
    std::string what;
    uint64_t done = 0;  // slots forwarded (and, unless placed, released to the kernel)
    bool placed = false;
    uint64_t offset = 0;  // placed: the kernel's count of slots less the host connector's
  };
  struct RecvLink {
    RecvConnector* host;
    dev::Fifo fifo;
    dev::Proto proto;
    std::string what;
    uint64_t done = 0;    // slots delivered to the kernel
    bool closed = false;  // the peer closed its connection while nothing waited
    bool placed = false;
    uint64_t offset = 0;  // placed: as for sends
  };
  // Asks host's transport to place its slots in `place` (null: lets it go on without);
  // *placed says whether it did, after checking that slot i of one is slot i of the other.
  Status place(ProxyLink* proxy, const void* hostFifo, uint32_t hostSlots, uint64_t hostCount,
               const dev::Fifo& fifo, uint64_t devCount, const SlotMemory* place,
               const std::string& what, bool* placed, uint64_t* offset);
  bool moveSend(SendLink& l);
  bool moveRecv(RecvLink& l);
  bool movePlacedRecv(RecvLink& l);
  // The peer of l closed its connection and nothing more will come on it.
  void peerClosed(RecvLink& l);
  void fail(const Status& s);
  void run();

  std::function<void(const Status&)> onError_;
  std::function<bool()> busy_;
  std::vector<SendLink> sends_;
  std::vector<RecvLink> recvs_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::condition_variable wake_;
  uint64_t kicks_ = 0;  // under mu_
  Status error_;        // under mu_
  std::string closed_;  // under mu_
  int placed_ = 0;
};

}  // namespace chorus
