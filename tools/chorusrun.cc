// chorusrun: start N ranks of a program on this host, wired up for a Chorus (or NCCL) rendezvous,
// each rank's output relayed whole lines at a time (tagged with its rank on request) and the
// whole job torn down when one rank fails.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 1024;
constexpr auto kKillGrace = std::chrono::seconds(3);
// Once every rank has exited, how long output from left-over descendants is still relayed.
constexpr auto kDrainGrace = std::chrono::seconds(1);
// A line longer than this is relayed in pieces rather than buffered without bound.
constexpr size_t kMaxLine = 1 << 20;

void usage(FILE* out) {
  std::fprintf(
      out,
      "usage: chorusrun -n N [options] [--] cmd [args...]\n"
      "\n"
      "Starts N ranks of cmd on this host. Each rank gets CHORUS_RANK, CHORUS_NRANKS,\n"
      "CHORUS_LOCAL_RANK, CHORUS_LOCAL_NRANKS, NCCL_COMM_ID=127.0.0.1:<free port> (unless\n"
      "CHORUS_COMM_ID or NCCL_COMM_ID is already set) and CHORUS_COMM_SECRET (unless set).\n"
      "Ranks read stdin from /dev/null. If a rank fails, the others get SIGTERM (after\n"
      "--linger seconds), then SIGKILL %d s later, and chorusrun exits with the first\n"
      "failing rank's status (128+signal for a signal).\n"
      "\n"
      "options:\n"
      "  -n, --nranks N       number of ranks, 1..%d (required)\n"
      "  -x VAR=VALUE         set VAR in every rank's environment (repeatable)\n"
      "  --timeout SECONDS    terminate all ranks after SECONDS; exit status 124\n"
      "  --linger SECONDS     once a rank failed, leave the others SECONDS to end on their\n"
      "                       own (and report their own errors) before SIGTERM (default 0)\n"
      "  --bind cpu|none      cpu (default): bind each rank to a block of the CPUs chorusrun\n"
      "                       may use, in rank order: C/N of them each for N ranks on C CPUs,\n"
      "                       one CPU shared by consecutive ranks when N > C; none: no binding\n"
      "  --tag-output         prefix each relayed output line with \"[rank] \" (by default\n"
      "                       lines are relayed as the ranks wrote them, as mpirun does)\n"
      "  --no-prefix          no prefix (the default)\n"
      "  -h, --help           show this help\n",
      static_cast<int>(kKillGrace.count()), kMaxRanks);
}

[[noreturn]] void usageError(const std::string& message) {
  std::fprintf(stderr, "chorusrun: %s\n(see chorusrun --help)\n", message.c_str());
  std::exit(2);
}

struct Options {
  int nranks = 0;
  bool prefix = false;
  double timeoutSec = 0;
  double lingerSec = 0;
  bool bind = true;
  std::vector<std::string> extraEnv;
  std::vector<char*> command;  // null-terminated for execvp
};

Options parseOptions(int argc, char** argv) {
  Options opt;
  int i = 1;
  auto value = [&](const char* name) -> const char* {
    if (i + 1 >= argc) usageError(std::string("option ") + name + " needs a value");
    return argv[++i];
  };
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-') break;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    } else if (arg == "-n" || arg == "--nranks" || arg == "-np") {
      const char* v = value(arg.c_str());
      char* end = nullptr;
      errno = 0;
      long n = std::strtol(v, &end, 10);
      if (errno != 0 || end == v || *end != '\0' || n < 1 || n > kMaxRanks) {
        std::fprintf(stderr, "chorusrun: -n must be an integer between 1 and %d, got '%s'\n",
                     kMaxRanks, v);
        std::exit(2);
      }
      opt.nranks = static_cast<int>(n);
    } else if (arg == "-x") {
      const char* v = value("-x");
      const char* eq = std::strchr(v, '=');
      if (eq == nullptr || eq == v)
        usageError(std::string("-x expects VAR=VALUE, got '") + v + "'");
      opt.extraEnv.emplace_back(v);
    } else if (arg == "--timeout") {
      const char* v = value("--timeout");
      char* end = nullptr;
      double t = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(t > 0))
        usageError(std::string("--timeout expects seconds > 0, got '") + v + "'");
      opt.timeoutSec = t;
    } else if (arg == "--linger") {
      const char* v = value("--linger");
      char* end = nullptr;
      double t = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(t >= 0) || t > 3600)
        usageError(std::string("--linger expects seconds from 0 to 3600, got '") + v + "'");
      opt.lingerSec = t;
    } else if (arg == "--tag-output") {
      opt.prefix = true;
    } else if (arg == "--no-prefix") {
      opt.prefix = false;
    } else if (arg == "--bind") {
      std::string v = value("--bind");
      if (v != "cpu" && v != "none") usageError("--bind expects cpu or none, got '" + v + "'");
      opt.bind = v == "cpu";
    } else {
      usageError("unknown option '" + arg + "'");
    }
  }
  if (opt.nranks == 0) usageError("missing -n N (the number of ranks)");
  if (i >= argc) usageError("missing the command to run");
  for (; i < argc; ++i) opt.command.push_back(argv[i]);
  opt.command.push_back(nullptr);
  return opt;
}

// The signal handler's only job: wake the poll loop through this pipe.
int gSignalPipe[2] = {-1, -1};

void onSignal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  ssize_t ignored = write(gSignalPipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

void writeAll(int fd, const char* data, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, -1);
        continue;
      }
      return;  // e.g. EPIPE: our reader went away; keep running the job regardless
    }
    data += n;
    len -= static_cast<size_t>(n);
  }
}

// One output pipe of one rank, relayed line by line to our stdout or stderr.
struct Stream {
  int fd = -1;
  int outFd = 1;
  std::string prefix;
  std::string pending;

  void emit(const char* data, size_t len) {
    std::string line;
    line.reserve(prefix.size() + len + 1);
    line += prefix;
    line.append(data, len);
    line += '\n';
    writeAll(outFd, line.data(), line.size());
  }

  void consume(const char* data, size_t len) {
    pending.append(data, len);
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(pending.data() + start, nl - start);
    pending.erase(0, start);
    if (pending.size() >= kMaxLine) {
      emit(pending.data(), pending.size());
      pending.clear();
    }
  }

  // Reads what is available now; closes the stream at end of file.
  void drain() {
    char buf[65536];
    while (fd >= 0) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        consume(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        close();
      } else if (errno != EINTR) {
        if (errno != EAGAIN) close();
        return;
      }
    }
  }

  void close() {
    if (fd < 0) return;
    ::close(fd);
    fd = -1;
    if (!pending.empty()) emit(pending.data(), pending.size());
    pending.clear();
  }
};

struct Rank {
  pid_t pid = -1;  // also its process group
  bool running = false;
  int status = 0;
  Stream out, err;
};

std::string randomHex(size_t bytes) {
  std::vector<unsigned char> raw(bytes);
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::fprintf(stderr, "chorusrun: getrandom failed: %s\n", std::strerror(errno));
      std::exit(2);
    }
    got += static_cast<size_t>(n);
  }
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : raw) {
    hex += digits[c >> 4];
    hex += digits[c & 15];
  }
  return hex;
}

// A port on loopback that is free right now; the ranks' rendezvous binds it shortly after.
int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

void prepareEnvironment(const Options& opt) {
  for (const std::string& kv : opt.extraEnv) {
    size_t eq = kv.find('=');
    setenv(kv.substr(0, eq).c_str(), kv.c_str() + eq + 1, 1);
  }
  if (std::getenv("CHORUS_COMM_ID") == nullptr && std::getenv("NCCL_COMM_ID") == nullptr) {
    int port = freeLoopbackPort();
    if (port < 0) {
      std::fprintf(stderr, "chorusrun: cannot find a free port on 127.0.0.1: %s\n",
                   std::strerror(errno));
      std::exit(2);
    }
    setenv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  }
  if (std::getenv("CHORUS_COMM_SECRET") == nullptr)
    setenv("CHORUS_COMM_SECRET", randomHex(16).c_str(), 1);
}

// Every rank holds two pipes, so make sure the descriptor limit allows the job.
void raiseFdLimit(int nranks) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t need = static_cast<rlim_t>(4 * nranks + 64);
  if (rl.rlim_cur >= need) return;
  rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? need : std::min(need, rl.rlim_max);
  setrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < need) {
    std::fprintf(stderr,
                 "chorusrun: %d ranks need about %lu file descriptors but the limit is %lu; "
                 "raise it with ulimit -n\n",
                 nranks, static_cast<unsigned long>(need), static_cast<unsigned long>(rl.rlim_cur));
    std::exit(2);
  }
}

// The CPUs rank r of n runs on: the r-th of n equal blocks of the allowed CPUs, in order (so
// consecutive ranks, which rings and trees make neighbours, share a core when ranks outnumber
// CPUs), at least one CPU each.
cpu_set_t cpuBlock(const std::vector<int>& cpus, int r, int n) {
  const size_t c = cpus.size();
  size_t begin = static_cast<size_t>(r) * c / static_cast<size_t>(n);
  size_t end = std::max(begin + 1, static_cast<size_t>(r + 1) * c / static_cast<size_t>(n));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (size_t i = begin; i < end && i < c; ++i) CPU_SET(cpus[i], &set);
  return set;
}

std::vector<int> allowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

class Launcher {
 public:
  explicit Launcher(const Options& opt)
      : opt_(opt), ranks_(opt.nranks), cpus_(opt.bind ? allowedCpus() : std::vector<int>()) {}

  int run() {
    installSignalHandlers();
    for (int r = 0; r < opt_.nranks; ++r) {
      if (!spawn(r)) {
        beginTermination(SIGTERM);
        if (exitCode_ == 0) exitCode_ = 2;
        break;
      }
    }
    if (opt_.timeoutSec > 0)
      timeoutAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(opt_.timeoutSec));
    loop();
    return exitCode_;
  }

 private:
  void installSignalHandlers() {
    if (pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::perror("chorusrun: pipe");
      std::exit(2);
    }
    struct sigaction sa {};
    sa.sa_handler = onSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
  }

  bool spawn(int r) {
    int outPipe[2], errPipe[2];
    if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "chorusrun: cannot create pipes for rank %d: %s\n", r,
                   std::strerror(errno));
      return false;
    }
    // Signals stay blocked across fork until the child has dropped our handlers: a handler run
    // in the child would write to the self-pipe it shares with us.
    sigset_t all, saved;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &saved);
    pid_t pid = fork();
    if (pid == 0) execRank(r, outPipe[1], errPipe[1]);
    sigprocmask(SIG_SETMASK, &saved, nullptr);
    if (pid < 0) {
      std::fprintf(stderr, "chorusrun: cannot fork rank %d: %s\n", r, std::strerror(errno));
      for (int fd : {outPipe[0], outPipe[1], errPipe[0], errPipe[1]}) close(fd);
      return false;
    }
    setpgid(pid, pid);  // also done by the child; whichever runs first wins the race
    close(outPipe[1]);
    close(errPipe[1]);
    Rank& rank = ranks_[r];
    rank.pid = pid;
    rank.running = true;
    std::string prefix = opt_.prefix ? "[" + std::to_string(r) + "] " : "";
    rank.out = Stream{outPipe[0], 1, prefix, {}};
    rank.err = Stream{errPipe[0], 2, prefix, {}};
    fcntl(outPipe[0], F_SETFL, O_NONBLOCK);
    fcntl(errPipe[0], F_SETFL, O_NONBLOCK);
    return true;
  }

  [[noreturn]] void execRank(int r, int outFd, int errFd) {
    setpgid(0, 0);
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaction(sig, &sa, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(outFd, 1);
    dup2(errFd, 2);
    std::string n = std::to_string(opt_.nranks), rs = std::to_string(r);
    setenv("CHORUS_RANK", rs.c_str(), 1);
    setenv("CHORUS_NRANKS", n.c_str(), 1);
    setenv("CHORUS_LOCAL_RANK", rs.c_str(), 1);
    setenv("CHORUS_LOCAL_NRANKS", n.c_str(), 1);
    if (!cpus_.empty()) {
      cpu_set_t set = cpuBlock(cpus_, r, opt_.nranks);
      if (sched_setaffinity(0, sizeof(set), &set) != 0)
        std::fprintf(stderr, "chorusrun: rank %d runs unbound (sched_setaffinity: %s)\n", r,
                     std::strerror(errno));
    }
    execvp(opt_.command[0], opt_.command.data());
    std::fprintf(stderr, "chorusrun: cannot execute '%s': %s\n", opt_.command[0],
                 std::strerror(errno));
    std::fflush(stderr);
    _exit(127);
  }

  void signalRanks(int sig) {
    for (Rank& r : ranks_)
      if (r.running) kill(-r.pid, sig);  // the rank's whole process group
  }

  void beginTermination(int sig) {
    if (terminating_) return;
    terminating_ = true;
    signalRanks(sig);
    killAt_ = Clock::now() + kKillGrace;
  }

  void onRankExit(int r, int status) {
    Rank& rank = ranks_[r];
    rank.running = false;
    rank.status = status;
    rank.out.drain();
    rank.err.drain();
    bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (!failed || terminating_ || termAt_) return;
    if (WIFSIGNALED(status)) {
      int sig = WTERMSIG(status);
      std::fprintf(stderr, "chorusrun: rank %d (pid %d) was killed by signal %d (%s)\n", r,
                   static_cast<int>(rank.pid), sig, strsignal(sig));
      exitCode_ = 128 + sig;
    } else {
      std::fprintf(stderr, "chorusrun: rank %d (pid %d) exited with status %d\n", r,
                   static_cast<int>(rank.pid), WEXITSTATUS(status));
      exitCode_ = WEXITSTATUS(status);
    }
    int left = runningCount();
    if (left > 0 && opt_.lingerSec > 0) {
      std::fprintf(stderr, "chorusrun: terminating the other %d rank%s in %g s\n", left,
                   left == 1 ? "" : "s", opt_.lingerSec);
      termAt_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(opt_.lingerSec));
      return;
    }
    if (left > 0)
      std::fprintf(stderr, "chorusrun: terminating the other %d rank%s\n", left,
                   left == 1 ? "" : "s");
    beginTermination(SIGTERM);
  }

  void reap() {
    for (;;) {
      int status = 0;
      pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid <= 0) return;
      for (int r = 0; r < opt_.nranks; ++r)
        if (ranks_[r].pid == pid && ranks_[r].running) onRankExit(r, status);
    }
  }

  int runningCount() const {
    int n = 0;
    for (const Rank& r : ranks_) n += r.running ? 1 : 0;
    return n;
  }

  void handleSignals() {
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(gSignalPipe[0], sigs, sizeof(sigs))) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        int sig = sigs[i];
        if (sig == SIGCHLD) continue;  // reaped below in any case
        if (terminating_ && forwarded_) {
          std::fprintf(stderr, "chorusrun: %s again, killing all ranks\n", strsignal(sig));
          signalRanks(SIGKILL);
          continue;
        }
        std::fprintf(stderr, "chorusrun: got %s, forwarding it to all ranks\n", strsignal(sig));
        if (exitCode_ == 0) exitCode_ = 128 + sig;
        forwarded_ = true;
        if (terminating_)
          signalRanks(sig);
        else
          beginTermination(sig);
      }
    }
  }

  void checkDeadlines() {
    Clock::time_point now = Clock::now();
    if (timeoutAt_ && now >= *timeoutAt_) {
      timeoutAt_.reset();
      if (runningCount() > 0 && !terminating_) {
        std::fprintf(stderr, "chorusrun: timeout after %g s, terminating %d running rank(s)\n",
                     opt_.timeoutSec, runningCount());
        if (exitCode_ == 0) exitCode_ = 124;  // not a failing rank's, if one lingers
        beginTermination(SIGTERM);
      }
    }
    if (termAt_ && now >= *termAt_) {
      termAt_.reset();
      if (runningCount() > 0 && !terminating_) {
        std::fprintf(stderr, "chorusrun: terminating the %d rank(s) still running\n",
                     runningCount());
        beginTermination(SIGTERM);
      }
    }
    if (killAt_ && now >= *killAt_) {
      killAt_.reset();
      if (runningCount() > 0) {
        std::fprintf(stderr, "chorusrun: %d rank(s) still running after %d s, sending SIGKILL\n",
                     runningCount(), static_cast<int>(kKillGrace.count()));
        signalRanks(SIGKILL);
      }
    }
  }

  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next;
    for (const auto& t : {timeoutAt_, termAt_, killAt_, drainUntil_})
      if (t && (!next || *t < *next)) next = t;
    if (!next) return -1;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*next - Clock::now()).count();
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms + 1, 1 << 30));
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    for (;;) {
      reap();
      handleSignals();
      checkDeadlines();
      if (runningCount() == 0) {
        if (!drainUntil_) drainUntil_ = Clock::now() + kDrainGrace;
        if (Clock::now() >= *drainUntil_) break;
      }
      fds.clear();
      streams.clear();
      fds.push_back({gSignalPipe[0], POLLIN, 0});
      for (Rank& r : ranks_) {
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd < 0) continue;
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }
      if (streams.empty() && runningCount() == 0) break;
      int n = poll(fds.data(), fds.size(), pollTimeoutMs());
      if (n < 0 && errno != EINTR) {
        std::perror("chorusrun: poll");
        beginTermination(SIGKILL);
        if (exitCode_ == 0) exitCode_ = 2;
      }
      for (size_t i = 1; n > 0 && i < fds.size(); ++i)
        if (fds[i].revents != 0) streams[i - 1]->drain();
    }
    for (Rank& r : ranks_) {
      r.out.close();
      r.err.close();
    }
  }

  const Options& opt_;
  std::vector<Rank> ranks_;
  std::vector<int> cpus_;  // the CPUs ranks are bound to blocks of (empty: unbound)
  int exitCode_ = 0;
  bool terminating_ = false;
  bool forwarded_ = false;
  std::optional<Clock::time_point> timeoutAt_, termAt_, killAt_, drainUntil_;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt = parseOptions(argc, argv);
  raiseFdLimit(opt.nranks);
  prepareEnvironment(opt);
  return Launcher(opt).run();
}
