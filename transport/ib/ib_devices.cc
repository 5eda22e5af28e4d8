#include "transport/ib/ib_devices.h"

#include <errno.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "topo/hca_filter.h"

namespace chorus {

namespace {

const char* portStateName(int state) {
  switch (state) {
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    default:
      return "OTHER";
  }
}

IbPort describePort(const VerbsApi* v, ibv_context* ctx, int p, const ibv_port_attr& pa) {
  IbPort port;
  port.port = p;
  port.state = portStateName(pa.state);
  port.linkLayer = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  port.rateGbps = ib::portRateGbps(pa.active_width, pa.active_speed);
  for (int g = 0; g < std::min(pa.gid_tbl_len, 256); ++g) {
    ibv_gid_entry e;
    memset(&e, 0, sizeof e);
    std::string type;
    if (v->queryGidEx != nullptr) {
      if (v->queryGidEx(ctx, static_cast<uint32_t>(p), static_cast<uint32_t>(g), &e, 0, sizeof e) !=
          0)
        continue;
      type = ib::gidTypeName(static_cast<int>(e.gid_type));
    } else if (v->queryGid(ctx, static_cast<uint8_t>(p), g, &e.gid) != 0) {
      continue;
    }
    static const uint8_t zero[16] = {};
    if (memcmp(e.gid.raw, zero, 16) == 0) continue;
    port.gids.push_back(IbGid{g, ib::gidToString(e.gid.raw), type});
  }
  return port;
}

}  // namespace

Result<LocalTopology> describeIbDevices(const VerbsApi* v, std::vector<ibv_context*>* contexts) {
  int n = 0;
  errno = 0;
  ibv_device** list = v->getDeviceList(&n);
  if (list == nullptr)
    return errnoError(errno != 0 ? errno : ENODEV, "IB: no RDMA device (ibv_get_device_list)");
  LocalTopology topo;
  for (int i = 0; i < n; ++i) {
    const char* name = v->getDeviceName(list[i]);
    ibv_context* ctx = v->openDevice(list[i]);
    ibv_device_attr attr;
    memset(&attr, 0, sizeof attr);
    if (ctx == nullptr || v->queryDevice(ctx, &attr) != 0) {
      LOG_INFO(kSubsysNet, "IB: cannot open %s, skipped", name != nullptr ? name : "?");
      if (ctx != nullptr) v->closeDevice(ctx);
      continue;
    }
    IbDevice d;
    d.name = name != nullptr ? name : "?";
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa;
      memset(&pa, 0, sizeof pa);
      if (v->queryPort(ctx, static_cast<uint8_t>(p), &pa) == 0)
        d.ports.push_back(describePort(v, ctx, p, pa));
    }
    topo.ibDevices.push_back(d);
    contexts->push_back(ctx);
  }
  v->freeDeviceList(list);
  return topo;
}

Result<std::vector<IbPortChoice>> discoverIbPorts(const VerbsApi* v) {
  std::vector<ibv_context*> contexts;
  Result<LocalTopology> described = describeIbDevices(v, &contexts);
  if (!described.isOk()) return described.status();
  const LocalTopology& topo = described.value();
  std::vector<IbPortChoice> out;
  std::string skipped;
  Status bad = Status::ok();
  Result<std::vector<HcaPort>> chosen = selectHcaPortsFromEnvironment(topo);
  Result<GidPolicy> policy = gidPolicyFromEnvironment();
  if (!chosen.isOk()) bad = chosen.status();
  if (bad.isOk() && !policy.isOk()) bad = policy.status();
  for (size_t i = 0; bad.isOk() && i < chosen.value().size(); ++i) {
    const HcaPort& hp = chosen.value()[i];
    size_t di = 0;
    while (topo.ibDevices[di].name != hp.device) ++di;
    const IbDevice& d = topo.ibDevices[di];
    const IbPort* port = nullptr;
    for (const IbPort& p : d.ports)
      if (p.port == hp.port) port = &p;
    if (port->state != "ACTIVE") {
      skipped += formatString("%s%s:%d is %s", skipped.empty() ? "" : ", ", d.name.c_str(),
                              port->port, port->state.c_str());
      continue;
    }
    Result<int> gidIndex = selectGidIndex(d.name, *port, policy.value());
    if (!gidIndex.isOk()) {
      bad = gidIndex.status();
      break;
    }
    IbPortChoice c;
    c.device = d.name;
    c.ctx = contexts[di];
    ibv_port_attr pa;
    memset(&pa, 0, sizeof pa);
    v->queryPort(c.ctx, static_cast<uint8_t>(port->port), &pa);
    c.local.port = static_cast<uint8_t>(port->port);
    c.local.roce = port->linkLayer == "Ethernet";
    c.local.lid = pa.lid;
    c.local.gidIndex = gidIndex.value();
    c.local.mtu = pa.active_mtu;
    ibv_gid gid;
    memset(&gid, 0, sizeof gid);
    v->queryGid(c.ctx, c.local.port, c.local.gidIndex, &gid);
    memcpy(c.gid, gid.raw, 16);
    c.gbps = port->rateGbps;
    LOG_INFO(kSubsysNet | kSubsysInit, "IB: device %zu is %s:%d (%s, %.0f Gbit/s, MTU %s, %s %d)",
             out.size(), d.name.c_str(), port->port, port->linkLayer.c_str(), c.gbps,
             ib::mtuName(c.local.mtu), c.local.roce ? "GID index" : "LID",
             c.local.roce ? c.local.gidIndex : c.local.lid);
    out.push_back(c);
  }
  for (ibv_context* ctx : contexts) {
    bool used = false;
    for (const IbPortChoice& c : out) used |= c.ctx == ctx;
    if (!used || !bad.isOk()) v->closeDevice(ctx);
  }
  if (!bad.isOk()) return bad;
  if (out.empty())
    return invalidUsage("IB: no active port (%s)",
                        skipped.empty() ? "no RDMA device has a port" : skipped.c_str());
  return out;
}

}  // namespace chorus
