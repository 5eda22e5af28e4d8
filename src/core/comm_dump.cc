// Dumps of pending operations. With CHORUS_DUMP=<dir>, a rank whose collective fails (a timeout,
// a peer that failed, a mismatch) writes what it was waiting for to
// <dir>/chorus-<comm>-rank<r>.txt, and SIGUSR1 makes every communicator of the process write
// one at once (a handler installed when the first communicator starts, which wakes a thread
// that writes them). tools/chorus-waitfor reads the files of all ranks and prints who waits for
// whom and the ranks at the root of it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/param.h"
#include "core/comm.h"
#include "exec/call_tag.h"

namespace chorus {

namespace {

struct DumpRegistry {
  std::mutex mutex;
  std::vector<const Communicator*> comms;
  int pipe[2] = {-1, -1};
};

DumpRegistry& registry() {
  static DumpRegistry* r = new DumpRegistry();  // lives as long as the process
  return *r;
}

void onSignal(int) {
  const int saved = errno;
  const char c = 1;
  ssize_t r = write(registry().pipe[1], &c, 1);
  (void)r;
  errno = saved;
}

void dumpThread() {
  DumpRegistry& reg = registry();
  for (;;) {
    char c;
    ssize_t r = read(reg.pipe[0], &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return;
    std::lock_guard<std::mutex> lock(reg.mutex);
    for (const Communicator* comm : reg.comms) comm->writeDump("signal");
  }
}

// The handler and the thread, once per process.
void startSignalDumps() {
  static std::once_flag once;
  std::call_once(once, [] {
    DumpRegistry& reg = registry();
    if (pipe2(reg.pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      LOG_WARN(kSubsysInit, "CHORUS_DUMP: no pipe for SIGUSR1 dumps (errno %d)", errno);
      return;
    }
    // The reading end blocks; the handler's end must not.
    fcntl(reg.pipe[0], F_SETFL, fcntl(reg.pipe[0], F_GETFL) & ~O_NONBLOCK);
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
    std::thread(dumpThread).detach();
  });
}

}  // namespace

std::string dumpDirectory() {
  return paramString("DUMP");
}

void dumpRegister(const Communicator* comm) {
  if (dumpDirectory().empty()) return;
  startSignalDumps();
  DumpRegistry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.comms.push_back(comm);
}

void dumpUnregister(const Communicator* comm) {
  DumpRegistry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.comms.erase(std::remove(reg.comms.begin(), reg.comms.end(), comm), reg.comms.end());
}

void Communicator::noteCall(const CallTag& tag, Activity activity) {
  // A seqlock (one writer: the thread making the call): odd while the fields change.
  const uint32_t v = callVersion_.load(std::memory_order_relaxed);
  callVersion_.store(v + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  callSeq_.store(tag.seq, std::memory_order_relaxed);
  callCount_.store(tag.count, std::memory_order_relaxed);
  callWhatRoot_.store(uint64_t{tag.what} | uint64_t{static_cast<uint32_t>(tag.root)} << 32,
                      std::memory_order_relaxed);
  callVersion_.store(v + 2, std::memory_order_release);
  activity_.store(activity, std::memory_order_relaxed);
}

CallTag Communicator::currentCall() const {
  // Never two calls mixed (the watch would take that for a mismatch): retried while the
  // writer is between its version stores; none (seq 0) if it never stops.
  for (int tries = 0; tries < 1000; ++tries) {
    const uint32_t v = callVersion_.load(std::memory_order_acquire);
    if ((v & 1) != 0) continue;
    CallTag call;
    call.seq = callSeq_.load(std::memory_order_relaxed);
    call.count = callCount_.load(std::memory_order_relaxed);
    const uint64_t wr = callWhatRoot_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (callVersion_.load(std::memory_order_relaxed) != v) continue;
    call.what = static_cast<uint32_t>(wr);
    call.root = static_cast<int32_t>(static_cast<uint32_t>(wr >> 32));
    return call;
  }
  return CallTag{};
}

std::string Communicator::dumpText(const char* reason, const std::string& error) const {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  const CallTag call = currentCall();
  const uint32_t activity = activity_.load(std::memory_order_relaxed);
  std::string text = "chorus-dump 1\n";
  text += formatString("rank %d\nnranks %d\nhost %s\npid %d\ncomm %s\nreason %s\n", rank_, nranks_,
                       host, static_cast<int>(getpid()), transportCtx_.commTag.c_str(), reason);
  text += formatString("collectives %llu\n", static_cast<unsigned long long>(collectiveCalls_));
  text += formatString("state %s\n", activity == kCollective ? "collective"
                                     : activity == kP2p      ? "send/recv"
                                                             : "idle");
  if (call.seq != 0) text += "call " + describeCall(call) + "\n";
  if (activity != kIdle) {
    const int channels = std::max(
        1, std::min(callChannels_.load(std::memory_order_relaxed), static_cast<int>(kMaxChannels)));
    const uint64_t launch = launch_.load(std::memory_order_relaxed);
    for (int c = 0; c < channels; ++c) {
      // A note of an earlier launch: this channel has not waited in this one.
      const WaitNote& n = notes_[c];
      if (n.launch.load(std::memory_order_relaxed) != launch) continue;
      const uint32_t step = n.step.load(std::memory_order_relaxed);
      const int peer = n.peer.load(std::memory_order_relaxed);
      text += formatString(
          "wait channel %d algo %s step %u peer %d for %s bytes %llu of %llu\n", c,
          n.algo.load(std::memory_order_relaxed), step, peer,
          waitForName(static_cast<WaitFor>(n.waitFor.load(std::memory_order_relaxed))),
          static_cast<unsigned long long>(n.bytesDone.load(std::memory_order_relaxed)),
          static_cast<unsigned long long>(n.bytesTotal.load(std::memory_order_relaxed)));
    }
  }
  Status async = asyncError();
  const std::string why = !async.isOk() ? async.message() : error;
  if (!why.empty()) text += "error " + why + "\n";
  return text;
}

void Communicator::writeDump(const char* reason, const std::string& error) const {
  const std::string dir = dumpDirectory();
  if (dir.empty()) return;
  const std::string text = dumpText(reason, error);
  const std::string name =
      formatString("%s/chorus-%s-rank%d.txt", dir.c_str(), transportCtx_.commTag.c_str(), rank_);
  // Written whole under a temporary name, then renamed, so that a reader never sees half.
  const std::string tmp = name + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    LOG_WARN(kSubsysInit, "rank %d: CHORUS_DUMP: cannot write %s (errno %d)", rank_, tmp.c_str(),
             errno);
    return;
  }
  const bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  if (fclose(f) != 0 || !ok || rename(tmp.c_str(), name.c_str()) != 0) {
    LOG_WARN(kSubsysInit, "rank %d: CHORUS_DUMP: writing %s failed (errno %d)", rank_, name.c_str(),
             errno);
    unlink(tmp.c_str());
    return;
  }
  LOG_WARN(kSubsysInit, "rank %d: pending operations written to %s (%s)", rank_, name.c_str(),
           reason);
}

}  // namespace chorus
