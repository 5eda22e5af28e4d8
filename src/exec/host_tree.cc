#include "exec/host_tree.h"

#include <cstring>

#include "algorithms/tree_allreduce.h"
#include "exec/call_tag.h"

namespace chorus {

namespace {

// Host primitives for the two trees (see tree_allreduce.h): each step waits on the connectors
// of the links it uses (bounded by the timeout and the abort flag), then combines children's
// partials with one reduce-copy pass per child.
class HostTreePrims {
 public:
  HostTreePrims(const ExecContext& ctx, TreeLinks& links, const char* input, char* output,
                DataType type, const RedOp& op, const CallTag& tag, WaitNote& note, WaitPlace at)
      : ctx_(ctx),
        links_(links),
        input_(input),
        output_(output),
        eltSize_(dataTypeSize(type)),
        type_(type),
        op_(op),
        combineOp_(op),
        tag_(tag),
        note_(note),
        at_(at) {
    // A partial already holds its scaled inputs: adding a second child must not scale again.
    if (combineOp_.kind == RedKind::kPreMulSum) combineOp_.kind = RedKind::kSum;
  }

  bool recvReduceSend(int tree, size_t in, size_t n) {
    HostTree& t = links_.trees[tree];
    const int nc = t.node.nchildren;
    size_t bytes = n * eltSize_;
    const void* partial[2] = {nullptr, nullptr};
    for (int c = 0; c < nc; ++c) {
      partial[c] = waitRecv(t.children[c], tree, bytes, "a partial result from child");
      if (partial[c] == nullptr) return false;
    }
    void* up = acquireSend(t.parent, tree, "a partial result to parent");
    if (up == nullptr) return false;
    if (n > 0) {
      combine(partial[0], input_ + in * eltSize_, up, nullptr, n, op_, false);
      if (nc == 2) combine(partial[1], up, up, nullptr, n, combineOp_, false);
    }
    t.parent.send.post(bytes, tag_);
    for (int c = 0; c < nc; ++c) t.children[c].recv.release();
    return true;
  }

  bool recvReduceCopySend(int tree, size_t in, size_t out, size_t n) {
    HostTree& t = links_.trees[tree];
    const int nc = t.node.nchildren;
    size_t bytes = n * eltSize_;
    const void* partial[2] = {nullptr, nullptr};
    void* down[2] = {nullptr, nullptr};
    for (int c = 0; c < nc; ++c) {
      partial[c] = waitRecv(t.children[c], tree, bytes, "a partial result from child");
      if (partial[c] == nullptr) return false;
    }
    for (int c = 0; c < nc; ++c) {
      down[c] = acquireSend(t.children[c], tree, "the result to child");
      if (down[c] == nullptr) return false;
    }
    if (n > 0) {
      char* dst = output_ + out * eltSize_;
      const char* local = input_ + in * eltSize_;
      if (nc < 2) {
        combine(partial[0], local, dst, down[0], n, op_, true);
      } else {
        combine(partial[0], local, dst, nullptr, n, op_, false);
        combine(partial[1], dst, dst, down[0], n, combineOp_, true);
        memcpy(down[1], dst, bytes);
      }
    }
    for (int c = 0; c < nc; ++c) t.children[c].send.post(bytes, tag_);
    for (int c = 0; c < nc; ++c) t.children[c].recv.release();
    return true;
  }

  bool recvCopySend(int tree, size_t out, size_t n) {
    HostTree& t = links_.trees[tree];
    const int nc = t.node.nchildren;
    size_t bytes = n * eltSize_;
    const void* result = waitRecv(t.parent, tree, bytes, "the result from parent");
    if (result == nullptr) return false;
    void* down[2] = {nullptr, nullptr};
    for (int c = 0; c < nc; ++c) {
      down[c] = acquireSend(t.children[c], tree, "the result to child");
      if (down[c] == nullptr) return false;
    }
    if (n > 0) {
      char* dst = output_ + out * eltSize_;
      memcpy(dst, result, bytes);
      for (int c = 0; c < nc; ++c) memcpy(down[c], result, bytes);
    }
    for (int c = 0; c < nc; ++c) t.children[c].send.post(bytes, tag_);
    t.parent.recv.release();
    return true;
  }

  const Status& status() const { return status_; }

 private:
  // dst0 (and dst1) = peer (op) local, finalised when asked; a missing peer leaves the local
  // operand alone (scaled for PreMulSum).
  void combine(const void* peer, const void* local, void* dst0, void* dst1, size_t n,
               const RedOp& op, bool finalize) {
    ReduceCopyArgs a;
    a.peer = peer;
    a.local = local;
    a.dst0 = dst0;
    a.dst1 = dst1;
    a.count = n;
    a.type = type_;
    a.op = &op;
    a.finalize = finalize;
    reduceCopy(a);
  }

  const void* waitRecv(HostTreeLink& link, int tree, size_t bytes, const char* what) {
    Waiter w = ctx_.waiter();
    Code failure = Code::kSuccess;
    size_t got = 0;
    ++at_.step;
    if (!link.recv.ready()) note_.waiting(at_, link.peer, WaitFor::kData);
    const void* slot = link.recv.wait(w, &got, &failure);
    if (slot == nullptr) {
      fail(failure, link, tree, what, true);
      return nullptr;
    }
    status_ = checkCall(ctx_, tag_, link.recv.tag(), link.peer);
    if (!status_.isOk()) return nullptr;
    if (got != bytes) {
      status_ = internalError(
          "rank %d: ncclAllReduce (tree %d) expected %zu bytes from rank %d but got %zu", ctx_.rank,
          tree, bytes, link.peer, got);
      return nullptr;
    }
    at_.bytesDone += got;
    return slot;
  }

  void* acquireSend(HostTreeLink& link, int tree, const char* what) {
    Waiter w = ctx_.waiter();
    Code failure = Code::kSuccess;
    if (!link.send.hasRoom()) note_.waiting(at_, link.peer, WaitFor::kRoom);
    void* slot = link.send.acquire(w, &failure);
    if (slot == nullptr) fail(failure, link, tree, what, false);
    return slot;
  }

  void fail(Code code, const HostTreeLink& link, int tree, const char* what, bool receiving) {
    const char* transport = receiving ? link.recvTransport : link.sendTransport;
    if (code == Code::kRemoteError && (!receiving || !link.recv.peerClosed())) {
      // Which tree and what it waits for say more than the generic message.
      status_ = remoteError(
          "%s (tree %d, %s %s): timed out after %.0f s over %s; the peer is stuck, dead or made "
          "another call (raise CHORUS_TIMEOUT if it is slow; CHORUS_DUMP=<dir> makes every rank "
          "write its pending operations for tools/chorus-waitfor)",
          describeWait(ctx_, tag_, at_, link.peer).c_str(), tree,
          receiving ? "waiting for" : "waiting to send", what, ctx_.timeoutSeconds, transport);
      return;
    }
    status_ = connectorFailure(ctx_, tag_, at_, code, link.peer, transport, receiving,
                               receiving && link.recv.peerClosed(), link.recv.peerError());
  }

  const ExecContext& ctx_;
  TreeLinks& links_;
  const char* input_;
  char* output_;
  size_t eltSize_;
  DataType type_;
  const RedOp& op_;
  RedOp combineOp_;
  const CallTag& tag_;
  WaitNote& note_;
  WaitPlace at_;
  Status status_;
};

}  // namespace

Status hostAllReduceTree(const ExecContext& ctx, const CollArgs& args, TreeLinks& links) {
  if (args.count == 0) return Status::ok();
  if (ctx.nranks == 1) {
    hostLocal(Collective::kAllReduce, args);
    return Status::ok();
  }
  WaitPlace at;
  at.algo = "tree";
  at.launch = ctx.launch;
  at.bytesTotal = args.count * dataTypeSize(args.type);
  HostTreePrims prims(ctx, links, static_cast<const char*>(args.sendbuff),
                      static_cast<char*>(args.recvbuff), args.type, args.op, args.tag,
                      noteOf(ctx, 0), at);
  TreeAllReduceShape shape{};
  shape.count = args.count;
  size_t slotBytes = links.trees[0].node.parent >= 0 ? links.trees[0].parent.send.slotBytes()
                                                     : links.trees[0].children[0].send.slotBytes();
  shape.chunkElems = slotBytes / dataTypeSize(args.type);
  shape.fifoSlots = links.fifoSlots;
  for (int t = 0; t < kNumTrees; ++t) shape.depth[t] = links.trees[t].node.depth;
  if (!treeAllReduce(prims, shape)) return prims.status();
  return Status::ok();
}

}  // namespace chorus
