#include "transport/connector.h"

#include <unistd.h>

#include <new>

namespace chorus {

namespace {
constexpr uint64_t kFifoMagic = 0x43484f5255534649ull;  // "CHORUSFI"
}

Result<FifoGeometry> fifoGeometry(int64_t buffBytes, int64_t nslots) {
  if (nslots < 2 || nslots > kMaxFifoSlots)
    return invalidArgument("CHORUS_STEPS=%lld is out of range [2, %d]", (long long)nslots,
                           kMaxFifoSlots);
  if (buffBytes < nslots * 4096 || buffBytes > (int64_t(1) << 31))
    return invalidArgument("CHORUS_BUFFSIZE=%lld is out of range [%lld, 2 GiB]",
                           (long long)buffBytes, (long long)(nslots * 4096));
  uint64_t slot = static_cast<uint64_t>(buffBytes / nslots) & ~uint64_t(127);
  return FifoGeometry{static_cast<uint32_t>(nslots), static_cast<uint32_t>(slot)};
}

FifoMemory allocLocalFifo(const FifoGeometry& geometry, ProxyLink* proxy, FifoHeader** header,
                          char** data) {
  FifoMemory memory(aligned_alloc(4096, (geometry.totalBytes() + 4095) & ~size_t(4095)));
  if (!memory) throw std::bad_alloc();
  fifoInit(memory.get(), geometry);
  *header = static_cast<FifoHeader*>(memory.get());
  (*header)->proxy = proxy;
  *data = static_cast<char*>(memory.get()) + FifoGeometry::dataOffset();
  return memory;
}

void fifoInit(void* memory, const FifoGeometry& geometry) {
  auto* h = new (memory) FifoHeader();
  h->tail.store(0, std::memory_order_relaxed);
  h->head.store(0, std::memory_order_relaxed);
  h->tailSleepers.store(0, std::memory_order_relaxed);
  h->headSleepers.store(0, std::memory_order_relaxed);
  h->nslots = geometry.nslots;
  h->slotBytes = geometry.slotBytes;
  h->magic = kFifoMagic;
  h->peerClosed.store(0, std::memory_order_relaxed);
  h->peerError[0] = '\0';
  h->proxy = nullptr;
  std::atomic_thread_fence(std::memory_order_release);
}

Status fifoCheck(const void* memory, size_t mappedBytes) {
  const auto* h = static_cast<const FifoHeader*>(memory);
  if (mappedBytes < sizeof(FifoHeader) || h->magic != kFifoMagic)
    return internalError("connector memory does not hold a Chorus FIFO");
  FifoGeometry g{h->nslots, h->slotBytes};
  if (h->nslots < 2 || h->nslots > kMaxFifoSlots || g.totalBytes() > mappedBytes)
    return internalError("connector FIFO header is inconsistent (%u slots of %u bytes)", h->nslots,
                         h->slotBytes);
  return Status::ok();
}

void ProxyLink::ring() {
  uint64_t one = 1;
  ssize_t r = write(doorbellFd, &one, sizeof(one));
  (void)r;  // a full counter already means "awake"
}

SendConnector::SendConnector(void* memory)
    : header_(static_cast<FifoHeader*>(memory)),
      proxy_(header_->proxy),
      data_(static_cast<char*>(memory) + FifoGeometry::dataOffset()),
      tail_(header_->tail.load(std::memory_order_acquire)),
      cachedHead_(header_->head.load(std::memory_order_acquire)),
      nslots_(header_->nslots),
      slotBytes_(header_->slotBytes) {}

RecvConnector::RecvConnector(void* memory)
    : header_(static_cast<FifoHeader*>(memory)),
      proxy_(header_->proxy),
      data_(static_cast<const char*>(memory) + FifoGeometry::dataOffset()),
      head_(header_->head.load(std::memory_order_acquire)),
      cachedTail_(header_->tail.load(std::memory_order_acquire)),
      nslots_(header_->nslots),
      slotBytes_(header_->slotBytes) {}

}  // namespace chorus
