// Point-to-point transfers of a group on host memory: every send and receive advances whenever
// its FIFO has room or data, so the order in which ranks posted them never matters (a ring of
// sends and receives in one group completes). Transfers between two ranks keep call order.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "exec/call_tag.h"
#include "exec/host_executor.h"

namespace chorus {

namespace {

struct Transfer {
  const P2pOp* op;
  size_t done = 0;
  bool finished() const { return done == op->bytes; }
};

// Sends and receives whose peer is this rank pair up in call order and are copied directly.
Status runSelfTransfers(const ExecContext& ctx, const std::vector<P2pOp>& ops) {
  std::vector<const P2pOp*> sends, recvs;
  for (const P2pOp& op : ops) {
    if (op.peer != ctx.rank) continue;
    (op.isSend ? sends : recvs).push_back(&op);
  }
  if (sends.size() != recvs.size())
    return invalidUsage("rank %d: a group holds %zu sends to itself but %zu receives from itself",
                        ctx.rank, sends.size(), recvs.size());
  for (size_t i = 0; i < sends.size(); ++i) {
    if (sends[i]->bytes != recvs[i]->bytes)
      return invalidArgument(
          "rank %d: send to itself of %zu bytes is matched with a receive of %zu bytes", ctx.rank,
          sends[i]->bytes, recvs[i]->bytes);
    if (sends[i]->bytes > 0 && sends[i]->sendbuff != recvs[i]->recvbuff)
      memmove(recvs[i]->recvbuff, sends[i]->sendbuff, sends[i]->bytes);
  }
  return Status::ok();
}

std::string describePending(const std::vector<Transfer>& transfers) {
  std::string text;
  for (const Transfer& t : transfers) {
    if (t.finished()) continue;
    if (!text.empty()) text += ", ";
    text += formatString("%s #%llu %s rank %d (%zu of %zu bytes moved)",
                         t.op->isSend ? "ncclSend" : "ncclRecv",
                         static_cast<unsigned long long>(t.op->tag.seq),
                         t.op->isSend ? "to" : "from", t.op->peer, t.done, t.op->bytes);
  }
  return text;
}

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  auto pa = reinterpret_cast<uintptr_t>(a);
  auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bBytes && pb < pa + aBytes;
}

}  // namespace

Status hostP2p(const ExecContext& ctx, const std::vector<P2pOp>& ops,
               std::vector<P2pConnection>& conns) {
  // A send whose data a receive of the same group overwrites (e.g. one buffer for both) is
  // sent from a copy taken first, so no data is lost whatever order the transfers run in.
  std::vector<P2pOp> staged = ops;
  std::vector<std::vector<char>> copies;
  for (P2pOp& s : staged) {
    if (!s.isSend || s.bytes == 0 || s.peer == ctx.rank) continue;
    for (const P2pOp& r : ops) {
      if (r.isSend || r.bytes == 0 || !overlaps(s.sendbuff, s.bytes, r.recvbuff, r.bytes)) continue;
      const char* src = static_cast<const char*>(s.sendbuff);
      copies.emplace_back(src, src + s.bytes);
      s.sendbuff = copies.back().data();
      break;
    }
  }
  CHORUS_TRY(runSelfTransfers(ctx, staged));
  std::vector<Transfer> transfers;
  for (const P2pOp& op : staged)
    if (op.peer != ctx.rank && op.bytes > 0) transfers.push_back(Transfer{&op});
  // Only the oldest unfinished transfer per (peer, direction) may move: that keeps call order.
  std::vector<int> busySend(ctx.nranks), busyRecv(ctx.nranks);
  size_t remaining = transfers.size();
  WaitPlace at;
  at.algo = "send/recv";
  at.launch = ctx.launch;
  for (const Transfer& t : transfers) at.bytesTotal += t.op->bytes;
  Waiter waiter = ctx.waiter();
  // The loop polls every network connector it uses, so it drives their proxies (it never sleeps
  // in the kernel: pauseAny naps).
  struct Drives {
    std::vector<ProxyLink*> proxies;
    ~Drives() {
      for (ProxyLink* p : proxies) p->stopDriving(false);
    }
  } drives;
  for (const Transfer& t : transfers) {
    const P2pConnection& conn = conns[t.op->peer];
    ProxyLink* proxy = t.op->isSend ? conn.send.proxy() : conn.recv.proxy();
    if (proxy == nullptr ||
        std::find(drives.proxies.begin(), drives.proxies.end(), proxy) != drives.proxies.end())
      continue;
    proxy->startDriving();
    drives.proxies.push_back(proxy);
  }
  while (remaining > 0) {
    bool moved = false;
    std::fill(busySend.begin(), busySend.end(), 0);
    std::fill(busyRecv.begin(), busyRecv.end(), 0);
    for (Transfer& t : transfers) {
      if (t.finished()) continue;
      const P2pOp& op = *t.op;
      P2pConnection& conn = conns[op.peer];
      std::vector<int>& busy = op.isSend ? busySend : busyRecv;
      if (busy[op.peer]++ != 0) continue;
      if (op.isSend) {
        void* slot = conn.send.tryAcquire();
        if (slot == nullptr) continue;
        size_t n = std::min(conn.send.slotBytes(), op.bytes - t.done);
        memcpy(slot, static_cast<const char*>(op.sendbuff) + t.done, n);
        conn.send.post(n, op.tag);
        t.done += n;
      } else {
        size_t n = 0;
        const void* slot = conn.recv.tryWait(&n);
        // A peer that closed may have delivered its last data just before: look once more.
        if (slot == nullptr && conn.recv.peerClosed()) slot = conn.recv.tryWait(&n);
        if (slot == nullptr) {
          if (conn.recv.peerClosed())
            return remoteError(
                "rank %d: ncclRecv #%llu from rank %d: the peer closed its connection before "
                "sending the data%s%s%s",
                ctx.rank, static_cast<unsigned long long>(op.tag.seq), op.peer,
                conn.recv.peerError()[0] != '\0' ? " (its communicator failed: " : "",
                conn.recv.peerError(), conn.recv.peerError()[0] != '\0' ? ")" : "");
          continue;
        }
        CHORUS_TRY(checkCall(ctx, op.tag, conn.recv.tag(), op.peer));
        if (n > op.bytes - t.done)
          return invalidArgument(
              "rank %d: ncclRecv of %zu bytes from rank %d received more data than posted: the "
              "matching ncclSend has a larger count",
              ctx.rank, op.bytes, op.peer);
        memcpy(static_cast<char*>(op.recvbuff) + t.done, slot, n);
        conn.recv.release();
        t.done += n;
        at.bytesDone += n;
      }
      moved = true;
      if (t.finished()) --remaining;
    }
    if (moved) {
      waiter = ctx.waiter();
      continue;
    }
    for (const Transfer& t : transfers)
      if (!t.finished()) {
        noteOf(ctx, 0).waiting(at, t.op->peer, t.op->isSend ? WaitFor::kRoom : WaitFor::kData);
        break;
      }
    Code c = waiter.pauseAny();
    if (c == Code::kRemoteError)
      return remoteError(
          "rank %d: point-to-point transfers made no progress for %.0f s: %s still pending; each "
          "needs a matching call on the peer (same count and type, inside a group when several "
          "depend on each other)",
          ctx.rank, ctx.timeoutSeconds, describePending(transfers).c_str());
    if (c != Code::kInProgress)
      return invalidUsage(
          "rank %d: point-to-point transfers interrupted: the communicator was "
          "aborted",
          ctx.rank);
  }
  return Status::ok();
}

}  // namespace chorus
