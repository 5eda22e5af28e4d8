// A stand-in for libibverbs, for testing the IB network where no RDMA device exists: it exports
// the functions Chorus loads and fills each context's ops with post_send, post_recv and
// poll_cq, and simulates, inside one process, HCAs whose reliable-connected queue pairs carry
// RDMA writes (with immediate) and RDMA reads between registered memory regions. It checks what
// hardware checks: queue pair transitions and the attributes each needs, addressing (LID on
// InfiniBand, a GID with a GRH on RoCE), memory keys, bounds and access rights (of the queue
// pair too, for reads), receive queue and send queue limits; a violation is an error
// completion, as on hardware. Devices: FAKE_IBV_DEVICES, a comma-separated list of name:ib or
// name:roce, with :down for a port that is not active (default "mlx5_0:ib,mlx5_1:roce").
// FAKE_IBV_NO_DMABUF=1: dma-bufs are not supported.
#include <errno.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/ib/fake_verbs.h"

#undef ibv_query_port
#undef ibv_reg_mr

namespace {

struct FDev {
  ibv_device dev;
  std::string name;
  bool roce = false;
  bool down = false;
  uint16_t lid = 0;
  std::vector<std::pair<ibv_gid, int>> gids;  // index order; type
};
struct FCtx {
  ibv_context ctx;
  FDev* dev;
};
struct FPd {
  ibv_pd pd;
  FCtx* ctx;
};
struct FMr {
  ibv_mr mr;
  FPd* pd;
  int access;
};
struct FCq {
  ibv_cq cq;
  std::deque<ibv_wc> wcs;
  int cqe;
};
struct FQp {
  ibv_qp qp;
  FPd* pd;
  FCq* scq;
  FCq* rcq;
  ibv_qp_cap cap;
  int state = IBV_QPS_RESET;
  uint8_t port = 0;
  int access = 0;  // what remote peers may do through it (qp_access_flags)
  ibv_ah_attr ah;
  uint32_t destQpn = 0;
  int mtu = 0;
  std::deque<uint64_t> rq;
  uint32_t sqOutstanding = 0;
};

std::mutex mu;
std::vector<std::unique_ptr<FDev>> allDevices;  // every device made, freed at exit
std::vector<FDev*> devices;                     // those FAKE_IBV_DEVICES describes now
std::map<uint32_t, FMr*> mrs;                   // by key (lkey == rkey)
std::map<uint32_t, FQp*> qps;                   // by number
uint32_t nextKey = 0x100;
uint32_t nextQpn = 0x40;
FakeVerbsStats stats;
int failWrites = 0;

// The devices FAKE_IBV_DEVICES describes now (remade when it changed: earlier ones are kept
// alive for contexts still open on them).
void makeDevices() {
  static std::string made;
  const char* spec = getenv("FAKE_IBV_DEVICES");
  std::string list = spec != nullptr ? spec : "mlx5_0:ib,mlx5_1:roce";
  if (!devices.empty() && list == made) return;
  made = list;
  devices.clear();
  size_t pos = 0;
  int index = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string item = list.substr(pos, comma - pos);
    pos = comma + 1;
    allDevices.push_back(std::make_unique<FDev>());
    FDev* d = allDevices.back().get();
    memset(&d->dev, 0, sizeof d->dev);
    d->name = item.substr(0, item.find(':'));
    d->roce = item.find(":roce") != std::string::npos;
    d->down = item.find(":down") != std::string::npos;
    snprintf(d->dev.name, sizeof d->dev.name, "%s", d->name.c_str());
    ++index;
    ibv_gid g;
    memset(&g, 0, sizeof g);
    g.raw[0] = 0xfe;
    g.raw[1] = 0x80;
    g.raw[8] = 0x02;
    g.raw[15] = static_cast<uint8_t>(index);
    if (!d->roce) {
      d->lid = static_cast<uint16_t>(0x10 + index);
      d->gids.push_back({g, IBV_GID_TYPE_IB});
    } else {
      d->gids.push_back({g, IBV_GID_TYPE_ROCE_V1});
      d->gids.push_back({g, IBV_GID_TYPE_ROCE_V2});
      ibv_gid v4;
      memset(&v4, 0, sizeof v4);
      v4.raw[10] = v4.raw[11] = 0xff;
      v4.raw[12] = 10;
      v4.raw[15] = static_cast<uint8_t>(index);
      d->gids.push_back({v4, IBV_GID_TYPE_ROCE_V1});
      d->gids.push_back({v4, IBV_GID_TYPE_ROCE_V2});
    }
    devices.push_back(d);
  }
}

FDev* devOf(const FQp* q) {
  return q->pd->ctx->dev;
}

void push(FCq* cq, const ibv_wc& wc) {
  if (static_cast<int>(cq->wcs.size()) >= cq->cqe) ++stats.cqOverruns;
  cq->wcs.push_back(wc);
}

ibv_wc completion(uint64_t wrId, ibv_wc_status status, ibv_wc_opcode op, uint32_t qpn) {
  ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wrId;
  wc.status = status;
  wc.opcode = op;
  wc.qp_num = qpn;
  return wc;
}

// The region of key that holds [addr, addr+len) in pd with the access asked, or null.
FMr* region(uint32_t key, FPd* pd, uint64_t addr, uint64_t len, int access) {
  auto it = mrs.find(key);
  if (it == mrs.end() || it->second->pd != pd) return nullptr;
  FMr* m = it->second;
  const uint64_t b = reinterpret_cast<uintptr_t>(m->mr.addr);
  if (addr < b || addr + len > b + m->mr.length) return nullptr;
  if ((m->access & access) != access) return nullptr;
  return m;
}

// Whether q's address vector names r: its LID on InfiniBand, one of its GIDs (with a GRH) on
// RoCE; and r is connected back to q.
bool reaches(const FQp* q, const FQp* r) {
  const FDev* d = devOf(r);
  if (r->destQpn != q->qp.qp_num) return false;
  if (!d->roce) return !q->ah.is_global && q->ah.dlid == d->lid;
  if (!q->ah.is_global) return false;
  for (const auto& g : d->gids)
    if (memcmp(g.first.raw, q->ah.grh.dgid.raw, 16) == 0) return true;
  return false;
}

// Copies as a NIC writes a small entry: the last 8 bytes last.
void deliver(void* dst, const void* src, size_t len) {
  if (len >= 8 && (reinterpret_cast<uintptr_t>(dst) % 8) == 0 && len % 8 == 0) {
    memcpy(dst, src, len - 8);
    uint64_t last;
    memcpy(&last, static_cast<const char*>(src) + len - 8, 8);
    __atomic_store_n(reinterpret_cast<uint64_t*>(static_cast<char*>(dst) + len - 8), last,
                     __ATOMIC_RELEASE);
  } else if (len > 0) {
    memcpy(dst, src, len);
  }
}

ibv_wc_status execute(FQp* q, const ibv_send_wr* wr) {
  if (q->state != IBV_QPS_RTS) return IBV_WC_WR_FLUSH_ERR;
  const bool read = wr->opcode == IBV_WR_RDMA_READ;
  uint64_t len = 0;
  for (int i = 0; i < wr->num_sge; ++i) {
    const ibv_sge& s = wr->sg_list[i];
    // A read writes its local buffers.
    if (region(s.lkey, q->pd, s.addr, s.length, read ? IBV_ACCESS_LOCAL_WRITE : 0) == nullptr)
      return IBV_WC_LOC_PROT_ERR;
    len += s.length;
  }
  auto rit = qps.find(q->destQpn);
  if (rit == qps.end()) return IBV_WC_RETRY_EXC_ERR;
  FQp* r = rit->second;
  if ((r->state != IBV_QPS_RTR && r->state != IBV_QPS_RTS) || !reaches(q, r))
    return IBV_WC_RETRY_EXC_ERR;
  if (failWrites > 0) {
    --failWrites;
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (read) {
    // The responder's queue pair and memory region must both allow remote reads.
    if ((r->access & IBV_ACCESS_REMOTE_READ) == 0 ||
        region(wr->wr.rdma.rkey, r->pd, wr->wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_READ) ==
            nullptr)
      return IBV_WC_REM_ACCESS_ERR;
    const char* src = reinterpret_cast<const char*>(wr->wr.rdma.remote_addr);
    for (int i = 0; i < wr->num_sge; ++i) {
      memcpy(reinterpret_cast<void*>(wr->sg_list[i].addr), src, wr->sg_list[i].length);
      src += wr->sg_list[i].length;
    }
    ++stats.reads;
    return IBV_WC_SUCCESS;
  }
  if (len > 0 && region(wr->wr.rdma.rkey, r->pd, wr->wr.rdma.remote_addr, len,
                        IBV_ACCESS_REMOTE_WRITE) == nullptr)
    return IBV_WC_REM_ACCESS_ERR;
  const bool imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  if (imm && r->rq.empty()) return IBV_WC_RNR_RETRY_EXC_ERR;
  char* dst = reinterpret_cast<char*>(wr->wr.rdma.remote_addr);
  for (int i = 0; i < wr->num_sge; ++i) {
    deliver(dst, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
    dst += wr->sg_list[i].length;
  }
  ++stats.writes;
  stats.bytes += len;
  if (imm) {
    ++stats.immWrites;
    ibv_wc wc = completion(r->rq.front(), IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, r->qp.qp_num);
    r->rq.pop_front();
    wc.byte_len = static_cast<uint32_t>(len);
    wc.imm_data = wr->imm_data;
    wc.wc_flags = IBV_WC_WITH_IMM;
    push(r->rcq, wc);
  }
  return IBV_WC_SUCCESS;
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::lock_guard<std::mutex> lock(mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  for (; wr != nullptr; wr = wr->next) {
    *bad = wr;
    if (q->state != IBV_QPS_RTS && q->state != IBV_QPS_ERR) return EINVAL;
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
        wr->opcode != IBV_WR_RDMA_READ)
      return EINVAL;
    const ibv_wc_opcode op = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > q->cap.max_send_sge) return EINVAL;
    const bool signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0 || q->qp.qp_type != IBV_QPT_RC;
    if (signaled && q->sqOutstanding >= q->cap.max_send_wr) return ENOMEM;
    const ibv_wc_status st = execute(q, wr);
    if (st != IBV_WC_SUCCESS) {
      q->state = IBV_QPS_ERR;
      ++q->sqOutstanding;
      push(q->scq, completion(wr->wr_id, st, op, q->qp.qp_num));
      continue;
    }
    if (signaled) {
      ++q->sqOutstanding;
      push(q->scq, completion(wr->wr_id, IBV_WC_SUCCESS, op, q->qp.qp_num));
    }
  }
  *bad = nullptr;
  return 0;
}

int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::lock_guard<std::mutex> lock(mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  for (; wr != nullptr; wr = wr->next) {
    *bad = wr;
    if (q->state == IBV_QPS_RESET) return EINVAL;
    if (q->rq.size() >= q->cap.max_recv_wr) return ENOMEM;
    q->rq.push_back(wr->wr_id);
  }
  *bad = nullptr;
  return 0;
}

int pollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::lock_guard<std::mutex> lock(mu);
  FCq* c = reinterpret_cast<FCq*>(cq);
  int got = 0;
  while (got < n && !c->wcs.empty()) {
    wc[got] = c->wcs.front();
    c->wcs.pop_front();
    if (wc[got].opcode == IBV_WC_RDMA_WRITE || wc[got].opcode == IBV_WC_RDMA_READ) {
      auto it = qps.find(wc[got].qp_num);
      if (it != qps.end() && it->second->sqOutstanding > 0) --it->second->sqOutstanding;
    }
    ++got;
  }
  return got;
}

bool has(int mask, int bits) {
  return (mask & bits) == bits;
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

void fake_verbs_stats(FakeVerbsStats* out) {
  std::lock_guard<std::mutex> lock(mu);
  *out = stats;
}

void fake_verbs_fail_writes(int n) {
  std::lock_guard<std::mutex> lock(mu);
  failWrites = n;
}

ibv_device** ibv_get_device_list(int* num) {
  std::lock_guard<std::mutex> lock(mu);
  makeDevices();
  auto** list = static_cast<ibv_device**>(calloc(devices.size() + 1, sizeof(ibv_device*)));
  for (size_t i = 0; i < devices.size(); ++i) list[i] = &devices[i]->dev;
  if (num != nullptr) *num = static_cast<int>(devices.size());
  return list;
}

void ibv_free_device_list(ibv_device** list) {
  free(list);
}

const char* ibv_get_device_name(ibv_device* device) {
  return device->name;
}

ibv_context* ibv_open_device(ibv_device* device) {
  auto* c = new FCtx;
  memset(&c->ctx, 0, sizeof c->ctx);
  c->ctx.device = device;
  c->ctx.ops.post_send = postSend;
  c->ctx.ops.post_recv = postRecv;
  c->ctx.ops.poll_cq = pollCq;
  c->dev = reinterpret_cast<FDev*>(device);
  return &c->ctx;
}

int ibv_close_device(ibv_context* context) {
  delete reinterpret_cast<FCtx*>(context);
  return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
  memset(attr, 0, sizeof *attr);
  attr->phys_port_cnt = 1;
  attr->max_qp_wr = 1024;
  attr->max_cqe = 4096;
  return 0;
}

int ibv_query_port(ibv_context* context, uint8_t port, struct _compat_ibv_port_attr* out) {
  FDev* d = reinterpret_cast<FCtx*>(context)->dev;
  if (port != 1) return EINVAL;
  auto* attr = reinterpret_cast<ibv_port_attr*>(out);  // the fields both layouts share
  attr->state = d->down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = d->roce ? IBV_MTU_1024 : IBV_MTU_4096;
  attr->gid_tbl_len = 8;
  attr->lid = d->lid;
  attr->active_width = 2;                  // 4x
  attr->active_speed = d->roce ? 32 : 64;  // EDR-like 100, HDR-like 200 Gbit/s
  attr->link_layer = d->roce ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

int ibv_query_gid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) {
  FDev* d = reinterpret_cast<FCtx*>(context)->dev;
  if (port != 1 || index < 0 || index >= 8) return EINVAL;
  memset(gid, 0, sizeof *gid);
  if (static_cast<size_t>(index) < d->gids.size()) *gid = d->gids[index].first;
  return 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port, uint32_t index, ibv_gid_entry* entry,
                      uint32_t, size_t) {
  FDev* d = reinterpret_cast<FCtx*>(context)->dev;
  if (port != 1 || index >= 8) return EINVAL;
  memset(entry, 0, sizeof *entry);
  entry->gid_index = index;
  entry->port_num = port;
  if (index >= d->gids.size()) return ENODATA;
  entry->gid = d->gids[index].first;
  entry->gid_type = static_cast<uint32_t>(d->gids[index].second);
  return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
  auto* p = new FPd;
  memset(&p->pd, 0, sizeof p->pd);
  p->pd.context = context;
  p->ctx = reinterpret_cast<FCtx*>(context);
  return &p->pd;
}

int ibv_dealloc_pd(ibv_pd* pd) {
  delete reinterpret_cast<FPd*>(pd);
  return 0;
}

ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  std::lock_guard<std::mutex> lock(mu);
  if (addr == nullptr || length == 0) {
    errno = EINVAL;
    return nullptr;
  }
  auto* m = new FMr;
  memset(&m->mr, 0, sizeof m->mr);
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->mr.lkey = m->mr.rkey = nextKey++;
  m->pd = reinterpret_cast<FPd*>(pd);
  m->access = access;
  mrs[m->mr.lkey] = m;
  ++stats.mrsLive;
  ++stats.mrsRegistered;
  if ((access & IBV_ACCESS_REMOTE_READ) != 0) ++stats.readableMrs;
  return &m->mr;
}

// A dma-buf (a memfd in the tests) whose bytes from offset are those at iova in this process,
// as a GPU's exported memory is at its address: registered at iova, as ibv_reg_mr would.
ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                          int access) {
  const char* none = getenv("FAKE_IBV_NO_DMABUF");
  if (none != nullptr && atoi(none) == 1) {  // a kernel driver without dma-buf support
    errno = EOPNOTSUPP;
    return nullptr;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = offset / page * page;
  const size_t span = static_cast<size_t>(offset - start) + length;
  struct stat st;
  const bool inside = fd >= 0 && length > 0 && fstat(fd, &st) == 0 &&
                      offset + length <= static_cast<uint64_t>(st.st_size);
  void* map = !inside ? MAP_FAILED
                      : mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (map == MAP_FAILED) {
    errno = EINVAL;
    return nullptr;
  }
  void* addr = reinterpret_cast<void*>(static_cast<uintptr_t>(iova));
  const bool same = memcmp(static_cast<char*>(map) + (offset - start), addr, length) == 0;
  munmap(map, span);
  if (!same) {
    errno = EFAULT;
    return nullptr;
  }
  ibv_mr* mr = ibv_reg_mr(pd, addr, length, access);
  std::lock_guard<std::mutex> lock(mu);
  if (mr != nullptr) ++stats.dmabufMrs;
  if (mr != nullptr && (access & IBV_ACCESS_REMOTE_READ) != 0) --stats.readableMrs;
  return mr;
}

int ibv_dereg_mr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(mu);
  if (mrs.erase(mr->lkey) == 0) return EINVAL;
  --stats.mrsLive;
  delete reinterpret_cast<FMr*>(mr);
  return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cqContext, ibv_comp_channel* channel,
                      int) {
  auto* c = new FCq;
  memset(&c->cq, 0, sizeof c->cq);
  c->cq.context = context;
  c->cq.cq_context = cqContext;
  c->cq.channel = channel;
  c->cq.cqe = cqe;
  c->cqe = cqe;
  return &c->cq;
}

int ibv_destroy_cq(ibv_cq* cq) {
  delete reinterpret_cast<FCq*>(cq);
  return 0;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  std::lock_guard<std::mutex> lock(mu);
  if (attr->qp_type != IBV_QPT_RC || attr->send_cq == nullptr || attr->recv_cq == nullptr ||
      attr->cap.max_send_wr > 1024 || attr->cap.max_recv_wr > 1024) {
    errno = EINVAL;
    return nullptr;
  }
  auto* q = new FQp;
  memset(&q->qp, 0, sizeof q->qp);
  memset(&q->ah, 0, sizeof q->ah);
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = attr->send_cq;
  q->qp.recv_cq = attr->recv_cq;
  q->qp.qp_type = attr->qp_type;
  q->qp.qp_num = nextQpn++;
  q->pd = reinterpret_cast<FPd*>(pd);
  q->scq = reinterpret_cast<FCq*>(attr->send_cq);
  q->rcq = reinterpret_cast<FCq*>(attr->recv_cq);
  q->cap = attr->cap;
  qps[q->qp.qp_num] = q;
  ++stats.qpsLive;
  return &q->qp;
}

// The transitions of a reliable-connected queue pair and the attributes each requires.
int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  std::lock_guard<std::mutex> lock(mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  const FDev* d = devOf(q);
  auto refuse = [&] {
    ++stats.badTransitions;
    errno = EINVAL;
    return EINVAL;
  };
  if (!(mask & IBV_QP_STATE)) return refuse();
  const int to = attr->qp_state;
  if (to == IBV_QPS_ERR || to == IBV_QPS_RESET) {
    q->state = to;
    return 0;
  }
  if (q->state == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    if (!has(mask, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || attr->port_num != 1)
      return refuse();
    q->port = attr->port_num;
    q->access = attr->qp_access_flags;
  } else if (q->state == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (!has(mask, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return refuse();
    const int activeMtu = d->roce ? IBV_MTU_1024 : IBV_MTU_4096;
    if (attr->path_mtu > activeMtu || attr->ah_attr.port_num != q->port) return refuse();
    if (d->roce) {
      // RoCE needs a GRH from a GID the port has.
      if (!attr->ah_attr.is_global || attr->ah_attr.grh.sgid_index >= d->gids.size())
        return refuse();
      ++stats.roceConnects;
      stats.lastSgidIndex = attr->ah_attr.grh.sgid_index;
    } else if (attr->ah_attr.dlid == 0) {
      return refuse();
    }
    q->ah = attr->ah_attr;
    q->destQpn = attr->dest_qp_num;
    q->mtu = attr->path_mtu;
  } else if (q->state == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    if (!has(mask, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                       IBV_QP_MAX_QP_RD_ATOMIC))
      return refuse();
  } else {
    return refuse();
  }
  q->state = to;
  return 0;
}

int ibv_destroy_qp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(mu);
  FQp* q = reinterpret_cast<FQp*>(qp);
  qps.erase(q->qp.qp_num);
  --stats.qpsLive;
  delete q;
  return 0;
}

const char* ibv_wc_status_str(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return "success";
    case IBV_WC_LOC_PROT_ERR:
      return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:
      return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:
      return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:
      return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR retry counter exceeded";
    default:
      return "unknown";
  }
}

}  // extern "C"
#pragma GCC visibility pop
