// The host end of device links that are not peer-to-peer. A kernel sends into a FIFO in mapped
// host memory of its own process (dev::Fifo with sizes); the proxy forwards each published slot
// into a host connector (shared memory, a socket, an NCCL net plugin: whatever transport the
// communicator has for that peer) and releases the device slot. On the receiving side it takes
// the host connector's slots into the receiving kernel's FIFO (mapped host memory) as that
// kernel frees them. Plain host code: the same proxy serves GPU kernels and the CPU emulator.
#pragma once

#include <atomic>
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
  explicit DeviceProxy(std::function<void(const Status&)> onError = nullptr);
  ~DeviceProxy();
  DeviceProxy(const DeviceProxy&) = delete;
  DeviceProxy& operator=(const DeviceProxy&) = delete;

  // Before start: forwards what a kernel publishes in `fifo` (its sending end; sizes set) to
  // `host`. `what` names the link in errors ("ring channel 3 to rank 5, LL").
  Status addSend(const dev::Fifo& fifo, SendConnector* host, const std::string& what);
  // Before start: delivers `host`'s slots into the receiving kernel's `fifo`. LL slots are
  // copied in 8-byte halves, each whole, so that a kernel polling a line's flags never sees a
  // flag before its datum.
  Status addRecv(RecvConnector* host, const dev::Fifo& fifo, dev::Proto proto,
                 const std::string& what);
  size_t links() const { return sends_.size() + recvs_.size(); }

  // Starts the thread that drives every link. It polls while slots move and for a while after;
  // then it looks every millisecond until kick() says work was queued.
  void start();
  void stop();
  void kick();

  // One pass over every link (without the thread: tests); true when a slot moved.
  bool progress();
  // The first failure, else ok.
  Status error() const;

 private:
  struct SendLink {
    dev::Fifo fifo;
    SendConnector* host;
    std::string what;
    uint64_t done = 0;  // slots forwarded and released to the kernel
  };
  struct RecvLink {
    RecvConnector* host;
    dev::Fifo fifo;
    dev::Proto proto;
    std::string what;
    uint64_t done = 0;  // slots delivered to the kernel
  };
  bool moveSend(SendLink& l);
  bool moveRecv(RecvLink& l);
  void fail(const Status& s);
  void run();

  std::function<void(const Status&)> onError_;
  std::vector<SendLink> sends_;
  std::vector<RecvLink> recvs_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  std::condition_variable wake_;
  uint64_t kicks_ = 0;  // under mu_
  Status error_;        // under mu_
};

}  // namespace chorus
