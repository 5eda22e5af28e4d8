// The unique id: its 128-byte encoding, and where a new one comes from (a fresh root listener
// and thread, or CHORUS_COMM_ID).
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "bootstrap/root.h"
#include "bootstrap/wire.h"
#include "common/log.h"
#include "common/param.h"
#include "common/socket.h"

namespace chorus {

namespace {

// Layout of the 128 bytes: marker, version, root address, secret, id magic, zeros, and a
// checksum of everything before it in the last 8 bytes.
constexpr size_t kMarkerOffset = 0;
constexpr size_t kVersionOffset = 4;
constexpr size_t kAddressOffset = 8;
constexpr size_t kSecretOffset = kAddressOffset + wire::kAddressBytes;
constexpr size_t kMagicOffset = kSecretOffset + 8;
constexpr size_t kReservedOffset = kMagicOffset + 8;
constexpr size_t kChecksumOffset = kUniqueIdBytes - 8;
static_assert(kReservedOffset <= kChecksumOffset, "unique id fields overflow 128 bytes");

constexpr uint64_t kChecksumSeed = 0x43686f7275734964ull;

Status badId(const char* why) {
  return invalidArgument(
      "uniqueId is not a valid Chorus id (%s); pass every rank the bytes that ncclGetUniqueId "
      "returned, unchanged",
      why);
}

}  // namespace

uint64_t random64() {
  uint64_t v = 0;
  ssize_t n;
  do {
    n = getrandom(&v, sizeof(v), 0);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof(v))) return v;
  static std::atomic<uint64_t> counter{0};
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true))
    LOG_WARN(kSubsysBootstrap,
             "getrandom failed (errno %d); bootstrap secrets and network nonces are guessable",
             errno);
  uint64_t mix[3] = {static_cast<uint64_t>(Clock::now().time_since_epoch().count()),
                     static_cast<uint64_t>(getpid()), counter.fetch_add(1)};
  return wire::hash64(mix, sizeof(mix));
}

void encodeUniqueId(const UniqueIdInfo& info, unsigned char out[kUniqueIdBytes]) {
  memset(out, 0, kUniqueIdBytes);
  wire::putU32(out + kMarkerOffset, wire::kIdMarker);
  wire::putU32(out + kVersionOffset, wire::kProtocolVersion);
  wire::putAddress(out + kAddressOffset, info.rootAddr);
  wire::putU64(out + kSecretOffset, info.secret);
  wire::putU64(out + kMagicOffset, info.magic);
  wire::putU64(out + kChecksumOffset, wire::hash64(out, kChecksumOffset, kChecksumSeed));
}

Result<UniqueIdInfo> decodeUniqueId(const unsigned char in[kUniqueIdBytes]) {
  if (in == nullptr) return badId("null pointer");
  if (wire::getU32(in + kMarkerOffset) != wire::kIdMarker) return badId("no Chorus marker");
  if (wire::getU32(in + kVersionOffset) != wire::kProtocolVersion)
    return badId("made by an incompatible Chorus version");
  if (wire::getU64(in + kChecksumOffset) != wire::hash64(in, kChecksumOffset, kChecksumSeed))
    return badId("checksum mismatch: the bytes were changed");
  for (size_t i = kReservedOffset; i < kChecksumOffset; ++i)
    if (in[i] != 0) return badId("reserved bytes are not zero");
  UniqueIdInfo info;
  if (!wire::getAddress(in + kAddressOffset, &info.rootAddr))
    return badId("no IPv4/IPv6 root address");
  if (SocketAddress(info.rootAddr).port() == 0) return badId("root port 0");
  info.secret = wire::getU64(in + kSecretOffset);
  info.magic = wire::getU64(in + kMagicOffset);
  return info;
}

bool commIdFromEnvironment() {
  ParamValue v = paramRaw("COMM_ID");
  return v.isSet && !v.value.empty();
}

Result<UniqueIdInfo> uniqueIdFromEnvironment() {
  ParamValue v = paramRaw("COMM_ID");
  if (!v.isSet || v.value.empty())
    return invalidUsage("neither CHORUS_COMM_ID nor NCCL_COMM_ID is set");
  Result<SocketAddress> addr = SocketAddress::parse(v.value);
  if (!addr.isOk())
    return invalidArgument("%s=\"%s\" is not a usable host:port: %s", v.source.c_str(),
                           v.value.c_str(), addr.status().message().c_str());
  if (addr.value().port() == 0)
    return invalidArgument("%s=\"%s\" needs a port other than 0", v.source.c_str(),
                           v.value.c_str());
  UniqueIdInfo info;
  memset(&info, 0, sizeof(info));
  info.rootAddr = addr.value().storage();
  // Derived from the variable's text, not the resolved address, so that every process agrees.
  ParamValue secret = paramRaw("COMM_SECRET");
  if (secret.isSet && !secret.value.empty()) {
    info.secret = wire::hashString("chorus-comm-secret:" + secret.value);
  } else {
    // Not a secret: anyone who knows the address can compute it. It only keeps strays out.
    info.secret = wire::hashString("chorus-comm-id-secret:" + v.value);
  }
  info.magic = wire::hashString("chorus-comm-id-magic:" + v.value);
  return info;
}

namespace {

// A fresh id whose root listens on listener.
Result<UniqueIdInfo> startRoot(Listener listener, const std::string& where) {
  UniqueIdInfo info;
  memset(&info, 0, sizeof(info));
  info.rootAddr = listener.address().storage();
  info.secret = random64();
  info.magic = random64();
  LOG_INFO(kSubsysBootstrap, "bootstrap: new unique id, rendezvous root at %s (%s)",
           addressToString(info.rootAddr).c_str(), where.c_str());
  CHORUS_TRY(startRendezvousRoot(std::move(listener), info));
  return info;
}

}  // namespace

Result<UniqueIdInfo> createUniqueId() {
  if (commIdFromEnvironment()) return uniqueIdFromEnvironment();
  return createFreshUniqueId();
}

Result<UniqueIdInfo> createFreshUniqueId() {
  Result<std::vector<InterfaceAddress>> ifaces = findInterfaces();
  if (!ifaces.isOk()) return ifaces.status().withContext("ncclGetUniqueId");
  const InterfaceAddress& iface = ifaces.value().front();
  SocketAddress bindAddress(iface.addr);
  bindAddress.setPort(0);
  Result<Listener> listener = Listener::open(bindAddress);
  if (!listener.isOk())
    return listener.status().withContext("ncclGetUniqueId: opening the rendezvous root on " +
                                         iface.name);
  return startRoot(listener.take(), "interface " + iface.name);
}

Result<UniqueIdInfo> createLocalUniqueId() {
  Result<Listener> listener = Listener::open(SocketAddress::loopback(AF_INET, 0));
  if (!listener.isOk()) {
    Result<Listener> v6 = Listener::open(SocketAddress::loopback(AF_INET6, 0));
    if (!v6.isOk()) return listener.status().withContext("opening a rendezvous root on loopback");
    listener = std::move(v6);
  }
  return startRoot(listener.take(), "loopback, one process");
}

}  // namespace chorus
