#include "exec/host_rd.h"

#include <cstring>

#include "algorithms/rd_allreduce.h"
#include "exec/call_tag.h"

namespace chorus {

namespace {

// Host primitives: whole messages through the partners' FIFOs, combined with one reduce-copy
// pass into the output.
class HostRdPrims {
 public:
  HostRdPrims(const ExecContext& ctx, const CollArgs& args, std::vector<P2pConnection>& conns,
              WaitNote& note, WaitPlace at)
      : ctx_(ctx),
        args_(args),
        conns_(conns),
        elt_(dataTypeSize(args.type)),
        combine_(args.op),
        note_(note),
        at_(at) {
    // The PreMulSum scalar applies to each rank's own input once, in init; partials only add.
    if (combine_.kind == RedKind::kPreMulSum) combine_.kind = RedKind::kSum;
  }

  bool init() {
    char* out = static_cast<char*>(args_.recvbuff);
    const void* in = args_.sendbuff;
    if (args_.op.kind == RedKind::kPreMulSum) {
      ReduceCopyArgs a;
      a.local = in;
      a.dst0 = out;
      a.count = args_.count;
      a.type = args_.type;
      a.op = &args_.op;
      reduceCopy(a);
    } else if (in != out) {
      memcpy(out, in, args_.count * elt_);
    }
    return true;
  }

  bool send(int peer, size_t off, size_t n) {
    Waiter w = ctx_.waiter();
    Code failure = Code::kSuccess;
    ++at_.step;
    if (!conns_[peer].send.hasRoom()) note_.waiting(at_, peer, WaitFor::kRoom);
    void* slot = conns_[peer].send.acquire(w, &failure);
    if (slot == nullptr) return fail(failure, peer, false);
    memcpy(slot, output(off), n * elt_);
    conns_[peer].send.post(n * elt_, args_.tag);
    return true;
  }

  bool recvReduce(int peer, size_t off, size_t n, bool mineFirst, bool last) {
    const void* slot = receive(peer, n);
    if (slot == nullptr) return false;
    ReduceCopyArgs a;
    a.peer = mineFirst ? output(off) : slot;
    a.local = mineFirst ? slot : output(off);
    a.dst0 = output(off);
    a.count = n;
    a.type = args_.type;
    a.op = &combine_;
    a.finalize = last;
    reduceCopy(a);
    conns_[peer].recv.release();
    return true;
  }

  bool recvCopy(int peer, size_t off, size_t n) {
    const void* slot = receive(peer, n);
    if (slot == nullptr) return false;
    memcpy(output(off), slot, n * elt_);
    conns_[peer].recv.release();
    return true;
  }

  const Status& status() const { return status_; }

 private:
  char* output(size_t off) const { return static_cast<char*>(args_.recvbuff) + off * elt_; }

  const void* receive(int peer, size_t n) {
    Waiter w = ctx_.waiter();
    Code failure = Code::kSuccess;
    size_t got = 0;
    if (!conns_[peer].recv.ready()) note_.waiting(at_, peer, WaitFor::kData);
    const void* slot = conns_[peer].recv.wait(w, &got, &failure);
    if (slot == nullptr) {
      fail(failure, peer, true);
      return nullptr;
    }
    status_ = checkCall(ctx_, args_.tag, conns_[peer].recv.tag(), peer);
    if (!status_.isOk()) return nullptr;
    if (got != n * elt_) {
      status_ = internalError(
          "rank %d: ncclAllReduce (recursive doubling) expected %zu bytes from rank %d but got "
          "%zu",
          ctx_.rank, n * elt_, peer, got);
      return nullptr;
    }
    at_.bytesDone += got;
    return slot;
  }

  bool fail(Code code, int peer, bool receiving) {
    const P2pConnection& c = conns_[peer];
    status_ = connectorFailure(ctx_, args_.tag, at_, code, peer,
                               receiving ? c.recvTransport : c.sendTransport, receiving,
                               receiving && c.recv.peerClosed(), c.recv.peerError());
    return false;
  }

  const ExecContext& ctx_;
  const CollArgs& args_;
  std::vector<P2pConnection>& conns_;
  size_t elt_;
  RedOp combine_;  // args.op with PreMulSum turned into Sum (inputs are scaled once, in init)
  WaitNote& note_;
  WaitPlace at_;
  Status status_;
};

}  // namespace

std::vector<int> rdPartners(int nranks, int rank) {
  std::vector<int> partners;
  for (int i = 0, p; (p = rdPartner(nranks, rank, i)) >= 0; ++i) partners.push_back(p);
  return partners;
}

Status hostAllReduceRd(const ExecContext& ctx, const CollArgs& args,
                       std::vector<P2pConnection>& conns) {
  if (args.count == 0) return Status::ok();
  if (ctx.nranks == 1) {
    hostLocal(Collective::kAllReduce, args);
    return Status::ok();
  }
  const std::vector<int> partners = rdPartners(ctx.nranks, ctx.rank);
  for (int peer : partners)
    if (static_cast<size_t>(peer) >= conns.size() || !conns[peer].send.valid() ||
        !conns[peer].recv.valid())
      return internalError("rank %d: recursive doubling without a connection to rank %d", ctx.rank,
                           peer);
  WaitPlace at;
  at.algo = "recursive-doubling";
  at.launch = ctx.launch;
  at.bytesTotal = args.count * dataTypeSize(args.type);
  HostRdPrims prims(ctx, args, conns, noteOf(ctx, 0), at);
  RdAllReduceShape shape{};
  shape.count = args.count;
  // Every connector has the same slots; a message fills one.
  shape.chunkElems = conns[partners[0]].send.slotBytes() / dataTypeSize(args.type);
  if (shape.chunkElems == 0) shape.chunkElems = 1;
  shape.nranks = ctx.nranks;
  shape.rank = ctx.rank;
  if (!rdAllReduce(prims, shape)) return prims.status();
  return Status::ok();
}

}  // namespace chorus
