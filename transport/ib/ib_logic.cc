#include "transport/ib/ib_logic.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/param.h"

namespace chorus {
namespace ib {

namespace {

Status readRange(const char* name, int lo, int hi, int* out) {
  const ParamValue v = paramRaw(name);
  if (!v.isSet) {
    *out = static_cast<int>(paramInt(name));
    return Status::ok();
  }
  char* end = nullptr;
  const long x = strtol(v.value.c_str(), &end, 0);
  if (end == v.value.c_str() || *end != '\0' || x < lo || x > hi)
    return invalidArgument("%s=%s: expected an integer from %d to %d", v.source.c_str(),
                           v.value.c_str(), lo, hi);
  *out = static_cast<int>(x);
  return Status::ok();
}

constexpr uint32_t kConnMagic = 0x49424e43;  // "IBNC"
constexpr uint16_t kConnVersion = 1;

void put(uint8_t*& p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) *p++ = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const uint8_t*& p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(*p++) << (8 * i);
  return v;
}

}  // namespace

Result<Options> optionsFromEnvironment() {
  Options o;
  int ar = 0;
  CHORUS_TRY(readRange("IB_QPS_PER_CONNECTION", 1, kMaxQps, &o.qpsPerConnection));
  CHORUS_TRY(readRange("IB_TIMEOUT", 1, 31, &o.timeout));
  CHORUS_TRY(readRange("IB_RETRY_CNT", 0, 7, &o.retryCount));
  CHORUS_TRY(readRange("IB_SL", 0, 15, &o.serviceLevel));
  CHORUS_TRY(readRange("IB_TC", 0, 255, &o.trafficClass));
  CHORUS_TRY(readRange("IB_ADAPTIVE_ROUTING", 0, 1, &ar));
  o.adaptiveRouting = ar != 0;
  CHORUS_TRY(readRange("IB_PEER_MEMORY", -1, 1, &o.peerMemory));
  return o;
}

bool peerMemoryLoaded(const std::string& sysRoot) {
  for (const char* path :
       {"/module/nvidia_peermem/version", "/kernel/mm/memory_peers/nvidia-peermem/version",
        "/kernel/mm/memory_peers/nv_mem/version"})
    if (access((sysRoot + path).c_str(), F_OK) == 0) return true;
  return false;
}

void encodeConnInfo(const ConnInfo& info, uint8_t out[kConnInfoBytes]) {
  memset(out, 0, kConnInfoBytes);
  uint8_t* p = out;
  put(p, kConnMagic, 4);
  put(p, kConnVersion, 2);
  put(p, info.nqps, 2);
  put(p, info.lid, 2);
  put(p, info.linkLayer, 1);
  put(p, info.mtu, 1);
  memcpy(p, info.gid, 16);
  p += 16;
  put(p, info.psn, 4);
  put(p, info.fifoAddr, 8);
  put(p, info.fifoRkey, 4);
  for (int q = 0; q < kMaxQps; ++q) put(p, info.qpn[q], 4);  // 44 + 64 = 108 bytes used
}

Result<ConnInfo> decodeConnInfo(const uint8_t in[kConnInfoBytes]) {
  const uint8_t* p = in;
  const uint32_t magic = static_cast<uint32_t>(get(p, 4));
  const uint16_t version = static_cast<uint16_t>(get(p, 2));
  if (magic != kConnMagic)
    return remoteError("IB connection setup: the peer's message is not an IB connection's");
  if (version != kConnVersion)
    return remoteError("IB connection setup: the peer speaks version %u, this rank %u", version,
                       kConnVersion);
  ConnInfo info;
  info.nqps = static_cast<uint32_t>(get(p, 2));
  info.lid = static_cast<uint16_t>(get(p, 2));
  info.linkLayer = static_cast<uint8_t>(get(p, 1));
  info.mtu = static_cast<uint8_t>(get(p, 1));
  memcpy(info.gid, p, 16);
  p += 16;
  info.psn = static_cast<uint32_t>(get(p, 4));
  info.fifoAddr = get(p, 8);
  info.fifoRkey = static_cast<uint32_t>(get(p, 4));
  for (int q = 0; q < kMaxQps; ++q) info.qpn[q] = static_cast<uint32_t>(get(p, 4));
  if (info.nqps < 1 || info.nqps > static_cast<uint32_t>(kMaxQps))
    return remoteError("IB connection setup: the peer has %u queue pairs (1 to %d allowed)",
                       info.nqps, kMaxQps);
  if (info.linkLayer != IBV_LINK_LAYER_INFINIBAND && info.linkLayer != IBV_LINK_LAYER_ETHERNET)
    return remoteError("IB connection setup: the peer's link layer %u is unknown", info.linkLayer);
  if (info.mtu < IBV_MTU_256 || info.mtu > IBV_MTU_4096)
    return remoteError("IB connection setup: the peer's MTU code %u is not 1 to 5", info.mtu);
  if (info.psn > 0xffffff)
    return remoteError("IB connection setup: the peer's PSN %u is wider than 24 bits", info.psn);
  for (uint32_t q = 0; q < info.nqps; ++q)
    if (info.qpn[q] == 0 || info.qpn[q] > 0xffffff)
      return remoteError("IB connection setup: the peer's queue pair %u has number %u", q,
                         info.qpn[q]);
  return info;
}

void initTransition(const LocalPort& local, ibv_qp_attr* attr, int* mask) {
  memset(attr, 0, sizeof *attr);
  attr->qp_state = IBV_QPS_INIT;
  attr->pkey_index = 0;
  attr->port_num = local.port;
  attr->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

void rtrTransition(const LocalPort& local, const ConnInfo& remote, int qp, const Options& options,
                   ibv_qp_attr* attr, int* mask) {
  memset(attr, 0, sizeof *attr);
  attr->qp_state = IBV_QPS_RTR;
  attr->path_mtu = static_cast<ibv_mtu>(std::min<int>(local.mtu, remote.mtu));
  attr->dest_qp_num = remote.qpn[qp];
  attr->rq_psn = remote.psn;
  attr->max_dest_rd_atomic = 1;
  attr->min_rnr_timer = 12;  // 0.64 ms
  attr->ah_attr.port_num = local.port;
  attr->ah_attr.sl = static_cast<uint8_t>(options.serviceLevel);
  if (local.roce) {
    attr->ah_attr.is_global = 1;
    memcpy(attr->ah_attr.grh.dgid.raw, remote.gid, 16);
    attr->ah_attr.grh.sgid_index = static_cast<uint8_t>(local.gidIndex);
    attr->ah_attr.grh.hop_limit = 255;
    attr->ah_attr.grh.traffic_class = static_cast<uint8_t>(options.trafficClass);
  } else {
    attr->ah_attr.is_global = 0;
    attr->ah_attr.dlid = remote.lid;
  }
  *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

void rtsTransition(uint32_t psn, const Options& options, ibv_qp_attr* attr, int* mask) {
  memset(attr, 0, sizeof *attr);
  attr->qp_state = IBV_QPS_RTS;
  attr->timeout = static_cast<uint8_t>(options.timeout);
  attr->retry_cnt = static_cast<uint8_t>(options.retryCount);
  attr->rnr_retry = 7;  // retry forever while the receiver has no receive posted
  attr->sq_psn = psn;
  attr->max_rd_atomic = 1;
  *mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
          IBV_QP_MAX_QP_RD_ATOMIC;
}

Chunk chunkOfQp(size_t total, int nqps, int qp) {
  constexpr size_t kAlign = 128;
  const size_t n = static_cast<size_t>(std::max(1, nqps));
  size_t share = (total + n - 1) / n;
  share = (share + kAlign - 1) / kAlign * kAlign;
  Chunk c;
  c.offset = std::min(total, share * static_cast<size_t>(qp));
  c.bytes = std::min(total - c.offset, share);
  return c;
}

Result<MrCache::Entry*> MrCache::acquire(const void* data, size_t bytes, const Register& reg,
                                         bool shared) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = addr / page_ * page_;
  const uintptr_t end = (addr + std::max<size_t>(bytes, 1) + page_ - 1) / page_ * page_;
  for (Entry& e : entries_) {
    if (shared && e.shared && e.begin <= begin && end <= e.end) {
      ++e.refs;
      return &e;
    }
  }
  Result<void*> mr = reg(reinterpret_cast<void*>(begin), end - begin);
  if (!mr.isOk()) return mr.status();
  entries_.push_back(Entry{begin, end, mr.value(), 1, shared});
  return &entries_.back();
}

Status MrCache::release(Entry* entry, const Deregister& dereg) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (&*it != entry) continue;
    if (--it->refs > 0) return Status::ok();
    Status s = dereg(it->mr);
    entries_.erase(it);
    return s;
  }
  return invalidArgument("IB: deregistering a memory handle that is not registered");
}

double portRateGbps(uint8_t activeWidth, uint32_t activeSpeed) {
  int lanes = 0;
  switch (activeWidth) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      return 0;
  }
  double perLane = 0;
  switch (activeSpeed) {
    case 1:
      perLane = 2.5;
      break;  // SDR
    case 2:
      perLane = 5;
      break;  // DDR
    case 4:
      perLane = 10;
      break;  // QDR
    case 8:
      perLane = 10;
      break;  // FDR10
    case 16:
      perLane = 14;
      break;  // FDR
    case 32:
      perLane = 25;
      break;  // EDR
    case 64:
      perLane = 50;
      break;  // HDR
    case 128:
      perLane = 100;
      break;  // NDR
    case 256:
      perLane = 200;
      break;  // XDR
    default:
      return 0;
  }
  return lanes * perLane;
}

std::string gidToString(const uint8_t gid[16]) {
  char text[40];
  char* p = text;
  for (int i = 0; i < 16; i += 2) {
    snprintf(p, 6, "%02x%02x%s", gid[i], gid[i + 1], i < 14 ? ":" : "");
    p += i < 14 ? 5 : 4;
  }
  return text;
}

const char* gidTypeName(int type) {
  return type == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2" : "IB/RoCE v1";
}

const char* mtuName(int mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return "256";
    case IBV_MTU_512:
      return "512";
    case IBV_MTU_1024:
      return "1024";
    case IBV_MTU_2048:
      return "2048";
    case IBV_MTU_4096:
      return "4096";
    default:
      return "?";
  }
}

int matchFifoEntry(const FifoEntry* entries, int n, uint32_t sentMask, int tag) {
  for (int i = 0; i < n && i < kMaxRecvs; ++i)
    if ((sentMask & (1u << i)) == 0 && entries[i].tag == tag) return i;
  return -1;
}

uint32_t encodeImm(int index, int n, size_t size) {
  if (n <= 1) return static_cast<uint32_t>(size);
  return static_cast<uint32_t>(index) << 29 | static_cast<uint32_t>(size & kGroupedMaxBytes);
}

void decodeImm(uint32_t imm, int n, int* index, size_t* size) {
  *index = n <= 1 ? 0 : static_cast<int>(imm >> 29);
  *size = n <= 1 ? imm : (imm & kGroupedMaxBytes);
}

}  // namespace ib
}  // namespace chorus
