// TCP sockets for the bootstrap and the socket transport: addresses, an owning Socket with
// deadline- and abort-aware exact sends/receives, a Listener, connect with retry, and the choice
// of network interfaces (CHORUS_SOCKET_IFNAME / CHORUS_SOCKET_FAMILY).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wait.h"

namespace chorus {

// An IPv4 or IPv6 address with a port (AF_UNSPEC when empty).
class SocketAddress {
 public:
  SocketAddress();
  explicit SocketAddress(const sockaddr_storage& storage);
  SocketAddress(const sockaddr* addr, socklen_t length);

  // Parses "1.2.3.4:5678", "[::1]:5678" or "hostname:5678" (resolved with getaddrinfo, IPv4
  // preferred). The port is required and must be 0..65535.
  static Result<SocketAddress> parse(const std::string& text);
  // 127.0.0.1 or ::1 with the given port.
  static SocketAddress loopback(int family, int port);

  const sockaddr_storage& storage() const { return storage_; }
  const sockaddr* sockaddrPtr() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const;
  int family() const { return storage_.ss_family; }
  bool empty() const { return family() != AF_INET && family() != AF_INET6; }

  int port() const;
  void setPort(int port);

  // "1.2.3.4:5678", "[fd00::1]:5678"; "<none>" when empty.
  std::string toString() const;
  // The host part alone: "1.2.3.4", "fd00::1".
  std::string hostString() const;

  bool isLoopback() const;
  bool isLinkLocal() const;

  // Family, address and port (and the IPv6 scope) compare equal.
  bool operator==(const SocketAddress& other) const;
  bool operator!=(const SocketAddress& other) const { return !(*this == other); }

 private:
  sockaddr_storage storage_;
};

// Shorthand for log and error messages.
std::string addressToString(const sockaddr_storage& addr);

struct SocketOptions {
  bool noDelay = true;  // TCP_NODELAY
  int bufferBytes = 0;  // SO_SNDBUF and SO_RCVBUF when > 0
  // connectSocket tries a refused connect again until its deadline (the listener may not be up
  // yet); false when the listener was known to be up before the address was handed out, so
  // that a refusal means it is gone.
  bool retryRefused = true;
};

// An owned, non-blocking TCP socket; move-only, closed on destruction.
class Socket {
 public:
  Socket() = default;
  Socket(int fd, const SocketAddress& peer) : fd_(fd), peer_(peer) {}
  ~Socket() { close(); }
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  const SocketAddress& peer() const { return peer_; }
  void close();

  Status applyOptions(const SocketOptions& options);
  Result<SocketAddress> localAddress() const;

  // Moves exactly bytes, waiting with poll() until waiter's deadline; an abort raised on the
  // waiter's flag ends the wait. Errors name the peer and the operation; a peer that closed
  // the connection gives kRemoteError "connection closed by <addr>".
  Status sendAll(const void* data, size_t bytes, const Waiter& waiter);
  Status recvAll(void* data, size_t bytes, const Waiter& waiter);

  // Non-blocking single attempts for progress loops: the number of bytes moved, 0 when the
  // call would block. A closed connection or a socket error is an error Status.
  Result<size_t> sendSome(const void* data, size_t bytes);
  Result<size_t> recvSome(void* data, size_t bytes);

 private:
  int fd_ = -1;
  SocketAddress peer_;
};

// A listening socket bound to one address.
class Listener {
 public:
  Listener() = default;

  // Binds (SO_REUSEADDR) and listens; port 0 picks an ephemeral port, see address().
  static Result<Listener> open(const SocketAddress& bindAddress, int backlog = 512);

  bool valid() const { return socket_.valid(); }
  int fd() const { return socket_.fd(); }
  // The bound address, with the port the kernel chose.
  const SocketAddress& address() const { return address_; }
  void close() { socket_.close(); }

  // Waits for one connection until waiter's deadline or abort.
  Result<Socket> accept(const Waiter& waiter, const SocketOptions& options = SocketOptions());
  // One non-blocking attempt: an invalid Socket when no connection is pending.
  Result<Socket> tryAccept(const SocketOptions& options = SocketOptions());

 private:
  Socket socket_;
  SocketAddress address_;
};

// Connects to address, retrying refused/unreachable/timed-out attempts with a short backoff
// until waiter's deadline (the peer may not be listening yet) or abort.
Result<Socket> connectSocket(const SocketAddress& address, const Waiter& waiter,
                             const SocketOptions& options = SocketOptions());

// Whether a connect that failed with err may succeed when tried again (refused, unreachable,
// timed out, reset: a listener not up yet, a backlog that overflowed).
bool retryableConnectError(int err);

// Polls one fd for events until the deadline/abort of waiter, in slices so that an abort is
// seen within a few tens of milliseconds. Returns ok when ready; what names the operation.
Status pollFd(int fd, short events, const Waiter& waiter, const std::string& what);

// One address of a network interface that is up.
struct InterfaceAddress {
  std::string name;          // "eth0"
  sockaddr_storage addr;     // the interface's address (port 0)
  sockaddr_storage netmask;  // its netmask, same family
  int family = AF_UNSPEC;    // AF_INET or AF_INET6
  bool loopback = false;
};

// Every up interface address, except IPv6 link-local ones, in getifaddrs order.
Result<std::vector<InterfaceAddress>> listInterfaces();

// Applies the interface selection rules to a list (see findInterfaces). ifname and family are
// the raw parameter values, ifnameSource/familySource the variable names used in errors.
Result<std::vector<InterfaceAddress>> selectInterfaces(const std::vector<InterfaceAddress>& all,
                                                       const std::string& ifname,
                                                       const std::string& ifnameSource,
                                                       const std::string& family,
                                                       const std::string& familySource);

// The interfaces Chorus may use, best first, at most one address per interface (IPv4 preferred).
// SOCKET_IFNAME: comma list of name prefixes; "^" in front excludes them; "=" in front (after a
// possible "^") makes them exact names. SOCKET_FAMILY: AF_INET or AF_INET6. Unset: everything but
// lo, docker* and virbr*, IPv4 interfaces first; loopback when nothing else is up. A filter that
// matches nothing is kInvalidArgument naming the variable and the interfaces available.
Result<std::vector<InterfaceAddress>> findInterfaces();

// The local interface in the same subnet as remote (for a rendezvous at a known address), else
// the first of findInterfaces(). With SOCKET_IFNAME set, only the selected interfaces count.
// Among equally good interfaces, those named earlier in preferred win.
Result<InterfaceAddress> findInterfaceReaching(const sockaddr_storage& remote,
                                               const std::vector<std::string>& preferred = {});

}  // namespace chorus
