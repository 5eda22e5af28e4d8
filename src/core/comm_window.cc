// Communicator windows: registration (collective) and the choice of the in-place collectives.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/host_alloc.h"
#include "common/log.h"
#include "core/comm.h"
#include "transport/shm/direct_region.h"

namespace chorus {

namespace {

// What each rank tells the others about its range at registration.
struct WindowOffer {
  uint32_t id;
  int32_t flags;
  int32_t pid;
  int32_t fd;      // of the memory file holding the range; -1: not shareable memory
  uint64_t inode;  // of that file
  uint64_t fileBytes;
  uint64_t offset;  // of the range in the file
  uint64_t bytes;
};

}  // namespace

Result<const HostWindow*> Communicator::registerWindow(void* buff, size_t size, int flags) {
  if (nextWindowId_ >= kMaxWindowId)
    return invalidUsage("ncclCommWindowRegister: this communicator registered %u windows already",
                        nextWindowId_);
  auto window = std::make_unique<HostWindow>();
  window->id = nextWindowId_;
  window->base = static_cast<char*>(buff);
  window->bytes = size;
  window->flags = flags;
  std::vector<WindowOffer> offers(static_cast<size_t>(nranks_));
  WindowOffer& mine = offers[static_cast<size_t>(rank_)];
  std::memset(&mine, 0, sizeof(mine));
  mine.id = window->id;
  mine.flags = flags;
  mine.pid = static_cast<int32_t>(getpid());
  mine.fd = -1;
  mine.bytes = size;
  SharedAlloc alloc;
  if (size > 0 && sharedHostFind(buff, size, &alloc)) {
    mine.fd = alloc.fd;
    mine.inode = sharedHostInode(alloc);
    mine.fileBytes = alloc.bytes;
    mine.offset = static_cast<uint64_t>(window->base - alloc.base);
  }
  if (nranks_ > 1) CHORUS_TRY(bootstrap_->allGather(offers.data(), sizeof(WindowOffer)));
  for (int r = 0; r < nranks_; ++r) {
    const WindowOffer& o = offers[static_cast<size_t>(r)];
    if (o.id != window->id || o.flags != flags)
      return invalidUsage(
          "ncclCommWindowRegister: rank %d registered window %u with flags %d where this rank "
          "registered window %u with flags %d: every rank must register the same windows, in "
          "the same order, with the same flags",
          r, o.id, o.flags, window->id, flags);
  }
  ++nextWindowId_;
  window->rankBase.assign(static_cast<size_t>(nranks_), nullptr);
  window->rankBytes.resize(static_cast<size_t>(nranks_));
  window->maps.resize(static_cast<size_t>(nranks_));
  window->rankBase[static_cast<size_t>(rank_)] = window->base;
  std::string why;
  int missing = -1;
  for (int r = 0; r < nranks_; ++r) {
    const WindowOffer& o = offers[static_cast<size_t>(r)];
    window->rankBytes[static_cast<size_t>(r)] = o.bytes;
    if (o.fd < 0 && o.bytes > 0 && missing < 0) missing = r;
  }
  bool mapped = tuning_.directPossible && missing < 0;
  if (!tuning_.directPossible && nranks_ > 1)
    why = "its ranks are not all on one host with shared memory";
  else if (missing >= 0)
    why = formatString("rank %d's range is not memory from ncclMemAlloc", missing);
  for (int r = 0; mapped && r < nranks_; ++r) {
    const WindowOffer& o = offers[static_cast<size_t>(r)];
    if (r == rank_ || o.bytes == 0) continue;
    Result<PeerMapping> m = PeerMapping::map(o.pid, o.fd, o.inode, o.fileBytes);
    if (!m.isOk()) {
      mapped = false;
      why = formatString("rank %d cannot map rank %d's range: %s", rank_, r,
                         m.status().message().c_str());
      break;
    }
    window->maps[static_cast<size_t>(r)] = m.take();
    window->rankBase[static_cast<size_t>(r)] =
        window->maps[static_cast<size_t>(r)].data() + o.offset;
  }
  // Every rank learns whether every rank mapped every range.
  std::vector<int32_t> ok(static_cast<size_t>(nranks_), 0);
  ok[static_cast<size_t>(rank_)] = mapped ? 1 : 0;
  if (nranks_ > 1) CHORUS_TRY(bootstrap_->allGather(ok.data(), sizeof(int32_t)));
  window->shared = std::all_of(ok.begin(), ok.end(), [](int32_t v) { return v != 0; });
  if (!window->shared) {
    window->maps.clear();
    std::fill(window->rankBase.begin(), window->rankBase.end(), nullptr);
    if (why.empty()) why = "another rank could not map every range";
    if (rank_ == 0 || !mapped)
      LOG_INFO(kSubsysColl,
               "rank %d: window %u (%zu bytes) is not read in place (%s): collectives on it copy "
               "as on any buffer",
               rank_, window->id, size, why.c_str());
  } else {
    LOG_INFO(kSubsysColl, "rank %d: window %u: %zu bytes at %p, every rank's range mapped", rank_,
             window->id, size, buff);
  }
  windows_.push_back(std::move(window));
  return static_cast<const HostWindow*>(windows_.back().get());
}

Status Communicator::deregisterWindow(const HostWindow* window) {
  auto it =
      std::find_if(windows_.begin(), windows_.end(),
                   [window](const std::unique_ptr<HostWindow>& w) { return w.get() == window; });
  if (it == windows_.end())
    return invalidArgument("ncclCommWindowDeregister: win is not a window of this communicator");
  windows_.erase(it);
  return Status::ok();
}

WindowRef Communicator::findWindow(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  for (const auto& w : windows_) {
    if (!w->shared || c < w->base) continue;
    const size_t offset = static_cast<size_t>(c - w->base);
    if (offset <= w->bytes && bytes <= w->bytes - offset) return WindowRef{w.get(), offset};
  }
  return WindowRef{};
}

bool Communicator::useWindows(HostWork& w, size_t bytes) {
  if (bytes < windowMinBytes_ || w.args.count == 0 || nranks_ > kMaxWindowRanks) return false;
  const size_t block = w.args.count * dataTypeSize(w.args.type);
  const size_t all = block * static_cast<size_t>(nranks_);
  size_t sendBytes = block, recvBytes = block;
  switch (w.coll) {
    case Collective::kAllReduce:
    case Collective::kReduceScatter:
      // Each rank scales its own input by its own PreMulSum scalar: read elsewhere, it is not.
      if (w.args.op.kind == RedKind::kPreMulSum) return false;
      if (w.coll == Collective::kReduceScatter) sendBytes = all;
      break;
    case Collective::kAllGather:
      recvBytes = all;
      break;
    case Collective::kBroadcast:
      // The root's input is read, the others' outputs written: only those need be in windows.
      if (w.args.root == rank_)
        recvBytes = 0;
      else
        sendBytes = 0;
      break;
    default:
      return false;
  }
  WindowRef send, recv;
  if (sendBytes > 0 && (send = findWindow(w.args.sendbuff, sendBytes)).window == nullptr)
    return false;
  if (recvBytes > 0 && (recv = findWindow(w.args.recvbuff, recvBytes)).window == nullptr)
    return false;
  w.windowed = true;
  w.sendWindow = send;
  w.recvWindow = recv;
  const uint32_t bit = 1u << static_cast<int>(w.coll);
  if ((windowLogged_ & bit) == 0) {
    windowLogged_ |= bit;
    LOG_INFO(kSubsysColl, "rank %d: %s of %zu bytes reads the peers' window buffers in place",
             rank_, collectiveName(w.coll), bytes);
  }
  return true;
}

}  // namespace chorus
