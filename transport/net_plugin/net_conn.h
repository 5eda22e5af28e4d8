// The net plugin transport's connections (net_transport.cc): what a receiver tells its sender
// (NetInfo, in the ConnectInfo), and one direction of one (peer, channel) pair (NetConn): its
// FIFO, the network's comm and registrations, and the requests in flight.
#pragma once

#include <poll.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/connector.h"
#include "transport/net_plugin/net_abi.h"
#include "transport/transport.h"

namespace chorus {
namespace net_detail {

constexpr uint32_t kInfoMagic = 0x4e455450;  // "NETP"
constexpr uint64_t kInFlight = 8;

struct NetInfo {
  uint32_t magic;
  int16_t rail;  // the receiver's device's rail and plane (-1: not reported)
  int16_t plane;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  // The receiver also sends to the sender on this channel, and the network's connections can
  // carry both directions: the pair then shares one (see NetConn::share).
  int32_t sendsBack;
};
static_assert(sizeof(NetInfo) <= sizeof(ConnectInfo), "NetInfo must fit a ConnectInfo");

struct NetConn {
  bool isSend = false;
  int peer = -1;
  int channel = -1;
  int dev = 0;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};  // send side: the listener's, reused by retries
  void* listenComm = nullptr;                 // receive side, until accepted
  void* comm = nullptr;                       // the plugin's send or receive comm
  void* dataMr = nullptr;
  void* headMr = nullptr;
  FifoMemory memory;  // the FIFO
  FifoHeader* fifo = nullptr;
  char* data = nullptr;
  std::unique_ptr<SlotInfo[]> slotHeads{new SlotInfo[kMaxFifoSlots]};  // as sent or received
  uint64_t posted = 0;   // slots whose two messages are posted
  uint64_t done = 0;     // slots whose two messages completed, in order
  bool grouped = false;  // receive side: a slot's two messages in one grouped receive (head)
  // Set up while the transport held receives: posts none until placeSlots says where.
  bool held = false;
  // A pair that both send to each other on a channel over a network whose connections carry
  // both directions (NetPlugin::bothWays) shares one: the lower rank's send side connects it
  // (connectBoth), the higher rank's receive side accepts it (acceptBoth), and each hands the
  // comm of the other direction to its twin (the conn of the same peer and channel), which
  // waits for it. As with the socket transport, each side's data then carries the
  // acknowledgements of the other's.
  // Receive side: setupRecv's sendsBack, over such a network: it accepts nothing until this
  // rank's connectSend to the same peer and channel said whether the pair shares (the peer's
  // connection may be of both directions).
  bool awaitsShare = false;
  enum Share { kOwn, kMakes, kWaits } share = kOwn;
  NetConn* twin = nullptr;
  void* given = nullptr;        // the comm the twin handed over, until setup takes it
  std::vector<pollfd> watched;  // what the proxy's sleep on descriptors watches for it
  // Placed (placeSlots): the slots' data are the party's memory, registered as placedMr.
  bool placed = false;
  SlotMemory place;
  void* placedMr = nullptr;
  struct Req {
    void* head = nullptr;  // grouped: the request of both
    void* data = nullptr;
    void* flush = nullptr;  // received into GPU memory: the flush before the slot is published
    bool headDone = false;
    bool dataDone = false;
    bool flushed = false;
    size_t headBytes = sizeof(SlotInfo);  // as received (grouped)
    size_t got = 0;                       // the data's bytes, as sent or received
  } reqs[kInFlight];
  bool failed = false;
  // Slot i's data and the bytes it holds: the party's memory when placed, else the FIFO's own.
  char* slot(uint64_t i, size_t slotBytes) const {
    return placed ? place.data + (i % place.nslots) * place.slotBytes : data + i * slotBytes;
  }
  size_t capacity(size_t slotBytes) const { return placed ? place.slotBytes : slotBytes; }
};

}  // namespace net_detail
}  // namespace chorus
