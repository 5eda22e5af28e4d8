// The CPU executor: runs algorithm plans on host buffers with the reduction kernels, moving
// data through the connectors of each channel.
#pragma once

#include <cstddef>
#include <vector>

#include "common/status.h"
#include "common/wait.h"
#include "exec/reduce.h"
#include "transport/connector.h"

namespace chorus {

// One ring channel as seen by this rank.
struct HostChannel {
  SendConnector send;  // to ring next
  RecvConnector recv;  // from ring prev
  int nextRank = -1;
  int prevRank = -1;
  const char* sendTransport = "";
  const char* recvTransport = "";
};

struct ExecContext {
  int rank = 0;
  int nranks = 1;
  int ringIndex = 0;               // position of this rank in the ring
  const int* ringRanks = nullptr;  // rank at each ring position
  std::vector<HostChannel>* channels = nullptr;
  const AbortFlag* abort = nullptr;
  double timeoutSeconds = 0;
  int64_t spinCount = 2000;
};

struct AllReduceArgs {
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  DataType type;
  RedOp op;
};

struct AllGatherArgs {
  const void* sendbuff;
  void* recvbuff;  // nranks * count elements, block r from rank r
  size_t count;    // elements per rank
  DataType type;
};

Status hostAllReduce(const ExecContext& ctx, const AllReduceArgs& args);
Status hostAllGather(const ExecContext& ctx, const AllGatherArgs& args);

}  // namespace chorus
