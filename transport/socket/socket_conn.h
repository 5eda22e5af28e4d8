// The socket transport's connections (socket_transport.cc): one direction of one (peer,
// channel) pair, its TCP streams, and how a message is cut into stripes over them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/socket.h"
#include "transport/connector.h"

namespace chorus {
namespace socket_detail {

constexpr uint64_t kStripeMinBytes = 64 * 1024;
constexpr int kMaxStreams = 16;  // TCP connections of one connection at most
constexpr size_t kHeadBytes = sizeof(SlotInfo);

// The bytes [*begin, *end) of a message of `bytes` bytes that stream i of n carries.
inline void stripeOf(uint64_t bytes, int n, int i, uint64_t* begin, uint64_t* end) {
  if (n == 1 || bytes < kStripeMinBytes) {
    *begin = 0;
    *end = i == 0 ? bytes : 0;
    return;
  }
  uint64_t per = (bytes + static_cast<uint64_t>(n) - 1) / static_cast<uint64_t>(n);
  per = (per + 4095) & ~uint64_t(4095);
  uint64_t b = per * static_cast<uint64_t>(i), e = b + per;
  *begin = b < bytes ? b : bytes;
  *end = e < bytes ? e : bytes;
}

// One TCP connection of a connector and its part of the message in progress.
struct SocketStream {
  std::shared_ptr<Socket>
      socket;  // shared by the two directions of a pair (see socket_transport.cc)
  int fd() const { return socket->fd(); }
  uint64_t begin = 0;  // the stripe: message bytes [begin, begin + total - 8)
  size_t total = 0;    // bytes to move for this message, header included (0: no part)
  size_t offset = 0;   // bytes moved, header included
  SlotInfo head{};     // the header sent or received on this stream: size and call
  bool pending() const { return offset < total; }
};

// One direction of one (peer, channel) pair, driven by the proxy.
struct SocketConn {
  bool isSend = false;
  int peer = -1;
  int channel = -1;
  std::vector<SocketStream> streams;
  FifoMemory memory;
  FifoHeader* fifo = nullptr;
  char* data = nullptr;
  uint64_t done = 0;       // slots fully moved
  bool inMessage = false;  // the stripes of slot `done` are set up (receive: header known)
  uint64_t msgBytes = 0;   // size of the message in progress
  CallTag msgTag;          // and the call it belongs to
  bool failed = false;
  uint32_t watched = 0;  // streams in the poll set the proxy sleeps on (bit i: stream i)
  // Receive side: bytes read from stream 0 and not used yet, [stageBegin, stageEnd).
  std::unique_ptr<char[]> stage;
  size_t stageBegin = 0;
  size_t stageEnd = 0;
  int listener = 0;        // receive side: the address index its peer connects to
  bool sendsBack = false;  // receive side: setupRecv's sendsBack
  // Both directions on one set of connections: kConnects, this rank made them (the lower
  // rank), kAccepts, the peer did; a receive side accepting them expects the Hello to say so.
  enum Sharing { kOwn, kConnects, kAccepts } sharing = kOwn;

  bool connected() const {
    for (const SocketStream& st : streams)
      if (!st.socket || !st.socket->valid()) return false;
    return true;
  }
  // Sets up every stream's part of a message of `bytes` bytes.
  void startMessage(const SlotInfo& info) {
    const uint64_t bytes = info.bytes;
    const int n = static_cast<int>(streams.size());
    for (int i = 0; i < n; ++i) {
      SocketStream& st = streams[i];
      uint64_t b, e;
      stripeOf(bytes, n, i, &b, &e);
      st.begin = b;
      st.total = i == 0 || e > b ? kHeadBytes + (e - b) : 0;
      st.offset = 0;
      st.head = info;
    }
    msgBytes = bytes;
    msgTag = info.tag;
    inMessage = true;
  }
};

}  // namespace socket_detail
}  // namespace chorus
