#include "cuda/dev_emulator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "cuda/dev_dispatch.h"
#include "cuda/dev_kernel.h"
#include "cuda/dev_plan.h"
#include "transport/connector.h"
#include "transport/device_proxy.h"

namespace chorus {
namespace dev {

namespace {

// A reusable barrier of a fixed number of threads (a block's __syncthreads).
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait() {
    const uint32_t gen = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == gen) std::this_thread::yield();
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
};

// Per block: the two accumulators syncOr alternates between.
struct HostBlockVotes {
  std::atomic<int> any[2] = {{0}, {0}};
};

struct HostBlock {
  int tid;
  int nthreads;
  SpinBarrier* barrier;
  BlockShared* shared;
  HostBlockVotes* votes;
  int parity = 0;  // every thread of a block calls syncOr equally often
  void sync() { barrier->wait(); }
  // __syncthreads_or: a barrier, the vote read, and a second barrier before the accumulator
  // is cleared for its next use.
  bool syncOr(bool v) {
    std::atomic<int>& any = votes->any[parity];
    parity ^= 1;
    if (v) any.store(1, std::memory_order_relaxed);
    barrier->wait();
    const bool result = any.load(std::memory_order_relaxed) != 0;
    barrier->wait();
    if (tid == 0) any.store(0, std::memory_order_relaxed);
    return result;
  }
};

template <class F, RedKind K>
void runBlocks(const Launch& launch, int threadsPerBlock) {
  const int nblocks = launch.p2p != 0 ? launch.nworks : launch.comm->nchannels;
  std::vector<std::unique_ptr<SpinBarrier>> barriers;
  std::vector<BlockShared> shared(static_cast<size_t>(nblocks));
  std::vector<HostBlockVotes> votes(static_cast<size_t>(nblocks));
  for (int b = 0; b < nblocks; ++b) barriers.emplace_back(new SpinBarrier(threadsPerBlock));
  auto body = [&](int b, int t) {
    HostBlock block{t, threadsPerBlock, barriers[static_cast<size_t>(b)].get(),
                    &shared[static_cast<size_t>(b)], &votes[static_cast<size_t>(b)]};
    runChannel<F, K>(launch, b, block);
  };
  std::vector<std::thread> threads;
  for (int b = 0; b < nblocks; ++b)
    for (int t = 0; t < threadsPerBlock; ++t)
      if (b != 0 || t != 0) threads.emplace_back(body, b, t);
  body(0, 0);
  for (std::thread& th : threads) th.join();
}

}  // namespace

struct EmuClique::FifoMemory {
  // Per protocol: slots, then tail and head on lines of their own; the ends' steps apart.
  std::vector<char> slots[kNumProtos];
  // Simple slots in memfd memory instead (dmabufSlots): the descriptor and its mapping.
  int fd = -1;
  char* mapping = nullptr;
  size_t mappedBytes = 0;
  FifoMemory() = default;
  FifoMemory(const FifoMemory&) = delete;
  FifoMemory& operator=(const FifoMemory&) = delete;
  ~FifoMemory() {
    if (mapping != nullptr) munmap(mapping, mappedBytes);
    if (fd >= 0) close(fd);
  }
  alignas(64) uint64_t tail[kNumProtos][8] = {};
  alignas(64) uint64_t head[kNumProtos][8] = {};
  uint64_t sendStep[kNumProtos] = {};
  uint64_t recvStep[kNumProtos] = {};
  std::vector<uint32_t> sizes[kNumProtos];  // proxied links: what the sender wrote per slot
};

// A host connector FIFO between two proxies, as a host transport would build one.
struct EmuClique::HostFifo {
  ::chorus::FifoMemory memory;
  SendConnector send;
  RecvConnector recv;
  explicit HostFifo(const FifoGeometry& geometry) {
    FifoHeader* header;
    char* data;
    memory = allocLocalFifo(geometry, nullptr, &header, &data);
    send = SendConnector(memory.get());
    recv = RecvConnector(memory.get());
  }
};

void EmuClique::allocSlots(FifoMemory& m, int p, size_t bytes, const EmuGeometry& g) {
  if (!(g.dmabufSlots && p == static_cast<int>(Proto::kSimple) && bytes > 0)) {
    m.slots[p].assign(bytes, 0);
    return;
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  m.mappedBytes = (bytes + page - 1) / page * page;
  m.fd = memfd_create("chorus-emu-slots", MFD_CLOEXEC);
  if (m.fd < 0 || ftruncate(m.fd, static_cast<off_t>(m.mappedBytes)) != 0)
    throw std::runtime_error(std::string("memfd for emulated slots: ") + strerror(errno));
  void* at = mmap(nullptr, m.mappedBytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (at == MAP_FAILED)
    throw std::runtime_error(std::string("mapping emulated slots: ") + strerror(errno));
  m.mapping = static_cast<char*>(at);
}

// One end's view of the FIFO of protocol p in m; step is that end's own position.
Fifo EmuClique::fifoView(FifoMemory& m, int p, uint64_t* step, const EmuGeometry& g) {
  Fifo f;
  const auto base = reinterpret_cast<uintptr_t>(
      m.mapping != nullptr && p == static_cast<int>(Proto::kSimple) ? m.mapping
                                                                    : m.slots[p].data());
  f.slots = reinterpret_cast<char*>((base + 15) & ~uintptr_t(15));
  f.tail = &m.tail[p][0];
  f.head = &m.head[p][0];
  f.step = step;
  f.nslots = g.nslots[p];
  f.slotBytes = g.slotBytes[p];
  if (!m.sizes[p].empty()) f.sizes = m.sizes[p].data();
  return f;
}

EmuClique::FifoMemory& EmuClique::newSenderMemory(const EmuGeometry& g) {
  auto m = std::make_unique<FifoMemory>();
  for (int p = 0; p < kNumProtos; ++p) {
    allocSlots(*m, p, static_cast<size_t>(g.nslots[p]) * g.slotBytes[p] + 16, g);
    m->sizes[p].assign(g.nslots[p], 0);
  }
  FifoMemory& ref = *m;
  local_.push_back(std::move(m));
  return ref;
}

void EmuClique::bridge(FifoMemory& local, FifoMemory& remote, int sender, int receiver, int channel,
                       const EmuGeometry& g) {
  for (int p = 0; p < kNumProtos; ++p) {
    SendConnector* send = nullptr;
    RecvConnector* recv = nullptr;
    // A FIFO of the clique's own has no network to place GPU memory.
    const bool supplied = g.hostLinks && g.hostLinks(sender, receiver, channel, p, &send, &recv);
    if (!supplied) {
      hostFifos_.push_back(std::make_unique<HostFifo>(FifoGeometry{g.nslots[p], g.slotBytes[p]}));
      send = &hostFifos_.back()->send;
      recv = &hostFifos_.back()->recv;
    }
    const std::string name = (channel < 0 ? "link " + std::to_string(-1 - channel) + " "
                                          : "ring channel " + std::to_string(channel) + " ") +
                             std::to_string(sender) + " -> " + std::to_string(receiver) +
                             (p == 0 ? ", LL" : ", Simple");
    const Fifo out = fifoView(local, p, &local.sendStep[p], g);
    const Fifo in = fifoView(remote, p, &remote.recvStep[p], g);
    const bool place = g.placeSimple && p == static_cast<int>(Proto::kSimple);
    auto memoryOf = [&](const Fifo& f, const FifoMemory& m, int rank, int peer, bool send) {
      SlotMemory mem;
      mem.data = f.slots;
      mem.nslots = f.nslots;
      mem.slotBytes = f.slotBytes;
      mem.device = place && supplied && g.gpuMemory && g.gpuMemory(rank, peer, send);
      mem.dmabufFd = m.fd;
      mem.dmabufOffset = m.mapping != nullptr ? static_cast<uint64_t>(f.slots - m.mapping) : 0;
      return mem;
    };
    const SlotMemory outMem = memoryOf(out, local, sender, receiver, true),
                     inMem = memoryOf(in, remote, receiver, sender, false);
    Status s =
        proxies_[static_cast<size_t>(sender)]->addSend(out, send, name, place ? &outMem : nullptr);
    if (s.isOk())
      s = proxies_[static_cast<size_t>(receiver)]->addRecv(recv, in, static_cast<Proto>(p), name,
                                                           place ? &inMem : nullptr);
    if (!s.isOk()) throw std::logic_error(s.message());
  }
}

EmuClique::EmuClique(int nranks, const EmuGeometry& g, const std::vector<int>& ringOrder)
    : nranks_(nranks),
      barriers_(static_cast<size_t>(nranks) * 8, 0),
      errors_(static_cast<size_t>(nranks), 0) {
  for (int i = 0; i < nranks; ++i)
    ring_.push_back(ringOrder.empty() ? i : ringOrder[static_cast<size_t>(i)]);
  if (g.proxied)
    for (int r = 0; r < nranks; ++r) proxies_.push_back(std::make_unique<DeviceProxy>());
  // One FIFO per (receiving rank, channel): rank r receives from its ring predecessor.
  for (int r = 0; r < nranks; ++r)
    for (int c = 0; c < g.nchannels; ++c) {
      auto m = std::make_unique<FifoMemory>();
      for (int p = 0; p < kNumProtos; ++p)
        allocSlots(*m, p, static_cast<size_t>(g.nslots[p]) * g.slotBytes[p] + 16, g);
      memory_.push_back(std::move(m));
    }
  comms_.resize(static_cast<size_t>(nranks));
  auto fifoOf = [&](int rank, int c) -> FifoMemory& {
    return *memory_[static_cast<size_t>(rank * g.nchannels + c)];
  };
  for (int pos = 0; pos < nranks; ++pos) {
    const int rank = ring_[static_cast<size_t>(pos)];
    const int next = ring_[static_cast<size_t>((pos + 1) % nranks)];
    auto comm = std::make_unique<Comm>();
    comm->rank = rank;
    comm->nranks = nranks;
    comm->ringIndex = pos;
    comm->nchannels = g.nchannels;
    comm->ringRanks = ring_.data();
    comm->barrier = &barriers_[static_cast<size_t>(rank) * 8];
    comm->abortFlag = &abortFlag_;
    comm->errorFlag = &errors_[static_cast<size_t>(rank)];
    for (int c = 0; c < g.nchannels; ++c) {
      FifoMemory& in = fifoOf(rank, c);  // filled by the predecessor
      // The successor's, or one of this rank's own that a proxy forwards into it (one rank
      // alone has no ring link).
      const bool viaProxy = g.proxied && nranks > 1;
      FifoMemory& out = viaProxy ? newSenderMemory(g) : fifoOf(next, c);
      if (viaProxy) bridge(out, fifoOf(next, c), rank, next, c, g);
      for (int p = 0; p < kNumProtos; ++p) {
        comm->channels[c].send[p] = fifoView(out, p, &out.sendStep[p], g);
        comm->channels[c].recv[p] = fifoView(in, p, &in.recvStep[p], g);
      }
    }
    comms_[static_cast<size_t>(rank)] = std::move(comm);
  }
  // Links between every pair, p2pParts for sends and receives, then two per tree channel and
  // one per recursive-doubling channel: rank r's FIFOs for its receives from s.
  if (g.treeChannels < 0 || g.treeChannels > std::min(kMaxTreeChannels, g.nchannels) ||
      g.rdChannels < 0 || g.rdChannels > std::min(kMaxRdChannels, g.nchannels))
    throw std::logic_error("tree and recursive-doubling channels must be in [0, nchannels]");
  const int parts = std::max(1, g.p2pParts) + (nranks > 1 ? 2 * g.treeChannels + g.rdChannels : 0);
  for (int r = 0; r < nranks; ++r)
    for (int s = 0; s < nranks; ++s)
      for (int part = 0; part < parts; ++part) {
        auto m = std::make_unique<FifoMemory>();
        for (int p = 0; p < kNumProtos; ++p)
          allocSlots(*m, p, r == s ? 0 : static_cast<size_t>(g.nslots[p]) * g.slotBytes[p] + 16, g);
        peerMemory_.push_back(std::move(m));
      }
  auto linkOf = [&](int receiver, int sender, int part) -> FifoMemory& {
    return *peerMemory_[static_cast<size_t>((receiver * nranks + sender) * parts + part)];
  };
  peers_.resize(static_cast<size_t>(nranks));
  for (int me = 0; me < nranks; ++me) {
    std::vector<Channel>& links = peers_[static_cast<size_t>(me)];
    links.resize(static_cast<size_t>(nranks) * parts);
    for (int other = 0; other < nranks; ++other) {
      if (other == me) continue;
      for (int part = 0; part < parts; ++part) {
        FifoMemory& in = linkOf(me, other, part);
        FifoMemory& out = g.proxied ? newSenderMemory(g) : linkOf(other, me, part);
        if (g.proxied) bridge(out, linkOf(other, me, part), me, other, -1 - part, g);
        Channel& link = links[static_cast<size_t>(other * parts + part)];
        for (int p = 0; p < kNumProtos; ++p) {
          link.send[p] = fifoView(out, p, &out.sendStep[p], g);
          link.recv[p] = fifoView(in, p, &in.recvStep[p], g);
        }
      }
    }
    Comm& c = *comms_[static_cast<size_t>(me)];
    c.peers = links.data();
    c.p2pParts = std::max(1, g.p2pParts);
    c.peerLinks = parts;
    if (nranks > 1) {
      c.treeChannels = g.treeChannels;
      for (int t = 0; t < kDevTrees && g.treeChannels > 0; ++t)
        c.trees[t] = devTreeNode(nranks, me, t);
      c.rdChannels = g.rdChannels;
    }
  }
  if (g.directBytes > 0 && nranks > 1) {
    if (nranks > kMaxDirectRanks || g.directBytes % 256 != 0)
      throw std::logic_error(
          "direct regions need at most 8 ranks and buffers of 256-byte multiples");
    const uint64_t channelBytes = directChannelBytes(g.directBytes);
    for (int r = 0; r < nranks; ++r)
      directRegions_.emplace_back(channelBytes * static_cast<uint64_t>(g.nchannels) / 8 + 2, 0);
    for (int r = 0; r < nranks; ++r) {
      Comm& c = *comms_[static_cast<size_t>(r)];
      c.directRanks = nranks;
      c.direct.channelBytes = channelBytes;
      c.direct.bufferBytes = g.directBytes;
      for (int q = 0; q < nranks; ++q) {
        // 16-byte aligned, as device allocations are (and more).
        const auto at = reinterpret_cast<uintptr_t>(directRegions_[static_cast<size_t>(q)].data());
        c.direct.regions[q] = reinterpret_cast<char*>((at + 15) & ~uintptr_t(15));
      }
    }
  }
  for (auto& proxy : proxies_) proxy->start();
}

EmuClique::~EmuClique() {
  for (auto& proxy : proxies_) proxy->stop();
}

int EmuClique::placedLinks() const {
  int n = 0;
  for (const auto& proxy : proxies_) n += proxy->placedLinks();
  return n;
}

std::string EmuClique::proxyError() const {
  for (const auto& proxy : proxies_) {
    Status s = proxy->error();
    if (!s.isOk()) return s.message();
  }
  return std::string();
}

bool emuRunLaunch(const Launch& launch, int threadsPerBlock) {
  if (launch.nworks == 0) return true;
  const Work& w = launch.works[0];
  return withKernelKey(static_cast<DataType>(w.type), static_cast<RedKind>(w.redKind),
                       [&](auto format, auto kind) {
                         using F = typename decltype(format)::Format;
                         runBlocks<F, decltype(kind)::kKind>(launch, threadsPerBlock);
                       });
}

}  // namespace dev
}  // namespace chorus
