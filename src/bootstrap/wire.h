// Byte layouts of the bootstrap protocol: the unique id, the hello a rank sends the root, the
// root's reply, the hello on peer connections and the frame header of peer messages. Integers
// are little-endian, IP addresses in network order, so ranks of any host agree.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace chorus {
namespace wire {

constexpr uint32_t kProtocolVersion = 1;

constexpr uint32_t kIdMarker = 0x53524843;         // "CHRS"
constexpr uint32_t kRootHelloMarker = 0x48524843;  // "CHRH"
constexpr uint32_t kRootReplyMarker = 0x52524843;  // "CHRR"
constexpr uint32_t kPeerHelloMarker = 0x50524843;  // "CHRP"
constexpr uint32_t kFrameMarker = 0x46524843;      // "CHRF"

inline void putU16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
inline void putU32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void putU64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline uint16_t getU16(const unsigned char* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
inline uint32_t getU32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
inline uint64_t getU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// FNV-1a, then a final avalanche so that nearby inputs give unrelated values. Used for the
// id checksum and for deriving values from strings; not a cryptographic hash.
inline uint64_t hash64(const void* data, size_t bytes, uint64_t seed = 0) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}
inline uint64_t hashString(const std::string& s, uint64_t seed = 0) {
  return hash64(s.data(), s.size(), seed);
}

// An address: family (4 or 6), reserved byte, port, 16 address bytes, IPv6 scope id.
constexpr size_t kAddressBytes = 24;

inline void putAddress(unsigned char* p, const sockaddr_storage& addr) {
  memset(p, 0, kAddressBytes);
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    p[0] = 4;
    putU16(p + 2, ntohs(a->sin_port));
    memcpy(p + 4, &a->sin_addr, 4);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    p[0] = 6;
    putU16(p + 2, ntohs(a->sin6_port));
    memcpy(p + 4, &a->sin6_addr, 16);
    putU32(p + 20, a->sin6_scope_id);
  }
}

// False when the bytes do not hold an IPv4/IPv6 address.
inline bool getAddress(const unsigned char* p, sockaddr_storage* out) {
  memset(out, 0, sizeof(*out));
  if (p[0] == 4) {
    for (size_t i = 8; i < kAddressBytes; ++i)
      if (p[i] != 0) return false;
    auto* a = reinterpret_cast<sockaddr_in*>(out);
    a->sin_family = AF_INET;
    a->sin_port = htons(getU16(p + 2));
    memcpy(&a->sin_addr, p + 4, 4);
    return true;
  }
  if (p[0] == 6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(out);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(getU16(p + 2));
    memcpy(&a->sin6_addr, p + 4, 16);
    a->sin6_scope_id = getU32(p + 20);
    return true;
  }
  return false;
}

// Rank -> root: marker, version, secret, id magic, rank, nranks, the rank's init timeout in
// milliseconds (0: none), reserved, the rank's peer listener address.
constexpr size_t kRootHelloBytes = 4 + 4 + 8 + 8 + 4 + 4 + 4 + 4 + kAddressBytes;

struct RootHello {
  uint64_t secret = 0;
  uint64_t idMagic = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
  uint32_t initTimeoutMs = 0;
  sockaddr_storage listenAddress{};
};

inline void putRootHello(unsigned char* p, const RootHello& h) {
  memset(p, 0, kRootHelloBytes);
  putU32(p, kRootHelloMarker);
  putU32(p + 4, kProtocolVersion);
  putU64(p + 8, h.secret);
  putU64(p + 16, h.idMagic);
  putU32(p + 24, static_cast<uint32_t>(h.rank));
  putU32(p + 28, static_cast<uint32_t>(h.nranks));
  putU32(p + 32, h.initTimeoutMs);
  putAddress(p + 40, h.listenAddress);
}

// False when the bytes are not a hello of this protocol version.
inline bool getRootHello(const unsigned char* p, RootHello* h) {
  if (getU32(p) != kRootHelloMarker || getU32(p + 4) != kProtocolVersion) return false;
  h->secret = getU64(p + 8);
  h->idMagic = getU64(p + 16);
  h->rank = static_cast<int32_t>(getU32(p + 24));
  h->nranks = static_cast<int32_t>(getU32(p + 28));
  h->initTimeoutMs = getU32(p + 32);
  return getAddress(p + 40, &h->listenAddress);
}

// Root -> rank: marker, status code (0: ok), payload bytes; then the payload: nranks addresses
// (the peer listener of every rank) on success, the error message otherwise.
constexpr size_t kRootReplyHeaderBytes = 12;
constexpr uint32_t kMaxReplyMessageBytes = 4096;

struct RootReply {
  uint32_t code = 0;
  uint32_t length = 0;  // payload bytes
};

// False when the bytes are not a reply a rank of nranks can take: the payload of a success is
// exactly nranks addresses, an error message at most kMaxReplyMessageBytes.
inline bool getRootReply(const unsigned char* p, int nranks, RootReply* r) {
  r->code = getU32(p + 4);
  r->length = getU32(p + 8);
  const uint64_t tableBytes = static_cast<uint64_t>(nranks) * kAddressBytes;
  return getU32(p) == kRootReplyMarker && nranks > 0 &&
         (r->code == 0 ? r->length == tableBytes : r->length <= kMaxReplyMessageBytes);
}

// Rank -> rank, first bytes on a peer connection: marker, version, secret, id magic, sender
// rank, nranks.
constexpr size_t kPeerHelloBytes = 4 + 4 + 8 + 8 + 4 + 4;

struct PeerHello {
  uint64_t secret = 0;
  uint64_t idMagic = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
};

// False when the bytes are not a peer hello of this protocol version.
inline bool getPeerHello(const unsigned char* p, PeerHello* h) {
  if (getU32(p) != kPeerHelloMarker || getU32(p + 4) != kProtocolVersion) return false;
  h->secret = getU64(p + 8);
  h->idMagic = getU64(p + 16);
  h->rank = static_cast<int32_t>(getU32(p + 24));
  h->nranks = static_cast<int32_t>(getU32(p + 28));
  return true;
}

// Every peer message: marker, tag, payload bytes.
constexpr size_t kFrameHeaderBytes = 16;

struct FrameHeader {
  int32_t tag = 0;
  uint64_t size = 0;
};

// False when the bytes are not a frame header, or announce more than maxBytes of payload.
inline bool getFrameHeader(const unsigned char* p, uint64_t maxBytes, FrameHeader* f) {
  f->tag = static_cast<int32_t>(getU32(p + 4));
  f->size = getU64(p + 8);
  return getU32(p) == kFrameMarker && f->size <= maxBytes;
}

}  // namespace wire
}  // namespace chorus
