// TCP over loopback through Chorus's Socket (non-blocking, TCP_NODELAY, exact sends and receives
// that poll when the kernel pushes back), between two threads: the round trip of an 8-byte
// message and the throughput of a stream of 1 MiB messages.
#include <sys/socket.h>

#include <atomic>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/socket.h"
#include "common/wait.h"
#include "micro_main.h"

namespace chorus::micro {
namespace {

// A peer that stops answering fails the benchmark instead of hanging it.
constexpr double kTimeoutSeconds = 30;
constexpr size_t kMessageBytes = 8;
constexpr size_t kStreamMessageBytes = size_t(1) << 20;

// Both ends of one loopback connection, with the transport's default socket options.
struct Connection {
  Socket here;   // the benchmark thread's end
  Socket there;  // the peer thread's end
};

Result<Connection> connectLoopback() {
  CHORUS_ASSIGN_OR_RETURN(Listener listener, Listener::open(SocketAddress::loopback(AF_INET, 0)));
  Waiter waiter(kTimeoutSeconds, nullptr);
  // The kernel completes the handshake from the backlog: connect first, then accept.
  CHORUS_ASSIGN_OR_RETURN(Socket there, connectSocket(listener.address(), waiter));
  CHORUS_ASSIGN_OR_RETURN(Socket here, listener.accept(waiter));
  return Connection{std::move(here), std::move(there)};
}

// Runs `peer` on another thread while `body` runs here. A side that fails raises the abort flag
// so that the other stops waiting; the first failure is reported on `state`.
template <class Peer, class Body>
void runWithPeer(benchmark::State& state, AbortFlag& abort, Peer peer, Body body) {
  Status peerStatus;
  std::thread thread([&] {
    peerStatus = peer();
    if (!peerStatus.isOk()) abort.raise();
  });
  Status status = body();
  if (!status.isOk()) abort.raise();
  thread.join();
  if (!status.isOk())
    state.SkipWithError(status.message().c_str());
  else if (!peerStatus.isOk())
    state.SkipWithError(("peer: " + peerStatus.message()).c_str());
}

void benchPingPong(benchmark::State& state) {
  Result<Connection> connection = connectLoopback();
  if (!connection.isOk()) {
    state.SkipWithError(connection.status().message().c_str());
    return;
  }
  Socket& here = connection.value().here;
  Socket& there = connection.value().there;
  const int64_t count = state.max_iterations;
  AbortFlag abort;
  auto echo = [&]() -> Status {
    char buffer[kMessageBytes];
    for (int64_t i = 0; i < count; ++i) {
      Waiter waiter(kTimeoutSeconds, &abort);
      CHORUS_TRY(there.recvAll(buffer, sizeof(buffer), waiter));
      CHORUS_TRY(there.sendAll(buffer, sizeof(buffer), waiter));
    }
    return Status::ok();
  };
  auto body = [&]() -> Status {
    char message[kMessageBytes] = {'c', 'h', 'o', 'r', 'u', 's', '!', 0};
    char reply[kMessageBytes];
    for (auto _ : state) {
      Waiter waiter(kTimeoutSeconds, &abort);
      Status s = here.sendAll(message, sizeof(message), waiter);
      if (s.isOk()) s = here.recvAll(reply, sizeof(reply), waiter);
      if (!s.isOk()) return s;
    }
    benchmark::DoNotOptimize(reply);
    return Status::ok();
  };
  runWithPeer(state, abort, echo, body);
  if (state.error_occurred()) return;
  setOneWayLatency(state);
}

void benchStream(benchmark::State& state) {
  Result<Connection> connection = connectLoopback();
  if (!connection.isOk()) {
    state.SkipWithError(connection.status().message().c_str());
    return;
  }
  Socket& here = connection.value().here;
  Socket& there = connection.value().there;
  const int64_t count = state.max_iterations;
  AbortFlag abort;
  std::atomic<bool> go{false};
  std::vector<char> source(kStreamMessageBytes, 1);
  std::vector<char> destination(kStreamMessageBytes);
  auto send = [&]() -> Status {
    while (!go.load(std::memory_order_acquire)) {
      if (abort.isRaised()) return invalidUsage("aborted before the stream started");
      std::this_thread::yield();
    }
    for (int64_t i = 0; i < count; ++i) {
      Waiter waiter(kTimeoutSeconds, &abort);
      CHORUS_TRY(there.sendAll(source.data(), source.size(), waiter));
    }
    return Status::ok();
  };
  auto body = [&]() -> Status {
    go.store(true, std::memory_order_release);
    for (auto _ : state) {
      Waiter waiter(kTimeoutSeconds, &abort);
      CHORUS_TRY(here.recvAll(destination.data(), destination.size(), waiter));
    }
    return Status::ok();
  };
  runWithPeer(state, abort, send, body);
  if (state.error_occurred()) return;
  setBytesPerSecond(state, static_cast<double>(kStreamMessageBytes));
}

void registerAll() {
  benchmark::RegisterBenchmark(("socket/pingpong/" + sizeLabel(kMessageBytes)).c_str(),
                               benchPingPong)
      ->UseRealTime();
  benchmark::RegisterBenchmark(("socket/stream/" + sizeLabel(kStreamMessageBytes)).c_str(),
                               benchStream)
      ->UseRealTime();
}

}  // namespace
}  // namespace chorus::micro

int main(int argc, char** argv) {
  chorus::micro::registerAll();
  return chorus::micro::runBenchmarks(argc, argv, {"--benchmark_min_time=0.2"});
}
