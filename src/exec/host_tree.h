// Tree collectives on host buffers: the connectors of this rank's links in the double binary
// tree and the executor entry point that runs tree all-reduce over them.
#pragma once

#include "algorithms/double_binary_tree.h"
#include "common/status.h"
#include "exec/host_executor.h"
#include "transport/connector.h"

namespace chorus {

// Both directions between this rank and one neighbour in one tree.
struct HostTreeLink {
  int peer = -1;
  SendConnector send;  // to the parent: partial results; to a child: final results
  RecvConnector recv;  // from the parent: final results; from a child: partial results
  const char* sendTransport = "";
  const char* recvTransport = "";
};

// This rank's place in one tree with the links to its parent and children.
struct HostTree {
  TreeNode node;
  HostTreeLink parent;       // unused at the root
  HostTreeLink children[2];  // the first node.nchildren are used
};

struct TreeLinks {
  HostTree trees[kNumTrees];
  int fifoSlots = 0;  // slots of every tree FIFO
};

// All-reduce over both trees; every link of links must be connected (nranks > 1).
Status hostAllReduceTree(const ExecContext& ctx, const CollArgs& args, TreeLinks& links);

}  // namespace chorus
