// libibverbs, loaded at run time: the functions the IB transport calls, taken with dlopen from
// the library CHORUS_IB_VERBS_LIBRARY names (libibverbs.so.1 by default), so that Chorus starts
// on machines without rdma-core and needs only its headers to build. The data-path calls
// (post_send, post_recv, poll_cq) go through the context's ops table as the inline functions
// of <infiniband/verbs.h> do.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace chorus {

struct VerbsApi {
  std::string library;  // the file loaded
  ibv_device** (*getDeviceList)(int* num) = nullptr;
  void (*freeDeviceList)(ibv_device** list) = nullptr;
  const char* (*getDeviceName)(ibv_device* device) = nullptr;
  ibv_context* (*openDevice)(ibv_device* device) = nullptr;
  int (*closeDevice)(ibv_context* context) = nullptr;
  int (*queryDevice)(ibv_context* context, ibv_device_attr* attr) = nullptr;
  // Fills the fields of ibv_port_attr that every rdma-core version has (state, MTU, LID, link
  // layer, width and speed, GID table length).
  int (*queryPort)(ibv_context* context, uint8_t port, ibv_port_attr* attr) = nullptr;
  int (*queryGid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = nullptr;
  // Optional (rdma-core 32 and newer): a GID with its type.
  int (*queryGidEx)(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                    uint32_t flags, size_t entrySize) = nullptr;
  ibv_pd* (*allocPd)(ibv_context* context) = nullptr;
  int (*deallocPd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  // Optional (rdma-core 34 and newer): memory another device exports as a dma-buf.
  ibv_mr* (*regDmabufMr)(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                         int access) = nullptr;
  int (*deregMr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*createCq)(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int vector) = nullptr;
  int (*destroyCq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
  int (*destroyQp)(ibv_qp* qp) = nullptr;
  const char* (*wcStatusStr)(ibv_wc_status status) = nullptr;

  static int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    return qp->context->ops.post_send(qp, wr, bad);
  }
  static int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    return qp->context->ops.post_recv(qp, wr, bad);
  }
  static int pollCq(ibv_cq* cq, int n, ibv_wc* wc) { return cq->context->ops.poll_cq(cq, n, wc); }
};

// Loads library (dlopen; it stays loaded) and takes its functions; an error says what is
// missing.
Result<std::unique_ptr<const VerbsApi>> loadVerbs(const std::string& library);

// The verbs of this process: loadVerbs of IB_VERBS_LIBRARY, once.
Result<const VerbsApi*> processVerbs();

}  // namespace chorus
