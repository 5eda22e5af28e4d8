// An NCCL net plugin over TCP sockets, built as its own library (libnccl-net-example.so): the
// example of the ABI in transport/net_plugin/net_abi.h, and what the tests load through
// NCCL_NET_PLUGIN. It uses nothing of Chorus, as a third party's plugin would not. One device:
// the first IPv4 interface that is up and not loopback (loopback when there is none;
// EXAMPLE_NET_IFNAME names another). EXAMPLE_NET_PCI_PATHS (comma-separated, up to 8) makes it
// as many devices over that interface, each reporting its path as pciPath, as a host with
// several NICs would; EXAMPLE_NET_RAILS (comma-separated, "rail" or "rail.plane" per device)
// gives them the rails and planes v12 reports, and makes the plugin a rail-only fabric: a
// connect from a device to a listener of another rail or plane fails. Every call is
// non-blocking: connect keeps its state in the handle, and test() moves the bytes of a comm's
// requests, in order, as far as the socket takes them. A receive takes only a message of its
// tag; a grouped receive (maxRecvs 8, or EXAMPLE_NET_MAX_RECVS from 1 to 8) takes its buffers'
// messages in whatever order they come, each into the buffer of its tag. Each device reports
// 10 Gbit/s, or EXAMPLE_NET_SPEED_MBPS (a fused device the sum of its members').
// EXAMPLE_NET_DMABUF=1: regMrDmaBuf (v9 and newer) maps the dma-buf, checks that it holds the
// registered bytes and moves sends and receives through that mapping, as a NIC reaches pages,
// not addresses. EXAMPLE_NET_GDR=1: NCCL_PTR_CUDA registrations of memory it can address (CPU
// stand-ins for GPU memory in tests, never real GPU memory), whose receives' flushes are
// requests done at their second test. exampleNetCounters (a C symbol) counts those registrations
// and flushes. NET_EXAMPLE_MAX_VERSION (8 to 12) limits the tables it exports.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "transport/net_plugin/net_abi.h"

#ifndef NET_EXAMPLE_MAX_VERSION
#define NET_EXAMPLE_MAX_VERSION 12
#endif

namespace {

constexpr uint32_t kHandleMagic = 0x45584e54;  // "EXNT"
constexpr uint32_t kWireMagic = 0x45584d53;    // "EXMS"
constexpr int kMaxRequests = NCCL_NET_MAX_REQUESTS;
constexpr int kMaxRecvs = 8;
int gMaxRecvs = kMaxRecvs;
int gSpeedMbps = 10000;
int gPtrSupport = NCCL_PTR_HOST;

ncclDebugLogger_t gLog = nullptr;
sockaddr_in gAddr;  // the device's address (port 0)
char gIfName[IF_NAMESIZE] = "lo";

#define EXAMPLE_WARN(...)                                                                \
  do {                                                                                   \
    if (gLog != nullptr) gLog(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define EXAMPLE_INFO(...)                                                                \
  do {                                                                                   \
    if (gLog != nullptr) gLog(NCCL_LOG_INFO, NCCL_NET, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// What listen writes into the handle; connect keeps its progress after it.
struct Handle {
  uint32_t magic;
  uint32_t stage;  // connect: 0 not started, 1 connecting
  sockaddr_in addr;
  int fd;
  int16_t rail;  // the listener's device's
  int16_t plane;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "a handle fits NCCL's");

struct Wire {
  uint64_t size;
  int32_t tag;
  uint32_t magic;
};

struct Comm;
struct Request {
  Comm* comm = nullptr;
  bool used = false;
  bool done = false;
  bool isSend = false;
  int n = 1;  // buffers: a send's one, a receive's 1 to gMaxRecvs
  char* data[kMaxRecvs] = {};
  size_t size[kMaxRecvs] = {};  // send: its size; receive: what arrived in each
  size_t capacity[kMaxRecvs] = {};
  int tag[kMaxRecvs] = {};
  unsigned filled = 0;  // receive: the buffers whose message arrived, one bit each
  int cur = 0;          // the buffer the message on the wire goes to
  Wire wire{};
  size_t wireDone = 0;
  size_t bodyDone = 0;
};

struct Comm {
  int fd = -1;
  bool isSend = false;
  bool broken = false;
  Request reqs[kMaxRequests];
  std::deque<Request*> queue;  // posted and not complete, in order
};

struct Listen {
  int fd = -1;
};

int gMr = 0;  // the handle of every host registration: sockets need none

// A dma-buf registration (its own mapping of the pages) or a "GPU" one.
struct Mr {
  char* base;                // the caller's address of the registered bytes
  char* mapping;             // dma-buf: the pages, mapped by this plugin (else null)
  size_t mappedBytes, skip;  // the mapping's length; the registered bytes' offset in it
  bool device;
};
unsigned long gDmaBufRegs = 0, gDeviceRegs = 0, gFlushes = 0;

// Where the plugin reaches data registered as mhandle: through its own mapping for a dma-buf.
void* reach(void* mhandle, void* data) {
  auto* mr = mhandle == &gMr ? nullptr : static_cast<Mr*>(mhandle);
  if (mr == nullptr || mr->mapping == nullptr) return data;
  return mr->mapping + mr->skip + (static_cast<char*>(data) - mr->base);
}

void setNonBlocking(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

constexpr int kMaxDevices = 8;            // physical
constexpr int kMaxAll = 2 * kMaxDevices;  // and virtual, from makeVDevice
constexpr int kMaxMembers = 8;            // devices a virtual one fuses
int gDevices = 1;                         // physical ones, numbered first
int gVirtual = 0;                         // virtual ones, after them
char gPciPath[kMaxAll][256];
char gDevName[kMaxAll][64];
int gMembers[kMaxAll][kMaxMembers];  // a physical device is its own one member
int gNMembers[kMaxAll];
bool gRails = false;  // EXAMPLE_NET_RAILS given: devices of different rails do not connect
int16_t gRail[kMaxAll];
int16_t gPlane[kMaxAll];
pthread_mutex_t gVirtualLock = PTHREAD_MUTEX_INITIALIZER;

// "r" or "r.p" for each device in turn; the devices it does not name are on rail 0, plane 0.
void readRails(const char* rails) {
  gRails = rails != nullptr && rails[0] != '\0';
  for (int d = 0; d < kMaxDevices; ++d) gRail[d] = gPlane[d] = 0;
  for (int d = 0; gRails && d < kMaxDevices && *rails != '\0'; ++d) {
    char* end = nullptr;
    gRail[d] = static_cast<int16_t>(strtol(rails, &end, 10));
    if (*end == '.') gPlane[d] = static_cast<int16_t>(strtol(end + 1, &end, 10));
    rails = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') break;
  }
}

// Once per process: a v11 or v12 init runs once per communicator in NCCL, while other threads
// may be reading the devices.
void readDevicesOnce() {
  const char* paths = getenv("EXAMPLE_NET_PCI_PATHS");
  gDevices = 1;
  gPciPath[0][0] = '\0';
  if (paths != nullptr && paths[0] != '\0') {
    gDevices = 0;
    for (const char* p = paths; *p != '\0' && gDevices < kMaxDevices;) {
      const char* end = strchr(p, ',');
      const size_t len = end != nullptr ? static_cast<size_t>(end - p) : strlen(p);
      snprintf(gPciPath[gDevices], sizeof gPciPath[0], "%.*s", static_cast<int>(len), p);
      ++gDevices;
      p += len + (end != nullptr ? 1 : 0);
    }
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    snprintf(gDevName[d], sizeof gDevName[0], "example%d", d);
    gMembers[d][0] = d;
    gNMembers[d] = 1;
  }
  readRails(getenv("EXAMPLE_NET_RAILS"));
  const char* recvs = getenv("EXAMPLE_NET_MAX_RECVS");
  gMaxRecvs = recvs != nullptr ? atoi(recvs) : kMaxRecvs;
  if (gMaxRecvs < 1 || gMaxRecvs > kMaxRecvs) gMaxRecvs = kMaxRecvs;
  const char* speed = getenv("EXAMPLE_NET_SPEED_MBPS");
  gSpeedMbps = speed != nullptr && atoi(speed) > 0 ? atoi(speed) : 10000;
  auto on = [](const char* name) { return getenv(name) != nullptr && atoi(getenv(name)) == 1; };
  gPtrSupport = NCCL_PTR_HOST | (on("EXAMPLE_NET_DMABUF") ? NCCL_PTR_DMABUF : 0) |
                (on("EXAMPLE_NET_GDR") ? NCCL_PTR_CUDA : 0);
}

bool badDev(int dev) {
  pthread_mutex_lock(&gVirtualLock);
  const int n = gDevices + gVirtual;
  pthread_mutex_unlock(&gVirtualLock);
  return dev < 0 || dev >= n;
}

ncclResult_t exampleInit() {
  const char* want = getenv("EXAMPLE_NET_IFNAME");
  memset(&gAddr, 0, sizeof gAddr);
  gAddr.sin_family = AF_INET;
  gAddr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return ncclSystemError;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0) continue;
    const bool loop = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (want != nullptr ? strcmp(want, i->ifa_name) != 0 : loop) continue;
    memcpy(&gAddr, i->ifa_addr, sizeof gAddr);
    snprintf(gIfName, sizeof gIfName, "%s", i->ifa_name);
    break;
  }
  freeifaddrs(list);
  gAddr.sin_port = 0;
  char text[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &gAddr.sin_addr, text, sizeof text);
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, readDevicesOnce);
  EXAMPLE_INFO("example net plugin: %d device%s over %s (%s)", gDevices, gDevices == 1 ? "" : "s",
               gIfName, text);
  return ncclSuccess;
}

ncclResult_t exampleDevices(int* n) {
  pthread_mutex_lock(&gVirtualLock);
  *n = gDevices + gVirtual;
  pthread_mutex_unlock(&gVirtualLock);
  return ncclSuccess;
}

// A virtual device over physical ones of one rail and plane: numbered after every device so
// far, named after its members, at its first member's PCI path, as fast as all of them. Over
// this plugin's one interface it moves data as its first member does.
template <class VProps>
ncclResult_t exampleMakeVDevice(int* d, VProps* props, int maxMembers) {
  const int n = props != nullptr ? props->ndevs : 0;
  if (d == nullptr || n < 1 || n > maxMembers || n > kMaxMembers) return ncclInvalidArgument;
  for (int i = 0; i < n; ++i) {
    const int m = props->devs[i];
    if (m < 0 || m >= gDevices || gRail[m] != gRail[props->devs[0]] ||
        gPlane[m] != gPlane[props->devs[0]]) {
      EXAMPLE_WARN(
          "example net plugin: makeVDevice: device %d is not a physical device on "
          "the rail and plane of device %d",
          m, props->devs[0]);
      return ncclInvalidArgument;
    }
  }
  pthread_mutex_lock(&gVirtualLock);
  if (gDevices + gVirtual >= kMaxAll) {
    pthread_mutex_unlock(&gVirtualLock);
    return ncclInvalidUsage;
  }
  const int v = gDevices + gVirtual;
  const int first = props->devs[0];
  char name[sizeof gDevName[0]] = "";
  for (int i = 0; i < n; ++i) {
    gMembers[v][i] = props->devs[i];
    const size_t len = strlen(name);
    snprintf(name + len, sizeof name - len, "%s%s", i == 0 ? "" : "+", gDevName[props->devs[i]]);
  }
  memcpy(gDevName[v], name, sizeof name);
  gNMembers[v] = n;
  memcpy(gPciPath[v], gPciPath[first], sizeof gPciPath[0]);  // v is past every physical one
  gRail[v] = gRail[first];
  gPlane[v] = gPlane[first];
  ++gVirtual;  // published last: badDev and devices see it complete
  pthread_mutex_unlock(&gVirtualLock);
  *d = v;
  EXAMPLE_INFO("example net plugin: virtual device %d (%s)", v, gDevName[v]);
  return ncclSuccess;
}

template <class Props>
void fillCommon(int dev, Props* p) {
  p->name = gDevName[dev];
  p->pciPath = gPciPath[dev][0] != '\0' ? gPciPath[dev] : nullptr;
  p->guid = 0x4558;
  p->ptrSupport = gPtrSupport;
  p->regIsGlobal = 0;
  p->speed = gSpeedMbps * gNMembers[dev];
  p->port = 0;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = gMaxRecvs;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = 0;
}

ncclResult_t exampleListen(int dev, void* opaque, void** listenComm) {
  if (badDev(dev)) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  sockaddr_in a = gAddr;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    EXAMPLE_WARN("example net plugin: listen: %s", strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  setNonBlocking(fd);
  auto* h = static_cast<Handle*>(opaque);
  memset(opaque, 0, NCCL_NET_HANDLE_MAXSIZE);
  h->magic = kHandleMagic;
  h->addr = a;
  h->fd = -1;
  h->rail = gRail[dev];
  h->plane = gPlane[dev];
  *listenComm = new Listen{fd};
  return ncclSuccess;
}

Comm* newComm(int fd, bool isSend) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setNonBlocking(fd);
  auto* c = new Comm;
  c->fd = fd;
  c->isSend = isSend;
  for (Request& r : c->reqs) r.comm = c;
  return c;
}

ncclResult_t exampleConnect(int dev, void* opaque, void** sendComm) {
  *sendComm = nullptr;
  auto* h = static_cast<Handle*>(opaque);
  if (badDev(dev) || h->magic != kHandleMagic) return ncclInvalidArgument;
  if (gRails && (h->rail != gRail[dev] || h->plane != gPlane[dev])) {
    EXAMPLE_WARN(
        "example net plugin: device %d (rail %d plane %d) has no route to a listener "
        "on rail %d plane %d",
        dev, gRail[dev], gPlane[dev], h->rail, h->plane);
    return ncclSystemError;
  }
  if (h->stage == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return ncclSystemError;
    if (connect(fd, reinterpret_cast<sockaddr*>(&h->addr), sizeof h->addr) != 0 &&
        errno != EINPROGRESS) {
      EXAMPLE_WARN("example net plugin: connect: %s", strerror(errno));
      close(fd);
      return ncclSystemError;
    }
    h->fd = fd;
    h->stage = 1;
  }
  pollfd p{h->fd, POLLOUT, 0};
  if (poll(&p, 1, 0) == 0) return ncclSuccess;  // not yet: call again
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    EXAMPLE_WARN("example net plugin: connect: %s", strerror(err));
    close(h->fd);
    h->stage = 0;
    return ncclSystemError;
  }
  *sendComm = newComm(h->fd, true);
  h->stage = 0;
  return ncclSuccess;
}

ncclResult_t exampleAccept(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  int fd = accept4(static_cast<Listen*>(listenComm)->fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return ncclSuccess;
    EXAMPLE_WARN("example net plugin: accept: %s", strerror(errno));
    return ncclSystemError;
  }
  *recvComm = newComm(fd, false);
  return ncclSuccess;
}

ncclResult_t exampleRegMr(void* comm, void* data, size_t, int type, void** mhandle) {
  if (comm == nullptr) return ncclInternalError;
  if (type == NCCL_PTR_CUDA && (gPtrSupport & NCCL_PTR_CUDA) != 0 && data != nullptr) {
    __atomic_add_fetch(&gDeviceRegs, 1, __ATOMIC_RELAXED);
    *mhandle = new Mr{static_cast<char*>(data), nullptr, 0, 0, true};
    return ncclSuccess;
  }
  if (type != NCCL_PTR_HOST) return ncclInternalError;
  *mhandle = &gMr;
  return ncclSuccess;
}

// Memory exported as a dma-buf (a memfd stands for one), GPU memory too without NCCL_PTR_CUDA:
// the bytes at offset in fd must be those at data.
[[maybe_unused]] ncclResult_t exampleRegMrDmaBuf(void* comm, void* data, size_t size, int type,
                                                 uint64_t offset, int fd, void** mhandle) {
  const bool typeOk = type == NCCL_PTR_HOST || type == NCCL_PTR_CUDA;
  if (comm == nullptr || !typeOk || (gPtrSupport & NCCL_PTR_DMABUF) == 0 || fd < 0 ||
      data == nullptr || size == 0)
    return ncclInternalError;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t length = static_cast<size_t>(offset - start) + size;
  struct stat st;
  if (fstat(fd, &st) != 0 || offset + size > static_cast<uint64_t>(st.st_size)) {
    EXAMPLE_WARN("example net plugin: regMrDmaBuf: fd %d does not hold %zu bytes at offset %llu",
                 fd, size, static_cast<unsigned long long>(offset));
    return ncclInvalidArgument;
  }
  void* map =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) {
    EXAMPLE_WARN("example net plugin: regMrDmaBuf: mapping fd %d: %s", fd, strerror(errno));
    return ncclSystemError;
  }
  if (memcmp(static_cast<char*>(map) + (offset - start), data, size) != 0) {
    munmap(map, length);
    EXAMPLE_WARN("example net plugin: regMrDmaBuf: fd %d at offset %llu is not the %zu bytes at %p",
                 fd, static_cast<unsigned long long>(offset), size, data);
    return ncclInvalidArgument;
  }
  __atomic_add_fetch(&gDmaBufRegs, 1, __ATOMIC_RELAXED);
  const size_t skip = static_cast<size_t>(offset - start);
  *mhandle = new Mr{static_cast<char*>(data), static_cast<char*>(map), length, skip,
                    type == NCCL_PTR_CUDA};
  return ncclSuccess;
}

ncclResult_t exampleDeregMr(void*, void* mhandle) {
  if (mhandle == &gMr) return ncclSuccess;
  if (mhandle == nullptr) return ncclInternalError;
  auto* mr = static_cast<Mr*>(mhandle);
  if (mr->mapping != nullptr) munmap(mr->mapping, mr->mappedBytes);
  delete mr;
  return ncclSuccess;
}

Request* post(Comm* c, int n, void** data, const size_t* sizes, const int* tags) {
  for (Request& r : c->reqs) {
    if (r.used) continue;
    r.used = true;
    r.done = false;
    r.isSend = c->isSend;
    r.n = n;
    for (int i = 0; i < n; ++i) {
      r.data[i] = static_cast<char*>(data[i]);
      r.capacity[i] = sizes[i];
      r.size[i] = c->isSend ? sizes[i] : 0;
      r.tag[i] = tags[i];
    }
    r.filled = 0;
    r.cur = 0;
    r.wire = Wire{r.size[0], tags[0], kWireMagic};
    r.wireDone = 0;
    r.bodyDone = 0;
    c->queue.push_back(&r);
    return &r;
  }
  return nullptr;  // all busy: the caller posts again later
}

ncclResult_t exampleIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                          void** request) {
  void* at = reach(mhandle, data);
  *request = post(static_cast<Comm*>(sendComm), 1, &at, &size, &tag);
  return ncclSuccess;
}

// Size: int (v8) or size_t.
template <class Size>
ncclResult_t exampleIrecv(void* recvComm, int n, void** data, const Size* sizes, const int* tags,
                          void** mhandles, void** request) {
  *request = nullptr;
  if (n < 1 || n > gMaxRecvs) return ncclInvalidArgument;
  size_t bytes[kMaxRecvs];
  void* at[kMaxRecvs];
  for (int i = 0; i < n; ++i) {
    if (sizes[i] < 0) return ncclInvalidArgument;
    bytes[i] = static_cast<size_t>(sizes[i]);
    at[i] = reach(mhandles != nullptr ? mhandles[i] : nullptr, data[i]);
  }
  *request = post(static_cast<Comm*>(recvComm), n, at, bytes, tags);
  return ncclSuccess;
}

// The buffer of a receive that takes the message on the wire: the first not filled with its
// tag (-1: none, or too small).
int matchBuffer(const Request* r) {
  for (int i = 0; i < r->n; ++i)
    if ((r->filled & (1u << i)) == 0 && r->tag[i] == r->wire.tag)
      return r->wire.size <= r->capacity[i] ? i : -1;
  return -1;
}

// Moves bytes of r, which heads its comm's queue; false on a broken connection.
bool advance(Request* r) {
  Comm* c = r->comm;
  while (true) {
    char* p;
    size_t left;
    if (r->wireDone < sizeof(Wire)) {
      p = reinterpret_cast<char*>(&r->wire) + r->wireDone;
      left = sizeof(Wire) - r->wireDone;
    } else {
      p = r->data[r->cur] + r->bodyDone;
      left = r->size[r->cur] - r->bodyDone;
    }
    if (left == 0) {
      r->filled |= 1u << r->cur;
      if (r->isSend || r->filled == (1u << r->n) - 1) {
        r->done = true;
        return true;
      }
      r->wireDone = r->bodyDone = 0;  // the next message of the group
      continue;
    }
    ssize_t n = r->isSend ? send(c->fd, p, left, MSG_NOSIGNAL) : recv(c->fd, p, left, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n <= 0) {
      EXAMPLE_WARN("example net plugin: %s: %s", r->isSend ? "send" : "recv",
                   n == 0 ? "the peer closed the connection" : strerror(errno));
      return false;
    }
    if (r->wireDone < sizeof(Wire)) {
      r->wireDone += static_cast<size_t>(n);
      if (!r->isSend && r->wireDone == sizeof(Wire)) {
        r->cur = r->wire.magic == kWireMagic ? matchBuffer(r) : -1;
        if (r->cur < 0) {
          EXAMPLE_WARN(
              "example net plugin: a message of %llu bytes tagged %d for a receive "
              "of %d buffer%s (the first: %zu bytes, tag %d)",
              static_cast<unsigned long long>(r->wire.size), r->wire.tag, r->n,
              r->n == 1 ? "" : "s", r->capacity[0], r->tag[0]);
          return false;
        }
        r->size[r->cur] = r->wire.size;
      }
    } else {
      r->bodyDone += static_cast<size_t>(n);
    }
  }
}

ncclResult_t exampleTest(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || !r->used) return ncclInternalError;
  Comm* c = r->comm;
  while (!c->broken && !c->queue.empty()) {
    Request* front = c->queue.front();
    if (!advance(front)) {
      c->broken = true;
      break;
    }
    if (!front->done) break;
    c->queue.pop_front();
  }
  if (r->n == 0) r->done = ++r->cur >= 2;  // a flush: complete at its second test
  if (!r->done) {
    if (c->broken) return ncclSystemError;
    *done = 0;
    return ncclSuccess;
  }
  *done = 1;
  for (int i = 0; sizes != nullptr && i < r->n; ++i)
    sizes[i] = r->size[i] > INT_MAX ? INT_MAX : static_cast<int>(r->size[i]);
  r->used = false;
  return ncclSuccess;
}

// Host memory needs no flush; "GPU" memory gets a request that is complete when tested.
ncclResult_t exampleIflush(void* recvComm, int n, void**, int*, void** mhandles, void** request) {
  *request = nullptr;
  bool device = false;
  for (int i = 0; i < n && mhandles != nullptr; ++i)
    device = device || (mhandles[i] != &gMr && mhandles[i] != nullptr &&
                        static_cast<Mr*>(mhandles[i])->device);
  if (!device) return ncclSuccess;
  Comm* c = static_cast<Comm*>(recvComm);
  for (Request& r : c->reqs) {
    if (r.used) continue;
    r = Request{};  // of no buffer: test() completes it
    r.comm = c;
    r.used = true;
    r.n = 0;
    __atomic_add_fetch(&gFlushes, 1, __ATOMIC_RELAXED);
    *request = &r;
    return ncclSuccess;
  }
  return ncclInternalError;  // more requests than NCCL_NET_MAX_REQUESTS
}

ncclResult_t exampleClose(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  close(c->fd);
  delete c;
  return ncclSuccess;
}

ncclResult_t exampleCloseListen(void* listenComm) {
  auto* l = static_cast<Listen*>(listenComm);
  close(l->fd);
  delete l;
  return ncclSuccess;
}

// Per-version entry points.
ncclResult_t initV8(ncclDebugLogger_t log) {
  return gLog = log, exampleInit();
}
[[maybe_unused]] ncclResult_t initV10(ncclDebugLogger_t log, ncclProfilerCallback_t) {
  return gLog = log, exampleInit();
}
ncclResult_t propsV8(int dev, ncclNetProperties_v8_t* p) {
  if (badDev(dev)) return ncclInvalidArgument;
  fillCommon(dev, p);
  return ncclSuccess;
}
// The members v9 added, kept by v10, v11 and v12.
template <class Props>
void fillFromV9(int dev, Props* p) {
  fillCommon(dev, p);
  p->forceFlush = 0;
  p->vProps.ndevs = gNMembers[dev];
  for (int i = 0; i < gNMembers[dev]; ++i) p->vProps.devs[i] = gMembers[dev][i];
  p->maxP2pBytes = size_t(1) << 30;
  p->maxCollBytes = size_t(1) << 30;
}
[[maybe_unused]] ncclResult_t makeVDeviceV9(int* d, ncclNetVDeviceProps_v9_t* props) {
  return exampleMakeVDevice(d, props, NCCL_NET_MAX_DEVS_PER_NIC);
}
[[maybe_unused]] ncclResult_t propsV9(int dev, ncclNetProperties_v9_t* p) {
  if (badDev(dev)) return ncclInvalidArgument;
  fillFromV9(dev, p);
  return ncclSuccess;
}
ncclResult_t connectV8(int dev, void* h, void** c, ncclNetDeviceHandle_v8_t**) {
  return exampleConnect(dev, h, c);
}
[[maybe_unused]] ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* h, void** c,
                                         ncclNetDeviceHandle_v10_t**) {
  return exampleConnect(dev, h, c);
}
ncclResult_t acceptAny(void* l, void** c, ncclNetDeviceHandle_v8_t**) {
  return exampleAccept(l, c);
}
ncclResult_t isendV8(void* c, void* d, int size, int tag, void* mr, void** req) {
  return size < 0 ? ncclInvalidArgument
                  : exampleIsend(c, d, static_cast<size_t>(size), tag, mr, req);
}
[[maybe_unused]] ncclResult_t isendV9(void* c, void* d, size_t size, int tag, void* mr,
                                      void** req) {
  return exampleIsend(c, d, size, tag, mr, req);
}
[[maybe_unused]] ncclResult_t isendV10(void* c, void* d, size_t size, int tag, void* mr, void*,
                                       void** req) {
  return exampleIsend(c, d, size, tag, mr, req);
}
ncclResult_t irecvV8(void* c, int n, void** d, int* sizes, int* tags, void** mrs, void** req) {
  return exampleIrecv(c, n, d, sizes, tags, mrs, req);
}
[[maybe_unused]] ncclResult_t irecvV9(void* c, int n, void** d, size_t* sizes, int* tags,
                                      void** mrs, void** req) {
  return exampleIrecv(c, n, d, sizes, tags, mrs, req);
}
[[maybe_unused]] ncclResult_t irecvV10(void* c, int n, void** d, size_t* sizes, int* tags,
                                       void** mrs, void**, void** req) {
  return exampleIrecv(c, n, d, sizes, tags, mrs, req);
}

// v11: the network is initialised with a context, which listen and connect get back. This
// plugin hands out the address of its one context and refuses any other: a caller that passes
// something else is caught.
int gContext = 0;
[[maybe_unused]] ncclResult_t initV11(void** ctx, uint64_t, ncclNetCommConfig_v11_t*,
                                      ncclDebugLogger_t log, ncclProfilerCallback_t) {
  if (ctx == nullptr) return ncclInvalidArgument;
  gLog = log;
  *ctx = &gContext;
  return exampleInit();
}
[[maybe_unused]] ncclResult_t propsV11(int dev, ncclNetProperties_v11_t* p) {
  if (badDev(dev)) return ncclInvalidArgument;
  fillFromV9(dev, p);
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}
[[maybe_unused]] ncclResult_t listenV11(void* ctx, int dev, void* h, void** l) {
  if (ctx != &gContext) {
    EXAMPLE_WARN("listen with a context init did not give");
    return ncclInvalidArgument;
  }
  return exampleListen(dev, h, l);
}
[[maybe_unused]] ncclResult_t connectV11(void* ctx, int dev, void* h, void** c,
                                         ncclNetDeviceHandle_v11_t**) {
  if (ctx != &gContext) {
    EXAMPLE_WARN("connect with a context init did not give");
    return ncclInvalidArgument;
  }
  return exampleConnect(dev, h, c);
}
[[maybe_unused]] ncclResult_t finalizeV11(void* ctx) {
  return ctx == &gContext ? ncclSuccess : ncclInvalidArgument;
}

// v12: the properties' virtual-NIC list holds up to 8 devices, and they end with a rail and a
// plane (EXAMPLE_NET_RAILS; rail 0, plane 0 without it).
[[maybe_unused]] ncclResult_t propsV12(int dev, ncclNetProperties_v12_t* p) {
  if (badDev(dev)) return ncclInvalidArgument;
  fillFromV9(dev, p);
  p->maxMultiRequestSize = 1;
  p->railId = gRail[dev];
  p->planeId = gPlane[dev];
  return ncclSuccess;
}

[[maybe_unused]] ncclResult_t makeVDeviceV12(int* d, ncclNetVDeviceProps_v12_t* props) {
  return exampleMakeVDevice(d, props, NCCL_NET_MAX_DEVS_PER_NIC_V12);
}

}  // namespace

// Not const: a const object at namespace scope would have internal linkage in C++.
extern "C" {

__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {"ExampleSocket",
                                                                        initV8,
                                                                        exampleDevices,
                                                                        propsV8,
                                                                        exampleListen,
                                                                        connectV8,
                                                                        acceptAny,
                                                                        exampleRegMr,
                                                                        nullptr,
                                                                        exampleDeregMr,
                                                                        isendV8,
                                                                        irecvV8,
                                                                        exampleIflush,
                                                                        exampleTest,
                                                                        exampleClose,
                                                                        exampleClose,
                                                                        exampleCloseListen,
                                                                        nullptr,
                                                                        nullptr};

#if NET_EXAMPLE_MAX_VERSION >= 9
__attribute__((visibility("default")))
ncclNet_v9_t ncclNetPlugin_v9 = {"ExampleSocket",    initV8,         exampleDevices, propsV9,
                                 exampleListen,      connectV8,      acceptAny,      exampleRegMr,
                                 exampleRegMrDmaBuf, exampleDeregMr, isendV9,        irecvV9,
                                 exampleIflush,      exampleTest,    exampleClose,   exampleClose,
                                 exampleCloseListen, nullptr,        nullptr,        makeVDeviceV9};
#endif

#if NET_EXAMPLE_MAX_VERSION >= 10
__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    "ExampleSocket",    initV10,        exampleDevices, propsV9,
    exampleListen,      connectV10,     acceptAny,      exampleRegMr,
    exampleRegMrDmaBuf, exampleDeregMr, isendV10,       irecvV10,
    exampleIflush,      exampleTest,    exampleClose,   exampleClose,
    exampleCloseListen, nullptr,        nullptr,        makeVDeviceV9};
#endif

#if NET_EXAMPLE_MAX_VERSION >= 11
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "ExampleSocket",    initV11,        exampleDevices, propsV11,
    listenV11,          connectV11,     acceptAny,      exampleRegMr,
    exampleRegMrDmaBuf, exampleDeregMr, isendV10,       irecvV10,
    exampleIflush,      exampleTest,    exampleClose,   exampleClose,
    exampleCloseListen, nullptr,        nullptr,        makeVDeviceV9,
    finalizeV11,        nullptr};
#endif

#if NET_EXAMPLE_MAX_VERSION >= 12
__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    "ExampleSocket",    initV11,        exampleDevices, propsV12,
    listenV11,          connectV11,     acceptAny,      exampleRegMr,
    exampleRegMrDmaBuf, exampleDeregMr, isendV10,       irecvV10,
    exampleIflush,      exampleTest,    exampleClose,   exampleClose,
    exampleCloseListen, nullptr,        nullptr,        makeVDeviceV12,
    finalizeV11,        nullptr};
#endif

// For tests: the dma-buf and "GPU" registrations and the flushes so far.
__attribute__((visibility("default"))) void exampleNetCounters(unsigned long* dmabufRegs,
                                                               unsigned long* deviceRegs,
                                                               unsigned long* flushes) {
  *dmabufRegs = __atomic_load_n(&gDmaBufRegs, __ATOMIC_RELAXED);
  *deviceRegs = __atomic_load_n(&gDeviceRegs, __ATOMIC_RELAXED);
  *flushes = __atomic_load_n(&gFlushes, __ATOMIC_RELAXED);
}

}  // extern "C"
