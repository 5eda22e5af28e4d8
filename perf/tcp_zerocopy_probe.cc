// Whether MSG_ZEROCOPY would pay for the socket transport on this machine's links: one TCP
// stream sends `bytes` in `chunk`-byte sends from a ring of buffers, with ordinary copying sends
// or with MSG_ZEROCOPY (each buffer reused only once the kernel has said it is done with it),
// and reports the throughput, the sender's CPU seconds per GB and how many of the kernel's
// completion notices said it copied the data after all (SO_EE_CODE_ZEROCOPY_COPIED: loopback
// and veth deliver locally, where the kernel copies).
//   receiver: tcp_zerocopy_probe --listen PORT
//   sender:   tcp_zerocopy_probe --send ADDR:PORT --bytes N --chunk C --zerocopy 0|1
// perf/zerocopy_netns.sh runs it across two network namespaces.
#include <arpa/inet.h>
#include <errno.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef SO_ZEROCOPY
#define SO_ZEROCOPY 60
#endif
#ifndef MSG_ZEROCOPY
#define MSG_ZEROCOPY 0x4000000
#endif
#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

namespace {

[[noreturn]] void die(const char* what) {
  fprintf(stderr, "tcp_zerocopy_probe: %s: %s\n", what, strerror(errno));
  exit(1);
}

double cpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

int receive(int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) die("listen");
  int fd = accept(l, nullptr, nullptr);
  if (fd < 0) die("accept");
  std::vector<char> buf(size_t(4) << 20);
  uint64_t total = 0;
  while (true) {
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("recv");
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
  }
  printf("received %llu bytes\n", static_cast<unsigned long long>(total));
  return 0;
}

// Zero-copy completion notices on the error queue: each names a range of sends [lo, hi].
struct Notices {
  uint64_t done = 0;  // sends the kernel is done with (they complete in order on TCP)
  uint64_t notices = 0;
  uint64_t copied = 0;  // notices that say the kernel copied
};

void drain(int fd, Notices* z, bool block) {
  while (true) {
    if (block) {
      pollfd p{fd, 0, 0};  // POLLERR is reported whatever is asked
      poll(&p, 1, 1000);
    }
    char control[128];
    msghdr msg{};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    if (recvmsg(fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      die("recvmsg(MSG_ERRQUEUE)");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      sock_extended_err e;
      memcpy(&e, CMSG_DATA(c), sizeof e);
      if (e.ee_origin != SO_EE_ORIGIN_ZEROCOPY) continue;
      z->done = static_cast<uint64_t>(e.ee_data) + 1;  // hi, inclusive
      ++z->notices;
      if (e.ee_code & SO_EE_CODE_ZEROCOPY_COPIED) ++z->copied;
    }
    block = false;
  }
}

int sendAll(const std::string& where, uint64_t bytes, size_t chunk, bool zerocopy) {
  const size_t colon = where.rfind(':');
  if (colon == std::string::npos) die("--send wants ADDR:PORT");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(atoi(where.c_str() + colon + 1)));
  if (inet_pton(AF_INET, where.substr(0, colon).c_str(), &a.sin_addr) != 1) die("address");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  for (int tries = 0; connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0; ++tries) {
    if (tries > 100) die("connect");
    close(fd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    usleep(20000);
  }
  int one = 1;
  if (zerocopy && setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0)
    die("SO_ZEROCOPY");
  constexpr int kBuffers = 8;  // a buffer is written again once its send is done
  std::vector<std::vector<char>> ring(kBuffers, std::vector<char>(chunk));
  for (int b = 0; b < kBuffers; ++b) memset(ring[b].data(), 'a' + b, chunk);
  std::vector<uint64_t> lastSend(kBuffers, 0);  // zero-copy send count after its last use
  Notices z;
  uint64_t sends = 0;  // zero-copy sends made (each successful call is one)
  const double cpu0 = cpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t sent = 0;
  for (uint64_t i = 0; sent < bytes; ++i) {
    const int b = static_cast<int>(i % kBuffers);
    if (zerocopy)
      while (z.done < lastSend[b]) drain(fd, &z, true);
    memset(ring[b].data(), static_cast<int>(i), 64);  // the application touches its buffer
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, bytes - sent));
    size_t off = 0;
    while (off < want) {
      ssize_t n = send(fd, ring[b].data() + off, want - off, zerocopy ? MSG_ZEROCOPY : 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == ENOBUFS && zerocopy) {  // too many pinned pages: wait for notices
        drain(fd, &z, true);
        continue;
      }
      if (n < 0) die("send");
      off += static_cast<size_t>(n);
      if (zerocopy) ++sends;
    }
    lastSend[b] = sends;
    sent += want;
    if (zerocopy) drain(fd, &z, false);
  }
  while (zerocopy && z.done < sends) drain(fd, &z, true);
  shutdown(fd, SHUT_WR);
  char c;
  while (recv(fd, &c, 1, 0) > 0) {
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpuSeconds() - cpu0;
  printf(
      "zerocopy %d chunk %zu bytes %llu: %.3f GB/s, sender CPU %.3f s per GB, notices %llu, "
      "copied %llu\n",
      zerocopy ? 1 : 0, chunk, static_cast<unsigned long long>(bytes), bytes / secs / 1e9,
      cpu / (bytes / 1e9), static_cast<unsigned long long>(z.notices),
      static_cast<unsigned long long>(z.copied));
  close(fd);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, where;
  uint64_t bytes = uint64_t(1) << 30;
  size_t chunk = size_t(1) << 20;
  bool zerocopy = false;
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--listen") {
      mode = "listen";
      port = atoi(v.c_str());
    } else if (k == "--send") {
      mode = "send";
      where = v;
    } else if (k == "--bytes") {
      bytes = strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--chunk") {
      chunk = strtoull(v.c_str(), nullptr, 10);
    } else if (k == "--zerocopy") {
      zerocopy = v == "1";
    }
  }
  if (mode == "listen" && port > 0) return receive(port);
  if (mode == "send" && chunk > 0 && bytes > 0) return sendAll(where, bytes, chunk, zerocopy);
  fprintf(stderr,
          "usage: tcp_zerocopy_probe --listen PORT\n"
          "       tcp_zerocopy_probe --send ADDR:PORT [--bytes N] [--chunk C] [--zerocopy 0|1]\n");
  return 2;
}
