#include "transport/device_proxy.h"

#include <chrono>
#include <cstring>

#include "cuda/dev_memory.h"

namespace chorus {

namespace {

// How long the thread keeps polling after the last slot it moved before it looks only every
// millisecond: a collective's steps follow each other within microseconds, a training step's
// calls within milliseconds.
constexpr auto kActiveWindow = std::chrono::milliseconds(200);
constexpr auto kIdlePoll = std::chrono::milliseconds(1);

}  // namespace

DeviceProxy::DeviceProxy(std::function<void(const Status&)> onError, std::function<bool()> busy)
    : onError_(std::move(onError)), busy_(std::move(busy)) {}

DeviceProxy::~DeviceProxy() {
  stop();
}

Status DeviceProxy::place(ProxyLink* proxy, const void* hostFifo, uint32_t hostSlots,
                          uint64_t hostCount, const dev::Fifo& fifo, uint64_t devCount,
                          const SlotMemory* mem, const std::string& what, bool* placed,
                          uint64_t* offset) {
  *placed = false;
  // The proxy copies only host memory: GPU memory must be the network's to move.
  const bool gpu = mem != nullptr && mem->device;
  auto refused = [&] {
    return internalError(
        "%s: the device FIFO's slots are in GPU memory, which the network did not take in place "
        "(the proxy copies host memory only)",
        what.c_str());
  };
  if (proxy == nullptr) return gpu ? refused() : Status::ok();
  if (mem != nullptr &&
      (mem->data != fifo.slots || mem->nslots != fifo.nslots || mem->slotBytes != fifo.slotBytes))
    return internalError("%s: the memory to place is not the device FIFO's slots", what.c_str());
  // Slot i of the host FIFO must be slot i of the kernel's: the same number of slots and
  // counts that differ by a multiple of it (both start at 0 on a fresh link).
  if (mem != nullptr &&
      (hostSlots != fifo.nslots || devCount % fifo.nslots != hostCount % fifo.nslots))
    mem = nullptr;
  Result<bool> r = proxy->placeSlots(hostFifo, mem);
  if (!r.isOk()) return r.status().withContext(what);
  *placed = r.value();
  if (gpu && !*placed) return refused();
  *offset = devCount - hostCount;
  if (*placed) ++placed_;
  return Status::ok();
}

Status DeviceProxy::addSend(const dev::Fifo& fifo, SendConnector* host, const std::string& what,
                            const SlotMemory* mem) {
  if (fifo.sizes == nullptr || fifo.tail == nullptr || fifo.head == nullptr || fifo.nslots == 0)
    return internalError("%s: the device FIFO has no slot sizes or counters for a proxy",
                         what.c_str());
  if (host == nullptr || !host->valid())
    return internalError("%s: no host connector to forward to", what.c_str());
  if (fifo.slotBytes > host->slotBytes())
    return internalError("%s: device slots of %u bytes do not fit the host FIFO's %zu",
                         what.c_str(), fifo.slotBytes, host->slotBytes());
  SendLink l{fifo, host, what};
  // A FIFO already used by earlier kernels resumes where they stopped.
  l.done = dev::loadAcquire(fifo.head);
  if (mem != nullptr)
    CHORUS_TRY(place(host->proxy(), host->fifo(), host->nslots(), host->posted(), fifo, l.done, mem,
                     what, &l.placed, &l.offset));
  sends_.push_back(l);
  return Status::ok();
}

Status DeviceProxy::addRecv(RecvConnector* host, const dev::Fifo& fifo, dev::Proto proto,
                            const std::string& what, const SlotMemory* mem) {
  if (fifo.tail == nullptr || fifo.head == nullptr || fifo.nslots == 0)
    return internalError("%s: the device FIFO has no counters for a proxy", what.c_str());
  if (host == nullptr || !host->valid())
    return internalError("%s: no host connector to take slots from", what.c_str());
  RecvLink l{host, fifo, proto, what};
  l.done = dev::loadAcquire(fifo.tail);
  // LL lines are copied in halves (above): never placed, never in GPU memory.
  if (proto != dev::Proto::kSimple && mem != nullptr && mem->device)
    return internalError("%s: LL lines in GPU memory cannot be delivered by the proxy",
                         what.c_str());
  CHORUS_TRY(place(host->proxy(), host->fifo(), host->nslots(), host->released(), fifo, l.done,
                   proto == dev::Proto::kSimple ? mem : nullptr, what, &l.placed, &l.offset));
  recvs_.push_back(l);
  return Status::ok();
}

bool DeviceProxy::moveSend(SendLink& l) {
  bool moved = false;
  const uint64_t published = dev::loadAcquire(l.fifo.tail);
  while (l.done < published) {
    void* dst = l.host->tryAcquire();
    if (dst == nullptr) break;
    const uint64_t slot = l.done % l.fifo.nslots;
    const uint32_t bytes = __atomic_load_n(l.fifo.sizes + slot, __ATOMIC_RELAXED);
    if (bytes > l.fifo.slotBytes) {
      fail(internalError("%s: a kernel published a slot of %u bytes in a FIFO of %u-byte slots",
                         l.what.c_str(), bytes, l.fifo.slotBytes));
      return moved;
    }
    // Placed: the network sends from the kernel's slot itself.
    if (!l.placed) memcpy(dst, l.fifo.slots + slot * l.fifo.slotBytes, bytes);
    l.host->post(bytes);
    ++l.done;
    // The slot is the kernel's again (placed: once the network has sent it, below).
    if (!l.placed) dev::storeRelease(l.fifo.head, l.done);
    moved = true;
  }
  if (l.placed) {
    const uint64_t sent = l.host->sent() + l.offset;
    if (sent > dev::loadAcquire(l.fifo.head)) {
      dev::storeRelease(l.fifo.head, sent);
      moved = true;
    } else if (l.host->sent() < l.host->posted()) {
      // The kernel may wait for these slots: drive the sends rather than wait for the
      // transport's proxy to wake.
      l.host->proxy()->tryProgress(nullptr);
    }
  }
  return moved;
}

void DeviceProxy::peerClosed(RecvLink& l) {
  const std::string why = l.host->peerError();
  const std::string text = formatString("%s: the peer closed the connection%s%s", l.what.c_str(),
                                        why.empty() ? "" : ": ", why.c_str());
  if (!busy_ || busy_()) {
    fail(remoteError("%s", text.c_str()));
  } else {
    // A peer that finished first: an error only for work that still needs the link.
    l.closed = true;
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_.empty()) closed_ = text;
  }
}

bool DeviceProxy::moveRecv(RecvLink& l) {
  bool moved = false;
  if (l.placed) return movePlacedRecv(l);
  for (;;) {
    // A free device slot: the kernel released all but nslots - 1 of those delivered. An LL
    // kernel releases a step that carries no lines (a rank's empty share) without waiting for
    // it, so the kernel may be ahead of the proxy.
    const uint64_t released = dev::loadAcquire(l.fifo.head);
    if (released < l.done && l.done - released >= l.fifo.nslots) break;
    size_t bytes = 0;
    const void* src = l.host->tryWait(&bytes);
    if (src == nullptr) {
      if (l.host->peerClosed() && !l.host->ready()) peerClosed(l);
      break;
    }
    if (bytes > l.fifo.slotBytes) {
      fail(internalError("%s: the peer sent a slot of %zu bytes into a FIFO of %u-byte slots",
                         l.what.c_str(), bytes, l.fifo.slotBytes));
      break;
    }
    const uint64_t slot = l.done % l.fifo.nslots;
    char* dst = l.fifo.slots + slot * l.fifo.slotBytes;
    if (l.proto == dev::Proto::kLl) {
      // Each 8-byte half of a line (a datum and its flag) in one store.
      const auto* from = static_cast<const uint64_t*>(src);
      auto* to = reinterpret_cast<uint64_t*>(dst);
      for (size_t i = 0; i < bytes / 8; ++i) {
        uint64_t v;
        memcpy(&v, from + i, sizeof v);
        __atomic_store_n(to + i, v, __ATOMIC_RELAXED);
      }
    } else {
      memcpy(dst, src, bytes);
    }
    if (l.fifo.sizes != nullptr)
      __atomic_store_n(l.fifo.sizes + slot, static_cast<uint32_t>(bytes), __ATOMIC_RELAXED);
    ++l.done;
    dev::storeRelease(l.fifo.tail, l.done);
    l.host->release();
    moved = true;
  }
  return moved;
}

// The network receives into the kernel's slots: publish what arrived, and give the network
// back the slots the kernel released.
bool DeviceProxy::movePlacedRecv(RecvLink& l) {
  bool moved = false;
  const uint64_t released = dev::loadAcquire(l.fifo.head);
  while (l.host->released() + l.offset < released) {
    l.host->release();
    moved = true;
  }
  const uint64_t arrived = l.host->arrived() + l.offset;
  for (; l.done < arrived; ++l.done) {
    const size_t bytes = l.host->bytesAt(l.done - l.offset);
    if (bytes > l.fifo.slotBytes) {
      fail(internalError("%s: the peer sent a slot of %zu bytes into a FIFO of %u-byte slots",
                         l.what.c_str(), bytes, l.fifo.slotBytes));
      return moved;
    }
    if (l.fifo.sizes != nullptr)
      __atomic_store_n(l.fifo.sizes + l.done % l.fifo.nslots, static_cast<uint32_t>(bytes),
                       __ATOMIC_RELAXED);
    moved = true;
  }
  if (moved) dev::storeRelease(l.fifo.tail, l.done);
  if (!moved && l.host->peerClosed() && l.host->arrived() + l.offset == l.done) peerClosed(l);
  return moved;
}

bool DeviceProxy::progress() {
  if (failed_.load(std::memory_order_relaxed)) return false;
  bool moved = false;
  for (SendLink& l : sends_) moved = moveSend(l) || moved;
  for (RecvLink& l : recvs_)
    if (!l.closed) moved = moveRecv(l) || moved;
  return moved;
}

void DeviceProxy::fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.isOk()) return;
    error_ = s;
  }
  failed_.store(true, std::memory_order_release);
  if (onError_) onError_(s);
}

Status DeviceProxy::error() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

std::string DeviceProxy::closedLink() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

bool DeviceProxy::sendsPending() const {
  for (const SendLink& l : sends_)
    if (l.done < dev::loadAcquire(l.fifo.tail) ||
        (l.placed && l.host->sent() < l.host->posted() && !l.host->stopped()))
      return true;
  return false;
}

void DeviceProxy::start() {
  if (thread_.joinable() || links() == 0) return;
  stopping_.store(false, std::memory_order_relaxed);
  thread_ = std::thread([this] { run(); });
}

void DeviceProxy::stop(std::chrono::milliseconds drainFor, std::function<bool()> abort) {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_.store(true, std::memory_order_relaxed);
    }
    wake_.notify_all();
    thread_.join();
  }
  // The thread is gone: this one drives what is left.
  const auto deadline = std::chrono::steady_clock::now() + drainFor;
  while (drainFor.count() > 0 && sendsPending() && !failed_.load(std::memory_order_relaxed) &&
         !(abort && abort()) && std::chrono::steady_clock::now() < deadline) {
    if (!progress()) dev::pollPause();
  }
  // The kernels' memory goes with them: the network must not send from or receive into it any
  // more.
  for (SendLink& l : sends_)
    if (l.placed) {
      l.host->proxy()->retireSlots(l.host->fifo());
      l.placed = false;
    }
  for (RecvLink& l : recvs_)
    if (l.placed) {
      l.host->proxy()->retireSlots(l.host->fifo());
      l.placed = false;
    }
}

void DeviceProxy::kick() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++kicks_;
  }
  wake_.notify_all();
}

void DeviceProxy::run() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point lastMove = Clock::now();
  uint64_t seenKicks = 0;
  uint32_t emptyPasses = 0;
  bool idle = false;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (progress()) {
      emptyPasses = 0;
      idle = false;
      lastMove = Clock::now();
      continue;
    }
    if (failed_.load(std::memory_order_relaxed)) {
      // Nothing more moves; wait to be stopped.
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stopping_.load(std::memory_order_relaxed); });
      break;
    }
    if (!idle) {
      // The clock is read now and then, not on every empty pass.
      if ((++emptyPasses & 255u) == 0 && Clock::now() - lastMove >= kActiveWindow) idle = true;
      dev::pollPause();
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (kicks_ == seenKicks)
      wake_.wait_for(lock, kIdlePoll, [&] {
        return kicks_ != seenKicks || stopping_.load(std::memory_order_relaxed);
      });
    if (kicks_ != seenKicks) {
      seenKicks = kicks_;
      idle = false;
      lastMove = Clock::now();
    }
  }
}

}  // namespace chorus
