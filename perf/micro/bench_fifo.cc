// The shared-memory connector FIFO between two threads and between two processes: the one-way
// latency of an 8-byte message (ping-pong through one FIFO in each direction) and the throughput
// of a stream of slots in one direction, copied in by the sender and out by the receiver as the
// shared-memory transport does.
#include <sched.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/wait.h"
#include "micro_main.h"
#include "transport/connector.h"

namespace chorus::micro {
namespace {

// The data path's waiting policy at Chorus's defaults (CHORUS_SPIN_COUNT, CHORUS_SPIN_YIELD_US).
constexpr int64_t kSpinCount = 2000;
constexpr int64_t kYieldMicros = 1000;
// A peer that stops answering fails the benchmark instead of hanging it.
constexpr double kTimeoutSeconds = 30;
// Slots of the streaming FIFO (CHORUS_STEPS default).
constexpr int kStreamSlots = 8;
constexpr size_t kMessageBytes = 8;

enum class PeerKind { kThread, kProcess };

const char* peerKindName(PeerKind kind) {
  return kind == PeerKind::kThread ? "threads" : "processes";
}

// What the two ends share besides the FIFOs.
struct Control {
  AbortFlag abort;              // raised by a failing side: ends the other side's waits
  std::atomic<uint32_t> go{0};  // lets the streaming sender start with the timed loop
};

// One MAP_SHARED mapping, so that a forked child sees the same memory, holding the control block
// and two FIFOs: forward (benchmark -> peer) and backward (peer -> benchmark).
class SharedFifos {
 public:
  explicit SharedFifos(const FifoGeometry& geometry)
      : fifoBytes_(pageRound(geometry.totalBytes())), bytes_(kControlBytes + 2 * fifoBytes_) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    memory_ = static_cast<char*>(p);
    new (memory_) Control();
    fifoInit(forward(), geometry);
    fifoInit(backward(), geometry);
  }
  ~SharedFifos() {
    if (memory_ != nullptr) munmap(memory_, bytes_);
  }
  SharedFifos(const SharedFifos&) = delete;
  SharedFifos& operator=(const SharedFifos&) = delete;

  bool valid() const { return memory_ != nullptr; }
  Control& control() const { return *reinterpret_cast<Control*>(memory_); }
  void* forward() const { return memory_ + kControlBytes; }
  void* backward() const { return memory_ + kControlBytes + fifoBytes_; }

 private:
  static constexpr size_t kControlBytes = 4096;
  static size_t pageRound(size_t bytes) { return (bytes + 4095) & ~size_t(4095); }

  size_t fifoBytes_;
  size_t bytes_;
  char* memory_ = nullptr;
};

Waiter dataWaiter(const Control& control) {
  Waiter waiter(kTimeoutSeconds, &control.abort, kSpinCount);
  waiter.setYieldMicros(kYieldMicros);
  return waiter;
}

// Sends each of `count` messages arriving on the forward FIFO back on the backward one.
bool echo(const SharedFifos& fifos, int64_t count) {
  RecvConnector in(fifos.forward());
  SendConnector out(fifos.backward());
  const Control& control = fifos.control();
  for (int64_t i = 0; i < count; ++i) {
    Code failure = Code::kSuccess;
    size_t bytes = 0;
    Waiter recvWaiter = dataWaiter(control);
    const void* message = in.wait(recvWaiter, &bytes, &failure);
    if (message == nullptr) return false;
    Waiter sendWaiter = dataWaiter(control);
    void* slot = out.acquire(sendWaiter, &failure);
    if (slot == nullptr) return false;
    std::memcpy(slot, message, bytes);
    out.post(bytes);
    in.release();
  }
  return true;
}

// Fills and posts `count` slots of `bytes` on the forward FIFO once the receiver says go.
bool streamSend(const SharedFifos& fifos, const char* source, size_t bytes, int64_t count) {
  SendConnector out(fifos.forward());
  Control& control = fifos.control();
  while (control.go.load(std::memory_order_acquire) == 0) {
    if (control.abort.isRaised()) return false;
    sched_yield();
  }
  for (int64_t i = 0; i < count; ++i) {
    Code failure = Code::kSuccess;
    Waiter waiter = dataWaiter(control);
    void* slot = out.acquire(waiter, &failure);
    if (slot == nullptr) return false;
    std::memcpy(slot, source, bytes);
    out.post(bytes);
  }
  return true;
}

// Runs `peer` on another thread or in a forked child while `body` runs here. A side that fails
// raises the abort flag so that the other stops waiting; the result is whether both succeeded.
bool runWithPeer(PeerKind kind, const SharedFifos& fifos, const std::function<bool()>& peer,
                 const std::function<bool()>& body) {
  AbortFlag& abort = fifos.control().abort;
  if (kind == PeerKind::kThread) {
    bool peerOk = false;
    std::thread thread([&] {
      peerOk = peer();
      if (!peerOk) abort.raise();
    });
    bool ok = body();
    if (!ok) abort.raise();
    thread.join();
    return ok && peerOk;
  }
  pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    bool ok = peer();
    if (!ok) abort.raise();
    _exit(ok ? 0 : 1);  // no exit handlers, no second flush of the parent's stdio buffers
  }
  bool ok = body();
  if (!ok) abort.raise();
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return false;
  }
  return ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void benchPingPong(benchmark::State& state, PeerKind kind) {
  SharedFifos fifos(fifoGeometry(2 * 4096, 2).value());
  if (!fifos.valid()) {
    state.SkipWithError("mmap of the FIFOs failed");
    return;
  }
  const int64_t count = state.max_iterations;
  char message[kMessageBytes] = {'c', 'h', 'o', 'r', 'u', 's', '!', 0};
  char reply[kMessageBytes];
  auto body = [&] {
    SendConnector out(fifos.forward());
    RecvConnector in(fifos.backward());
    const Control& control = fifos.control();
    for (auto _ : state) {
      Code failure = Code::kSuccess;
      Waiter sendWaiter = dataWaiter(control);
      void* slot = out.acquire(sendWaiter, &failure);
      if (slot == nullptr) {
        state.SkipWithError("acquiring a slot failed");
        return false;
      }
      std::memcpy(slot, message, kMessageBytes);
      out.post(kMessageBytes);
      Waiter recvWaiter = dataWaiter(control);
      size_t bytes = 0;
      const void* answer = in.wait(recvWaiter, &bytes, &failure);
      if (answer == nullptr) {
        state.SkipWithError("waiting for the echo failed");
        return false;
      }
      std::memcpy(reply, answer, bytes);
      in.release();
    }
    return true;
  };
  bool ok = runWithPeer(
      kind, fifos, [&] { return echo(fifos, count); }, body);
  if (!ok) {
    if (!state.error_occurred()) state.SkipWithError("the echoing peer failed");
    return;
  }
  benchmark::DoNotOptimize(reply);
  setOneWayLatency(state);
}

void benchStream(benchmark::State& state, PeerKind kind, size_t slotBytes) {
  Result<FifoGeometry> geometry = fifoGeometry(int64_t(kStreamSlots) * slotBytes, kStreamSlots);
  if (!geometry.isOk() || geometry.value().slotBytes != slotBytes) {
    state.SkipWithError("no FIFO geometry with this slot size");
    return;
  }
  SharedFifos fifos(geometry.value());
  if (!fifos.valid()) {
    state.SkipWithError("mmap of the FIFOs failed");
    return;
  }
  const int64_t count = state.max_iterations;
  std::vector<char> source(slotBytes, 1);
  std::vector<char> destination(slotBytes);
  auto body = [&] {
    RecvConnector in(fifos.forward());
    Control& control = fifos.control();
    control.go.store(1, std::memory_order_release);
    for (auto _ : state) {
      Code failure = Code::kSuccess;
      Waiter waiter = dataWaiter(control);
      size_t bytes = 0;
      const void* slot = in.wait(waiter, &bytes, &failure);
      if (slot == nullptr) {
        state.SkipWithError("waiting for a slot failed");
        return false;
      }
      std::memcpy(destination.data(), slot, bytes);
      benchmark::ClobberMemory();
      in.release();
    }
    return true;
  };
  bool ok = runWithPeer(
      kind, fifos, [&] { return streamSend(fifos, source.data(), slotBytes, count); }, body);
  if (!ok) {
    if (!state.error_occurred()) state.SkipWithError("the sending peer failed");
    return;
  }
  setBytesPerSecond(state, static_cast<double>(slotBytes));
}

void registerAll() {
  for (PeerKind kind : {PeerKind::kThread, PeerKind::kProcess}) {
    std::string ping =
        std::string("fifo/pingpong/") + peerKindName(kind) + "/" + sizeLabel(kMessageBytes);
    benchmark::RegisterBenchmark(ping.c_str(), benchPingPong, kind)->UseRealTime();
    for (size_t slot = size_t(8) << 10; slot <= (size_t(1) << 20); slot *= 2) {
      std::string name = std::string("fifo/stream/") + peerKindName(kind) + "/" + sizeLabel(slot);
      benchmark::RegisterBenchmark(name.c_str(), benchStream, kind, slot)->UseRealTime();
    }
  }
}

}  // namespace
}  // namespace chorus::micro

int main(int argc, char** argv) {
  chorus::micro::registerAll();
  return chorus::micro::runBenchmarks(argc, argv, {"--benchmark_min_time=0.2"});
}
