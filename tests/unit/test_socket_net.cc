// Chorus's socket network behind the net plugin interface (transport/socket/socket_net.h):
// connections of one and of three streams move messages of every size class (empty, small,
// striped) posted several at a time, compared byte for byte with what was sent; a grouped
// receive takes its messages by tag; a message of the wrong tag or too large for its receive is
// refused; a connection that does not present the listener's nonce is dropped while the right
// one is accepted; a peer that closes fails the receive; the descriptors the proxy sleeps on;
// one connection carrying both directions, and the two ends disagreeing on it.
#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/net_plugin_testing.h"
#include "transport/socket/socket_net.h"

namespace {

using chorus::NetPlugin;

// Bytes that do not repeat within a stripe's alignment (a stripe written at another offset, or
// two stripes swapped, compare unequal).
unsigned char pattern(size_t i, size_t salt) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull + salt;
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  return static_cast<unsigned char>(x >> 56);
}

std::unique_ptr<NetPlugin> makeNet() {
  auto net = chorus::makeSocketNet();
  EXPECT_TRUE(net.isOk()) << net.status().message();
  return net.isOk() ? net.take() : nullptr;
}

// Tests both requests until both are done (or one fails: that status is returned).
chorus::Status drive(NetPlugin& p, void* sreq, void* rreq, size_t* sent, size_t* got) {
  bool sdone = sreq == nullptr, rdone = rreq == nullptr;
  for (long i = 0; i < 20000000 && !(sdone && rdone); ++i) {
    if (!sdone) CHORUS_TRY(p.test(sreq, &sdone, sent));
    if (!rdone) CHORUS_TRY(p.test(rreq, &rdone, got));
  }
  if (!(sdone && rdone)) return chorus::internalError("requests never completed");
  return chorus::Status::ok();
}

void expectMessages(const char* nstreams) {
  ScopedEnv streams("CHORUS_SOCKET_NSTREAMS", nstreams);
  auto net = makeNet();
  ASSERT_NE(net, nullptr);
  NetPlugin& p = *net;
  EXPECT_STREQ(p.name(), "Socket");
  ASSERT_GE(p.devices(), 1);
  NetPlugin::Properties props;
  ASSERT_TRUE(p.properties(0, &props).isOk());
  EXPECT_EQ(props.ptrSupport, NCCL_PTR_HOST);
  EXPECT_EQ(props.maxRecvs, 8);
  EXPECT_GT(props.speedMbps, 0);
  EXPECT_FALSE(p.properties(p.devices(), &props).isOk());
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  // Every size class, all posted before any is tested: the sends queue behind each other.
  const std::vector<size_t> sizes = {0, 1, 4096, 65535, 65536, 70001, size_t(3) << 20, 8, 0};
  std::vector<std::vector<unsigned char>> out, in;
  std::vector<void*> sreqs, rreqs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    out.emplace_back(sizes[k]);
    for (size_t i = 0; i < sizes[k]; ++i) out[k][i] = pattern(i, k);
    in.emplace_back(sizes[k] + 64, 0xee);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    void *smr = nullptr, *rmr = nullptr, *sreq = nullptr, *rreq = nullptr;
    ASSERT_TRUE(p.regMr(send, out[k].data(), out[k].size(), &smr).isOk());
    ASSERT_TRUE(p.regMr(recv, in[k].data(), in[k].size(), &rmr).isOk());
    ASSERT_TRUE(p.irecv(recv, in[k].data(), in[k].size(), 9, rmr, &rreq).isOk());
    ASSERT_TRUE(p.isend(send, out[k].data(), sizes[k], 9, smr, &sreq).isOk());
    ASSERT_NE(sreq, nullptr);
    ASSERT_NE(rreq, nullptr);
    sreqs.push_back(sreq);
    rreqs.push_back(rreq);
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    SCOPED_TRACE(sizes[k]);
    size_t sent = 1, got = 1;
    chorus::Status s = drive(p, sreqs[k], rreqs[k], &sent, &got);
    ASSERT_TRUE(s.isOk()) << s.message();
    EXPECT_EQ(sent, sizes[k]);
    EXPECT_EQ(got, sizes[k]);
    EXPECT_TRUE(std::equal(out[k].begin(), out[k].end(), in[k].begin()));
    EXPECT_EQ(in[k][sizes[k]], 0xee) << "nothing past the message";
  }
  const size_t grouped[3] = {100, 200000, 0};
  expectGroupedReceive(p, send, recv, grouped);
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

TEST(SocketNet, MovesMessagesOverOneStream) {
  expectMessages("1");
}
TEST(SocketNet, MovesMessagesStripedOverThreeStreams) {
  expectMessages("3");
}

// One message sent against one receive: the receive's status.
chorus::Status sendAgainst(size_t bytes, int sendTag, size_t room, int recvTag) {
  auto net = makeNet();
  if (net == nullptr) return chorus::internalError("no socket network");
  NetPlugin& p = *net;
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  std::vector<unsigned char> out(bytes, 7), in(room, 0);
  void *mr = nullptr, *sreq = nullptr, *rreq = nullptr;
  EXPECT_TRUE(p.irecv(recv, in.data(), room, recvTag, mr, &rreq).isOk());
  EXPECT_TRUE(p.isend(send, out.data(), bytes, sendTag, mr, &sreq).isOk());
  size_t got = 0;
  chorus::Status s = drive(p, sreq, rreq, nullptr, &got);
  for (unsigned char b : in) EXPECT_EQ(b, s.isOk() ? 7 : 0) << "a refused message is not written";
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
  return s;
}

TEST(SocketNet, RefusesAMessageOfAnotherTagOrTooLarge) {
  EXPECT_TRUE(sendAgainst(64, 3, 64, 3).isOk());
  const chorus::Status wrongTag = sendAgainst(64, 4, 64, 3);
  EXPECT_NE(wrongTag.message().find("a message with tag 4 where the receive posted first takes "
                                    "tag 3"),
            std::string::npos)
      << wrongTag.message();
  const chorus::Status tooLarge = sendAgainst(100, 3, 64, 3);
  EXPECT_NE(tooLarge.message().find("a message of 100 bytes for a receive of 64"),
            std::string::npos)
      << tooLarge.message();
}

// A connection made with a handle whose nonce is not the listener's is dropped; the listener
// still accepts the right one, which carries the data.
TEST(SocketNet, DropsConnectionsWithoutTheListenersNonce) {
  ScopedEnv streams("CHORUS_SOCKET_NSTREAMS", "2");
  auto net = makeNet();
  ASSERT_NE(net, nullptr);
  NetPlugin& p = *net;
  char handle[NCCL_NET_HANDLE_MAXSIZE], stranger[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  ASSERT_TRUE(p.listen(0, handle, &listen).isOk());
  memcpy(stranger, handle, sizeof handle);
  stranger[8] ^= 0x5a;  // the nonce's first byte (after the magic and the stream count)
  void *wrong = nullptr, *send = nullptr, *recv = nullptr;
  for (int i = 0; i < 1000000 && wrong == nullptr; ++i) {
    ASSERT_TRUE(p.connect(0, stranger, &wrong).isOk());
    ASSERT_TRUE(p.accept(listen, &recv).isOk());
    ASSERT_EQ(recv, nullptr) << "a stranger's streams make no connection";
  }
  ASSERT_NE(wrong, nullptr);
  for (int i = 0; i < 1000000 && (send == nullptr || recv == nullptr); ++i) {
    if (send == nullptr) {
      ASSERT_TRUE(p.connect(0, handle, &send).isOk());
    }
    if (recv == nullptr) {
      ASSERT_TRUE(p.accept(listen, &recv).isOk());
    }
  }
  ASSERT_NE(send, nullptr);
  ASSERT_NE(recv, nullptr);
  std::vector<unsigned char> out(200000), in(200000, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = pattern(i, 1);
  void *mr = nullptr, *sreq = nullptr, *rreq = nullptr, *lost = nullptr;
  ASSERT_TRUE(p.irecv(recv, in.data(), in.size(), 1, mr, &rreq).isOk());
  ASSERT_TRUE(p.isend(wrong, out.data(), 100, 1, mr, &lost).isOk());
  bool lostDone = false;
  for (int i = 0; i < 100 && p.test(lost, &lostDone, nullptr).isOk() && !lostDone; ++i) {
  }
  ASSERT_TRUE(p.isend(send, out.data(), out.size(), 1, mr, &sreq).isOk());
  size_t got = 0;
  chorus::Status s = drive(p, sreq, rreq, nullptr, &got);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(got, out.size()) << "the dropped connection's 100 bytes did not arrive instead";
  EXPECT_EQ(in, out);
  EXPECT_TRUE(p.closeSend(wrong).isOk());
  EXPECT_TRUE(p.closeSend(send).isOk());
  EXPECT_TRUE(p.closeRecv(recv).isOk());
  EXPECT_TRUE(p.closeListen(listen).isOk());
}

// A receive waits on stream 0 for a message's header, a send with bytes left on its socket
// for room; a comm with nothing to wait for lists nothing. A peer that closes in the middle of
// a message fails the receive, naming it.
TEST(SocketNet, ProxySleepsOnTheDescriptorsAndAClosedPeerFailsTheReceive) {
  auto net = makeNet();
  ASSERT_NE(net, nullptr);
  NetPlugin& p = *net;
  std::vector<pollfd> fds;
  EXPECT_TRUE(p.pollFds(nullptr, &fds)) << "the socket network progresses on descriptors";
  EXPECT_TRUE(fds.empty());
  void *send = nullptr, *recv = nullptr;
  connectPair(p, 0, &send, &recv);
  EXPECT_TRUE(p.pollFds(recv, &fds));
  EXPECT_TRUE(p.pollFds(send, &fds));
  EXPECT_TRUE(fds.empty()) << "nothing posted, nothing to wait for";
  std::vector<unsigned char> in(size_t(64) << 20);
  void *mr = nullptr, *rreq = nullptr;
  ASSERT_TRUE(p.irecv(recv, in.data(), in.size(), 0, mr, &rreq).isOk());
  ASSERT_TRUE(p.pollFds(recv, &fds));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds[0].events, POLLIN);
  // A send larger than the socket buffers leaves bytes to write.
  std::vector<unsigned char> big(size_t(64) << 20, 1);
  void* sreq = nullptr;
  ASSERT_TRUE(p.isend(send, big.data(), big.size(), 0, mr, &sreq).isOk());
  bool done = false;
  ASSERT_TRUE(p.test(sreq, &done, nullptr).isOk());
  ASSERT_FALSE(done);
  fds.clear();
  ASSERT_TRUE(p.pollFds(send, &fds));
  ASSERT_EQ(fds.size(), 1u);
  EXPECT_EQ(fds[0].events, POLLOUT);
  EXPECT_TRUE(p.closeSend(send).isOk());
  chorus::Status s = chorus::Status::ok();
  bool rdone = false;
  for (long i = 0; i < 20000000 && s.isOk() && !rdone; ++i) s = p.test(rreq, &rdone, nullptr);
  EXPECT_FALSE(rdone);
  EXPECT_NE(s.message().find("the peer closed the connection"), std::string::npos) << s.message();
  EXPECT_TRUE(p.closeRecv(recv).isOk());
}

// connectBoth and acceptBoth: one connection (of two streams) carries messages both ways at
// once, each side's send comm writing what the other's receive comm reads, on the same
// descriptors. An end that accepts with plain accept a connection made with connectBoth fails,
// saying so.
TEST(SocketNet, OneConnectionCarriesBothDirections) {
  ScopedEnv streams("CHORUS_SOCKET_NSTREAMS", "2");
  auto net = makeNet();
  ASSERT_NE(net, nullptr);
  NetPlugin& p = *net;
  EXPECT_TRUE(p.bothWays());
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = nullptr;
  ASSERT_TRUE(p.listen(0, handle, &listen).isOk());
  void *aSend = nullptr, *aRecv = nullptr, *bSend = nullptr, *bRecv = nullptr;
  for (int i = 0; i < 1000000 && (aSend == nullptr || bRecv == nullptr); ++i) {
    if (aSend == nullptr) {
      ASSERT_TRUE(p.connectBoth(0, handle, &aSend, &aRecv).isOk());
      ASSERT_EQ(aSend == nullptr, aRecv == nullptr) << "both comms come together";
    }
    if (bRecv == nullptr) {
      ASSERT_TRUE(p.acceptBoth(listen, &bRecv, &bSend).isOk());
      ASSERT_EQ(bRecv == nullptr, bSend == nullptr);
    }
  }
  ASSERT_NE(aSend, nullptr);
  ASSERT_NE(bRecv, nullptr);
  std::vector<pollfd> aFds, bFds;
  std::vector<unsigned char> toB(300000), toA(5000), atB(300000, 0), atA(5000, 0);
  for (size_t i = 0; i < toB.size(); ++i) toB[i] = pattern(i, 2);
  for (size_t i = 0; i < toA.size(); ++i) toA[i] = pattern(i, 3);
  void *mr = nullptr, *s1 = nullptr, *r1 = nullptr, *s2 = nullptr, *r2 = nullptr;
  ASSERT_TRUE(p.irecv(bRecv, atB.data(), atB.size(), 2, mr, &r1).isOk());
  ASSERT_TRUE(p.irecv(aRecv, atA.data(), atA.size(), 3, mr, &r2).isOk());
  ASSERT_TRUE(p.pollFds(aRecv, &aFds));
  ASSERT_TRUE(p.pollFds(bRecv, &bFds));
  ASSERT_EQ(aFds.size(), 1u);
  ASSERT_EQ(bFds.size(), 1u);
  ASSERT_TRUE(p.isend(aSend, toB.data(), toB.size(), 2, mr, &s1).isOk());
  ASSERT_TRUE(p.isend(bSend, toA.data(), toA.size(), 3, mr, &s2).isOk());
  // A queued send waits on its first stream, the receive's own descriptor on that side.
  std::vector<pollfd> sendFds;
  ASSERT_TRUE(p.pollFds(bSend, &sendFds));
  ASSERT_EQ(sendFds.size(), 1u) << "5000 bytes travel on the first stream alone";
  EXPECT_EQ(sendFds[0].fd, bFds[0].fd);
  EXPECT_EQ(sendFds[0].events, POLLOUT);
  size_t gotB = 0, gotA = 0;
  chorus::Status s = drive(p, s1, r1, nullptr, &gotB);
  ASSERT_TRUE(s.isOk()) << s.message();
  s = drive(p, s2, r2, nullptr, &gotA);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(gotB, toB.size());
  EXPECT_EQ(gotA, toA.size());
  EXPECT_EQ(atB, toB);
  EXPECT_EQ(atA, toA);
  EXPECT_TRUE(p.closeSend(aSend).isOk());
  EXPECT_TRUE(p.closeRecv(aRecv).isOk());
  EXPECT_TRUE(p.closeSend(bSend).isOk());
  EXPECT_TRUE(p.closeRecv(bRecv).isOk());

  // connectBoth against a plain accept.
  void *send = nullptr, *recv = nullptr, *back = nullptr;
  chorus::Status refused = chorus::Status::ok();
  for (int i = 0; i < 1000000 && refused.isOk() && recv == nullptr; ++i) {
    if (send == nullptr) {
      ASSERT_TRUE(p.connectBoth(0, handle, &send, &back).isOk());
    }
    refused = p.accept(listen, &recv);
  }
  EXPECT_EQ(recv, nullptr);
  EXPECT_NE(refused.message().find("carries both directions, this end expected one"),
            std::string::npos)
      << refused.message();
  if (send != nullptr) {
    EXPECT_TRUE(p.closeSend(send).isOk());
    EXPECT_TRUE(p.closeRecv(back).isOk());
  }
  EXPECT_TRUE(p.closeListen(listen).isOk());
}

}  // namespace
