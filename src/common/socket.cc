#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "common/param.h"

namespace chorus {

// ---------------------------------------------------------------------------------------------
// SocketAddress

SocketAddress::SocketAddress() {
  memset(&storage_, 0, sizeof(storage_));
  storage_.ss_family = AF_UNSPEC;
}

SocketAddress::SocketAddress(const sockaddr_storage& storage) : storage_(storage) {}

SocketAddress::SocketAddress(const sockaddr* addr, socklen_t length) : SocketAddress() {
  if (addr == nullptr) return;
  size_t n = std::min<size_t>(length, sizeof(storage_));
  if (addr->sa_family == AF_INET) n = std::min(n, sizeof(sockaddr_in));
  if (addr->sa_family == AF_INET6) n = std::min(n, sizeof(sockaddr_in6));
  memcpy(&storage_, addr, n);
}

socklen_t SocketAddress::length() const {
  if (family() == AF_INET) return sizeof(sockaddr_in);
  if (family() == AF_INET6) return sizeof(sockaddr_in6);
  return 0;
}

int SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

void SocketAddress::setPort(int port) {
  uint16_t p = htons(static_cast<uint16_t>(port));
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage_)->sin_port = p;
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage_)->sin6_port = p;
}

std::string SocketAddress::hostString() const {
  char buf[INET6_ADDRSTRLEN + 16] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, buf,
              sizeof(buf));
    return buf;
  }
  if (family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage_);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    std::string out = buf;
    if (a->sin6_scope_id != 0) out += "%" + std::to_string(a->sin6_scope_id);
    return out;
  }
  return "<none>";
}

std::string SocketAddress::toString() const {
  if (family() == AF_INET) return hostString() + ":" + std::to_string(port());
  if (family() == AF_INET6) return "[" + hostString() + "]:" + std::to_string(port());
  return "<none>";
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  return false;
}

bool SocketAddress::isLinkLocal() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr.s_addr) >> 16) ==
           0xa9fe;
  if (family() == AF_INET6)
    return IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr);
  return false;
}

bool SocketAddress::operator==(const SocketAddress& other) const {
  if (family() != other.family()) return false;
  if (family() == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&storage_);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&other.storage_);
    return a->sin_port == b->sin_port && a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&storage_);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&other.storage_);
    return a->sin6_port == b->sin6_port && a->sin6_scope_id == b->sin6_scope_id &&
           memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return true;
}

Result<SocketAddress> SocketAddress::parse(const std::string& text) {
  std::string host;
  std::string portText;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      return invalidArgument("\"%s\" is not [ipv6]:port", text.c_str());
    host = text.substr(1, close - 1);
    portText = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos)
      return invalidArgument("\"%s\" is not host:port (the port is missing)", text.c_str());
    if (text.find(':') != colon)
      return invalidArgument("\"%s\" is ambiguous; write IPv6 addresses as [addr]:port",
                             text.c_str());
    host = text.substr(0, colon);
    portText = text.substr(colon + 1);
  }
  if (host.empty()) return invalidArgument("\"%s\" has no host before the port", text.c_str());
  if (portText.empty() || portText.size() > 5 ||
      portText.find_first_not_of("0123456789") != std::string::npos || std::stoi(portText) > 65535)
    return invalidArgument("\"%s\" has no valid port (0-65535) after the host", text.c_str());

  addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0)
    return invalidArgument("cannot resolve \"%s\" in \"%s\": %s", host.c_str(), text.c_str(),
                           gai_strerror(rc));
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(found, freeaddrinfo);
  const addrinfo* pick = nullptr;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET) {
      pick = ai;
      break;
    }
    if (ai->ai_family == AF_INET6 && pick == nullptr) pick = ai;
  }
  if (pick == nullptr)
    return invalidArgument("\"%s\" resolves to no IPv4 or IPv6 address", host.c_str());
  SocketAddress out(pick->ai_addr, pick->ai_addrlen);
  out.setPort(std::stoi(portText));
  return out;
}

SocketAddress SocketAddress::loopback(int family, int port) {
  sockaddr_storage s;
  memset(&s, 0, sizeof(s));
  if (family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&s);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&s);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  SocketAddress out(s);
  out.setPort(port);
  return out;
}

std::string addressToString(const sockaddr_storage& addr) {
  return SocketAddress(addr).toString();
}

// ---------------------------------------------------------------------------------------------
// Waiting

Status pollFd(int fd, short events, const Waiter& waiter, const std::string& what) {
  // Slices bound how late an abort is noticed; the deadline is checked between them.
  constexpr int kSliceMs = 50;
  while (true) {
    if (waiter.aborted()) return invalidUsage("%s: aborted", what.c_str());
    int ms = waiter.remainingMs(kSliceMs);
    if (ms == 0 && waiter.deadline() != Clock::time_point::max())
      return remoteError("%s: timed out", what.c_str());
    pollfd p = {fd, events, 0};
    int rc = poll(&p, 1, ms);
    if (rc < 0 && errno != EINTR) return errnoError(errno, what + ": poll");
    if (rc > 0) return Status::ok();
  }
}

// ---------------------------------------------------------------------------------------------
// Socket

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_), peer_(other.peer_) {
  other.fd_ = -1;
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    peer_ = other.peer_;
    other.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status Socket::applyOptions(const SocketOptions& options) {
  if (options.noDelay) {
    int one = 1;
    if (setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
      return errnoError(errno, "TCP_NODELAY on socket to " + peer_.toString());
  }
  if (options.bufferBytes > 0) {
    int size = options.bufferBytes;
    if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size)) != 0 ||
        setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size)) != 0)
      return errnoError(errno, "SO_SNDBUF/SO_RCVBUF on socket to " + peer_.toString());
  }
  return Status::ok();
}

Result<SocketAddress> Socket::localAddress() const {
  sockaddr_storage s;
  socklen_t len = sizeof(s);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&s), &len) != 0)
    return errnoError(errno, "getsockname");
  return SocketAddress(reinterpret_cast<sockaddr*>(&s), len);
}

Result<size_t> Socket::sendSome(const void* data, size_t bytes) {
  if (fd_ < 0) return internalError("send on a closed socket (peer %s)", peer_.toString().c_str());
  while (true) {
    ssize_t n = ::send(fd_, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return static_cast<size_t>(0);
    if (errno == EPIPE || errno == ECONNRESET)
      return remoteError("connection closed by %s", peer_.toString().c_str());
    return errnoError(errno, "send to " + peer_.toString());
  }
}

Result<size_t> Socket::recvSome(void* data, size_t bytes) {
  if (fd_ < 0) return internalError("recv on a closed socket (peer %s)", peer_.toString().c_str());
  if (bytes == 0) return static_cast<size_t>(0);
  while (true) {
    ssize_t n = ::recv(fd_, data, bytes, MSG_DONTWAIT);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return remoteError("connection closed by %s", peer_.toString().c_str());
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return static_cast<size_t>(0);
    if (errno == ECONNRESET) return remoteError("connection reset by %s", peer_.toString().c_str());
    return errnoError(errno, "recv from " + peer_.toString());
  }
}

Status Socket::sendAll(const void* data, size_t bytes, const Waiter& waiter) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < bytes) {
    Result<size_t> n = sendSome(p + done, bytes - done);
    if (n.isOk() && n.value() > 0) {
      done += n.value();
      continue;
    }
    std::string what =
        formatString("send of %zu bytes to %s (%zu sent)", bytes, peer_.toString().c_str(), done);
    if (!n.isOk()) return n.status().withContext(what);
    CHORUS_TRY(pollFd(fd_, POLLOUT, waiter, what));
  }
  return Status::ok();
}

Status Socket::recvAll(void* data, size_t bytes, const Waiter& waiter) {
  char* p = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    Result<size_t> n = recvSome(p + done, bytes - done);
    if (n.isOk() && n.value() > 0) {
      done += n.value();
      continue;
    }
    std::string what = formatString("recv of %zu bytes from %s (%zu received)", bytes,
                                    peer_.toString().c_str(), done);
    if (!n.isOk()) return n.status().withContext(what);
    CHORUS_TRY(pollFd(fd_, POLLIN, waiter, what));
  }
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Listener and connect

Result<Listener> Listener::open(const SocketAddress& bindAddress, int backlog) {
  if (bindAddress.empty()) return invalidArgument("cannot listen on an empty address");
  int fd = socket(bindAddress.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errnoError(errno, "socket for a listener on " + bindAddress.toString());
  Listener out;
  out.socket_ = Socket(fd, bindAddress);
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
    return errnoError(errno, "SO_REUSEADDR on " + bindAddress.toString());
  if (bind(fd, bindAddress.sockaddrPtr(), bindAddress.length()) != 0)
    return errnoError(errno, "bind to " + bindAddress.toString());
  if (listen(fd, backlog) != 0) return errnoError(errno, "listen on " + bindAddress.toString());
  CHORUS_ASSIGN_OR_RETURN(out.address_, out.socket_.localAddress());
  return out;
}

Result<Socket> Listener::tryAccept(const SocketOptions& options) {
  while (true) {
    sockaddr_storage s;
    socklen_t len = sizeof(s);
    int fd =
        accept4(socket_.fd(), reinterpret_cast<sockaddr*>(&s), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Socket out(fd, SocketAddress(reinterpret_cast<sockaddr*>(&s), len));
      CHORUS_TRY(out.applyOptions(options));
      return out;
    }
    // A connection that died in the backlog is not an error of the listener.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    return errnoError(errno, "accept on " + address_.toString());
  }
}

Result<Socket> Listener::accept(const Waiter& waiter, const SocketOptions& options) {
  while (true) {
    Result<Socket> s = tryAccept(options);
    if (!s.isOk() || s.value().valid()) return s;
    CHORUS_TRY(pollFd(socket_.fd(), POLLIN, waiter, "accept on " + address_.toString()));
  }
}

bool retryableConnectError(int err) {
  switch (err) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENETDOWN:
    case EAGAIN:
    case ECONNRESET:
    case ECONNABORTED:
    case EADDRNOTAVAIL:
    case EINTR:
      return true;
    default:
      return false;
  }
}

Result<Socket> connectSocket(const SocketAddress& address, const Waiter& waiter,
                             const SocketOptions& options) {
  if (address.empty()) return invalidArgument("cannot connect to an empty address");
  const std::string target = address.toString();
  int backoffMs = 1;
  std::string lastError = "none";
  while (true) {
    if (waiter.aborted()) return invalidUsage("connect to %s: aborted", target.c_str());
    int fd = socket(address.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return errnoError(errno, "socket to connect to " + target);
    Socket sock(fd, address);
    // Buffer sizes must be set before the handshake to affect the window scale.
    CHORUS_TRY(sock.applyOptions(options));
    int err = 0;
    if (::connect(fd, address.sockaddrPtr(), address.length()) != 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      CHORUS_TRY(pollFd(fd, POLLOUT, waiter, "connect to " + target));
      socklen_t len = sizeof(err);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err == 0) {
      // A connect to a local port nobody listens on yet can pick that very port as its own
      // source and connect to itself (TCP simultaneous open): that is a refused connect.
      sockaddr_storage local;
      socklen_t localLen = sizeof local;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &localLen) != 0 ||
          !(SocketAddress(reinterpret_cast<sockaddr*>(&local), localLen) == address))
        return sock;
      err = ECONNREFUSED;
    }
    if (!retryableConnectError(err) || (err == ECONNREFUSED && !options.retryRefused))
      return errnoError(err, "connect to " + target);
    lastError = strerror(err);
    int ms = waiter.remainingMs(backoffMs);
    if (ms == 0 && waiter.deadline() != Clock::time_point::max())
      return remoteError("connect to %s: timed out (last error: %s)", target.c_str(),
                         lastError.c_str());
    sock.close();
    poll(nullptr, 0, ms);
    backoffMs = std::min(backoffMs * 2, 100);
  }
}

// ---------------------------------------------------------------------------------------------
// Interfaces

Result<std::vector<InterfaceAddress>> listInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return errnoError(errno, "getifaddrs");
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, freeifaddrs);
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0) continue;
    int family = ifa->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress n;
    n.name = ifa->ifa_name;
    n.family = family;
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    SocketAddress addr(ifa->ifa_addr, len);
    if (family == AF_INET6 && addr.isLinkLocal()) continue;
    n.addr = addr.storage();
    n.netmask = SocketAddress(ifa->ifa_netmask, len).storage();
    n.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0 || addr.isLoopback();
    out.push_back(n);
  }
  return out;
}

namespace {

bool startsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Whether name passes a SOCKET_IFNAME filter ("eth,ib", "^docker", "=eth0", "^=eth1").
bool matchesFilter(const std::string& name, const std::string& spec) {
  size_t pos = 0;
  bool exclude = pos < spec.size() && spec[pos] == '^';
  if (exclude) ++pos;
  bool exact = pos < spec.size() && spec[pos] == '=';
  if (exact) ++pos;
  bool hit = false;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    size_t end = comma == std::string::npos ? spec.size() : comma;
    std::string token = spec.substr(pos, end - pos);
    token.erase(0, token.find_first_not_of(" \t"));
    token.erase(token.find_last_not_of(" \t") + 1);
    if (!token.empty() && (exact ? name == token : startsWith(name, token))) hit = true;
    pos = end + 1;
  }
  return exclude ? !hit : hit;
}

Result<int> parseFamily(const std::string& value, const std::string& source) {
  if (value.empty()) return AF_UNSPEC;
  const char* v = value.c_str();
  if (strcasecmp(v, "AF_INET") == 0 || strcasecmp(v, "inet") == 0 || strcasecmp(v, "ipv4") == 0 ||
      strcmp(v, "4") == 0)
    return AF_INET;
  if (strcasecmp(v, "AF_INET6") == 0 || strcasecmp(v, "inet6") == 0 || strcasecmp(v, "ipv6") == 0 ||
      strcmp(v, "6") == 0)
    return AF_INET6;
  return invalidArgument("%s=\"%s\" is not AF_INET or AF_INET6", source.c_str(), v);
}

std::string availableNames(const std::vector<InterfaceAddress>& all) {
  std::vector<std::string> names;
  for (const InterfaceAddress& n : all)
    if (std::find(names.begin(), names.end(), n.name) == names.end()) names.push_back(n.name);
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

}  // namespace

Result<std::vector<InterfaceAddress>> selectInterfaces(const std::vector<InterfaceAddress>& all,
                                                       const std::string& ifname,
                                                       const std::string& ifnameSource,
                                                       const std::string& family,
                                                       const std::string& familySource) {
  CHORUS_ASSIGN_OR_RETURN(int fam, parseFamily(family, familySource));
  std::vector<InterfaceAddress> matched;
  for (const InterfaceAddress& n : all) {
    if (fam != AF_UNSPEC && n.family != fam) continue;
    if (!ifname.empty()) {
      if (!matchesFilter(n.name, ifname)) continue;
    } else if (n.loopback || startsWith(n.name, "docker") || startsWith(n.name, "virbr")) {
      continue;
    }
    matched.push_back(n);
  }
  if (matched.empty() && ifname.empty()) {
    for (const InterfaceAddress& n : all)
      if (n.loopback && (fam == AF_UNSPEC || n.family == fam)) matched.push_back(n);
  }
  if (matched.empty()) {
    std::string familyNote =
        fam == AF_UNSPEC ? ""
                         : formatString(" with %s=\"%s\"", familySource.c_str(), family.c_str());
    if (!ifname.empty())
      return invalidArgument("%s=\"%s\" matches no interface%s (available: %s)",
                             ifnameSource.c_str(), ifname.c_str(), familyNote.c_str(),
                             availableNames(all).c_str());
    if (fam != AF_UNSPEC)
      return invalidArgument(
          "%s=\"%s\": no interface that is up has such an address "
          "(available: %s)",
          familySource.c_str(), family.c_str(), availableNames(all).c_str());
    return systemError("no network interface with an IPv4 or IPv6 address is up");
  }
  // One address per interface, IPv4 preferred; loopback last so an exclude list picks a NIC.
  std::vector<InterfaceAddress> out;
  for (const InterfaceAddress& n : matched) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const InterfaceAddress& o) { return o.name == n.name; });
    if (same == out.end())
      out.push_back(n);
    else if (same->family != AF_INET && n.family == AF_INET)
      *same = n;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const InterfaceAddress& a, const InterfaceAddress& b) {
                     if (a.loopback != b.loopback) return !a.loopback;
                     return a.family == AF_INET && b.family != AF_INET;
                   });
  return out;
}

namespace {

// selectInterfaces with the environment's filter; when the filter names interfaces that exist
// but have no usable address, the error says so instead of only listing the others.
Result<std::vector<InterfaceAddress>> selectFromEnvironment(
    const std::vector<InterfaceAddress>& all) {
  ParamValue ifname = paramRaw("SOCKET_IFNAME");
  ParamValue family = paramRaw("SOCKET_FAMILY");
  Result<std::vector<InterfaceAddress>> picked =
      selectInterfaces(all, ifname.isSet ? ifname.value : "", ifname.source,
                       family.isSet ? family.value : "", family.source);
  if (picked.isOk() || !ifname.isSet || ifname.value.empty()) return picked;
  std::string bare;
  if (struct if_nameindex* names = if_nameindex()) {
    for (struct if_nameindex* i = names; i->if_index != 0 && i->if_name != nullptr; ++i) {
      std::string name = i->if_name;
      if (!matchesFilter(name, ifname.value)) continue;
      bool hasAddress = std::any_of(all.begin(), all.end(),
                                    [&](const InterfaceAddress& a) { return a.name == name; });
      if (!hasAddress) bare += (bare.empty() ? "" : ", ") + name;
    }
    if_freenameindex(names);
  }
  if (bare.empty()) return picked;
  return Status(
      picked.status().code(),
      picked.status().message() + formatString("; it names %s, which %s", bare.c_str(),
                                               bare.find(',') == std::string::npos
                                                   ? "is down or has no IPv4/IPv6 address"
                                                   : "are down or have no IPv4/IPv6 address"));
}

}  // namespace

Result<std::vector<InterfaceAddress>> findInterfaces() {
  CHORUS_ASSIGN_OR_RETURN(std::vector<InterfaceAddress> all, listInterfaces());
  return selectFromEnvironment(all);
}

namespace {

bool sameSubnet(const InterfaceAddress& n, const sockaddr_storage& remote) {
  if (n.family != remote.ss_family) return false;
  const unsigned char* a;
  const unsigned char* m;
  const unsigned char* r;
  size_t len;
  if (n.family == AF_INET) {
    a = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(&n.addr)->sin_addr);
    m = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(&n.netmask)->sin_addr);
    r = reinterpret_cast<const unsigned char*>(
        &reinterpret_cast<const sockaddr_in*>(&remote)->sin_addr);
    len = 4;
  } else {
    a = reinterpret_cast<const sockaddr_in6*>(&n.addr)->sin6_addr.s6_addr;
    m = reinterpret_cast<const sockaddr_in6*>(&n.netmask)->sin6_addr.s6_addr;
    r = reinterpret_cast<const sockaddr_in6*>(&remote)->sin6_addr.s6_addr;
    len = 16;
  }
  for (size_t i = 0; i < len; ++i)
    if ((a[i] & m[i]) != (r[i] & m[i])) return false;
  return true;
}

}  // namespace

Result<InterfaceAddress> findInterfaceReaching(const sockaddr_storage& remote,
                                               const std::vector<std::string>& preferred) {
  CHORUS_ASSIGN_OR_RETURN(std::vector<InterfaceAddress> all, listInterfaces());
  ParamValue ifname = paramRaw("SOCKET_IFNAME");
  ParamValue family = paramRaw("SOCKET_FAMILY");
  std::vector<InterfaceAddress> candidates = all;
  if (ifname.isSet || family.isSet) {
    CHORUS_ASSIGN_OR_RETURN(candidates, selectFromEnvironment(all));
  }
  auto rank = [&](const InterfaceAddress& n) {
    auto it = std::find(preferred.begin(), preferred.end(), n.name);
    return it == preferred.end() ? preferred.size() : static_cast<size_t>(it - preferred.begin());
  };
  auto byPreference = [&](const InterfaceAddress& a, const InterfaceAddress& b) {
    return rank(a) < rank(b);
  };
  std::stable_sort(candidates.begin(), candidates.end(), byPreference);
  // A rendezvous at one of our own addresses is reached through that very interface.
  for (const InterfaceAddress& n : candidates) {
    SocketAddress mine(n.addr);
    SocketAddress theirs(remote);
    theirs.setPort(0);
    if (mine == theirs) return n;
  }
  for (const InterfaceAddress& n : candidates)
    if (sameSubnet(n, remote)) return n;
  CHORUS_ASSIGN_OR_RETURN(std::vector<InterfaceAddress> selected, findInterfaces());
  std::stable_sort(selected.begin(), selected.end(), byPreference);
  return selected.front();
}

}  // namespace chorus
