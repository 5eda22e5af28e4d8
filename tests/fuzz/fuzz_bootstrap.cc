// What peers send during the bootstrap: the hello a rank sends the rendezvous root, the root's
// reply (header and address table), the hello on peer connections and the frame header of
// every peer message. The first byte picks the message, the rest is the bytes on the wire
// (zero-padded to the message's size). Parsing is total (any bytes give an answer, never a
// fault); a size the reader would allocate by is bounded; hellos that parse survive a round
// trip.
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "bootstrap/wire.h"
#include "common/socket.h"
#include "fuzz.h"

namespace w = chorus::wire;

namespace {

// The message bytes: the input after the selector, zero-padded to at least n bytes.
std::vector<unsigned char> bytesOf(const uint8_t* data, size_t size, size_t n) {
  std::vector<unsigned char> b(size > n ? size : n, 0);
  if (size > 0) std::memcpy(b.data(), data, size);
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 4;
  ++data;
  --size;
  switch (kind) {
    case 0: {
      std::vector<unsigned char> b = bytesOf(data, size, w::kRootHelloBytes);
      w::RootHello h;
      if (!w::getRootHello(b.data(), &h)) return 0;
      unsigned char again[w::kRootHelloBytes];
      w::putRootHello(again, h);
      w::RootHello back;
      FUZZ_CHECK(w::getRootHello(again, &back));
      FUZZ_CHECK(back.secret == h.secret && back.idMagic == h.idMagic && back.rank == h.rank &&
                 back.nranks == h.nranks && back.initTimeoutMs == h.initTimeoutMs);
      FUZZ_CHECK(chorus::addressToString(back.listenAddress) ==
                 chorus::addressToString(h.listenAddress));
      break;
    }
    case 1: {
      // A reply for a job of 1..64 ranks (the next byte), then its payload: the address table.
      if (size == 0) return 0;
      const int nranks = 1 + data[0] % 64;
      ++data;
      --size;
      std::vector<unsigned char> b = bytesOf(data, size, w::kRootReplyHeaderBytes);
      w::RootReply r;
      if (!w::getRootReply(b.data(), nranks, &r)) return 0;
      FUZZ_CHECK(r.length <= static_cast<uint64_t>(nranks) * w::kAddressBytes ||
                 r.length <= w::kMaxReplyMessageBytes);
      if (r.code != 0) break;
      std::vector<unsigned char> table =
          bytesOf(data + w::kRootReplyHeaderBytes,
                  size > w::kRootReplyHeaderBytes ? size - w::kRootReplyHeaderBytes : 0, r.length);
      for (int i = 0; i < nranks; ++i) {
        sockaddr_storage a;
        if (w::getAddress(table.data() + static_cast<size_t>(i) * w::kAddressBytes, &a))
          FUZZ_CHECK(a.ss_family == AF_INET || a.ss_family == AF_INET6);
      }
      break;
    }
    case 2: {
      std::vector<unsigned char> b = bytesOf(data, size, w::kPeerHelloBytes);
      w::PeerHello h;
      (void)w::getPeerHello(b.data(), &h);
      break;
    }
    default: {
      std::vector<unsigned char> b = bytesOf(data, size, w::kFrameHeaderBytes);
      w::FrameHeader f;
      const uint64_t limit = uint64_t{1} << 34;
      if (w::getFrameHeader(b.data(), limit, &f)) FUZZ_CHECK(f.size <= limit);
      break;
    }
  }
  return 0;
}
