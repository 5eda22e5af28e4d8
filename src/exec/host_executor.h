// The CPU executor: runs algorithm plans on host buffers with the reduction kernels, moving
// data through the connectors of each channel.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/status.h"
#include "common/wait.h"
#include "exec/reduce.h"
#include "exec/slot_stream.h"
#include "exec/wait_note.h"
#include "exec/workers.h"
#include "transport/connector.h"
#include "transport/transport.h"

namespace chorus {

// One ring channel as seen by this rank.
struct HostChannel {
  SendConnector send;  // to ring next
  RecvConnector recv;  // from ring prev
  int nextRank = -1;
  int prevRank = -1;
  const char* sendTransport = "";
  const char* recvTransport = "";
  // How this rank writes its send slots (see slot_stream.h), and a slot's worth of memory for
  // steps that compute before streaming into one (made when first needed). The one thread
  // that drives the channel uses both.
  SlotStreamPolicy sendStream;
  std::vector<char> scratch;
};

struct ExecContext {
  int rank = 0;
  int nranks = 1;
  int ringIndex = 0;                             // position of this rank in the ring
  const int* ringRanks = nullptr;                // rank at each ring position
  std::vector<HostChannel>* channels = nullptr;  // ring channels, all with the same ring
  ChannelWorkers* workers = nullptr;             // drive channels 1.. of a call
  const AbortFlag* abort = nullptr;
  double timeoutSeconds = 0;
  int64_t spinCount = 2000;
  int64_t yieldMicros = 0;  // CHORUS_SPIN_YIELD_US
  bool checkCalls = true;   // CHORUS_CHECK_CALLS: compare received slots' call tags (call_tag.h)
  // Told of a mismatch found by one channel, so that every wait of the communicator stops.
  ErrorSink* errors = nullptr;
  // One per ring channel (kMaxChannels); algorithms that run on one thread use the first.
  WaitNote* notes = nullptr;
  uint64_t launch = 0;      // which launch of the communicator runs (for the notes)
  int64_t streamBytes = 0;  // CHORUS_STREAM_BYTES: outputs this large bypass the caches
  SlotStreamMode slotStream = SlotStreamMode::kAdaptive;  // CHORUS_SLOT_STREAM
  // Window all-reduce (host_window.h): one-shot while nranks x bytes is at most this; in place
  // (on any rank) only from this size (CHORUS_WINDOW_INPLACE_BYTES).
  size_t windowOneShotBytes = 0;
  size_t windowInPlaceBytes = 0;

  // How every wait of a collective polls: spin, yield the core, then sleep; bounded by the
  // timeout and the abort flag.
  Waiter waiter() const {
    Waiter w(timeoutSeconds, abort, spinCount);
    w.setYieldMicros(yieldMicros);
    return w;
  }
};

// One collective call on host buffers. count is per rank: the elements each rank contributes
// to all-gather and receives from reduce-scatter; all-gather's output and reduce-scatter's
// input hold nranks blocks of count elements, block r belonging to rank r.
struct CollArgs {
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;
  DataType type = DataType::kFloat32;
  RedOp op;
  const void* scalarDevice = nullptr;  // device communicators: PreMulSum scalar in GPU memory
  int root = 0;                        // broadcast and reduce
  int nchannels = 1;  // ring channels to split the call across (at most channels->size())
  CallTag tag;        // this call, as its slots say (call_tag.h)
};

// One point-to-point transfer of a group: a send to or a receive from peer. All transfers of a
// group progress together; transfers between one pair of ranks are matched in call order.
struct P2pOp {
  bool isSend = false;
  int peer = -1;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t bytes = 0;
  void* stream = nullptr;  // device communicators: the caller's cudaStream_t
  CallTag tag;             // sendTag of this transfer, numbered per pair and direction
};

// Connectors to one peer for point-to-point transfers, built when first needed.
struct P2pConnection {
  SendConnector send;
  RecvConnector recv;
  const char* sendTransport = "";
  const char* recvTransport = "";
};

// Runs every op of a group; conns[peer] must be connected in the directions the ops use.
Status hostP2p(const ExecContext& ctx, const std::vector<P2pOp>& ops,
               std::vector<P2pConnection>& conns);

// Why a wait on a connector to or from peer ended without data (the Code a connector wait gave
// up with): the sending peer closed its connection, the timeout passed, or the communicator was
// aborted. The message names the call (tag), the algorithm and step (note) and the peer.
// peerError: why the peer closed, when it said (RecvConnector::peerError).
Status connectorFailure(const ExecContext& ctx, const CallTag& tag, const WaitPlace& at, Code code,
                        int peer, const char* transport, bool receiving, bool peerClosed,
                        const char* peerError = "");

// "rank 3 waits for rank 1 at ring step 2 of ncclAllReduce #4711 (1024 x float32, sum)": the
// start of a message about a wait that did not end.
std::string describeWait(const ExecContext& ctx, const CallTag& tag, const WaitPlace& at, int peer);

// The note of channel c of ctx (or a spare one).
inline WaitNote& noteOf(const ExecContext& ctx, int c) {
  return ctx.notes != nullptr ? ctx.notes[c] : spareWaitNote();
}

// The one-rank case of every collective: out = finalize(op(in)), or a copy.
void hostLocal(Collective coll, const CollArgs& args);

// Runs channel `channel` (< args.nchannels) of a ring collective: that channel's slice of the
// buffers over (*ctx.channels)[channel]. nranks > 1.
Status hostRingChannel(const ExecContext& ctx, Collective coll, const CollArgs& args, int channel);

}  // namespace chorus
