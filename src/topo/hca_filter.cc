#include "topo/hca_filter.h"

#include <cstdlib>
#include <functional>

#include "common/log.h"
#include "common/param.h"

namespace chorus {

namespace {

struct Entry {
  std::string name;
  int port = -1;  // -1: every port
};

std::vector<Entry> parseEntries(const std::string& list) {
  std::vector<Entry> entries;
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    std::string token = list.substr(pos, comma - pos);
    token.erase(0, token.find_first_not_of(" \t"));
    token.erase(token.find_last_not_of(" \t") + 1);
    if (!token.empty()) {
      Entry e;
      size_t colon = token.find(':');
      e.name = token.substr(0, colon);
      if (colon != std::string::npos) e.port = atoi(token.c_str() + colon + 1);
      entries.push_back(e);
    }
    pos = comma + 1;
  }
  return entries;
}

}  // namespace

Result<std::vector<HcaPort>> selectHcaPorts(const LocalTopology& topo, const std::string& spec,
                                            const std::string& source) {
  std::string list = spec;
  const bool exclude = !list.empty() && list[0] == '^';
  if (exclude) list = list.substr(1);
  const bool exact = !list.empty() && list[0] == '=';
  if (exact) list = list.substr(1);
  std::vector<Entry> entries = parseEntries(list);
  std::vector<HcaPort> selected;
  std::string available;
  for (const IbDevice& d : topo.ibDevices) {
    for (const IbPort& p : d.ports) {
      available += (available.empty() ? "" : ", ") + d.name + ":" + std::to_string(p.port);
      bool hit = false;
      for (const Entry& e : entries) {
        bool nameOk = exact ? d.name == e.name : d.name.compare(0, e.name.size(), e.name) == 0;
        if (nameOk && (e.port < 0 || e.port == p.port)) hit = true;
      }
      if (spec.empty() || hit != exclude) selected.push_back(HcaPort{d.name, p.port});
    }
  }
  if (selected.empty() && !available.empty())
    return invalidArgument("%s=\"%s\" matches no HCA port (available: %s)", source.c_str(),
                           spec.c_str(), available.c_str());
  return selected;
}

Result<std::vector<HcaPort>> selectHcaPortsFromEnvironment(const LocalTopology& topo) {
  ParamValue v = paramRaw("IB_HCA");
  return selectHcaPorts(topo, v.isSet ? v.value : "", v.source);
}

namespace {

bool isLinkLocal(const std::string& gid) {
  return gid.compare(0, 4, "fe80") == 0;
}

// "0000:0000:0000:0000:0000:ffff:0a00:0001": an IPv4 address in a GID.
bool isIpv4Mapped(const std::string& gid) {
  return gid.compare(0, 30, "0000:0000:0000:0000:0000:ffff:") == 0;
}

bool typeIsVersion(const std::string& type, int version) {
  return version == 2 ? type == "RoCE v2" : type == "IB/RoCE v1";
}

std::string listGids(const IbPort& port) {
  std::string s;
  for (const IbGid& g : port.gids)
    s += formatString("%s%d %s%s%s", s.empty() ? "" : ", ", g.index, g.gid.c_str(),
                      g.type.empty() ? "" : " ", g.type.c_str());
  return s.empty() ? "none" : s;
}

}  // namespace

Result<int> selectGidIndex(const std::string& device, const IbPort& port, const GidPolicy& policy) {
  if (policy.index >= 0) {
    for (const IbGid& g : port.gids)
      if (g.index == policy.index) return policy.index;
    // InfiniBand addresses by LID; its GID 0 is always there even when the table read empty.
    if (port.linkLayer == "InfiniBand" && policy.index == 0) return 0;
    return invalidArgument("%s=%d: %s port %d has no GID at that index (GIDs: %s)",
                           policy.source.c_str(), policy.index, device.c_str(), port.port,
                           listGids(port).c_str());
  }
  if (port.linkLayer == "InfiniBand") return 0;
  const bool wantV4 = policy.family == 2;
  auto familyMatches = [&](const IbGid& g) {
    return wantV4 ? isIpv4Mapped(g.gid) : !isIpv4Mapped(g.gid) && !isLinkLocal(g.gid);
  };
  // Candidates in order of preference; the lowest index within the first kind that has any.
  const std::vector<std::function<bool(const IbGid&)>> tiers = {
      [&](const IbGid& g) { return typeIsVersion(g.type, policy.roceVersion) && familyMatches(g); },
      [&](const IbGid& g) { return typeIsVersion(g.type, policy.roceVersion); },
      [&](const IbGid& g) { return !isLinkLocal(g.gid); },
      [&](const IbGid&) { return true; },
  };
  for (const auto& take : tiers) {
    int best = -1;
    for (const IbGid& g : port.gids)
      if (take(g) && (best < 0 || g.index < best)) best = g.index;
    if (best >= 0) return best;
  }
  return invalidUsage("%s port %d (RoCE) has no GID: give its interface an address", device.c_str(),
                      port.port);
}

Result<std::vector<int>> selectGidsFromEnvironment(const LocalTopology& topo,
                                                   const std::vector<HcaPort>& ports) {
  std::vector<int> out;
  if (ports.empty()) return out;
  Result<GidPolicy> policy = gidPolicyFromEnvironment();
  if (!policy.isOk()) return policy.status();
  for (const HcaPort& hp : ports) {
    for (const IbDevice& d : topo.ibDevices) {
      if (d.name != hp.device) continue;
      for (const IbPort& p : d.ports) {
        if (p.port != hp.port) continue;
        Result<int> index = selectGidIndex(d.name, p, policy.value());
        if (!index.isOk()) return index.status();
        out.push_back(index.value());
        LOG_INFO(kSubsysNet, "IB port %s:%d (%s) uses GID index %d", d.name.c_str(), p.port,
                 p.linkLayer.c_str(), index.value());
      }
    }
  }
  return out;
}

Result<GidPolicy> gidPolicyFromEnvironment() {
  GidPolicy p;
  const ParamValue index = paramRaw("IB_GID_INDEX");
  p.source = index.source;
  const int64_t i = paramInt("IB_GID_INDEX");
  if (i < -1 || i > 65535)
    return invalidArgument("%s=%lld: expected -1 (chosen) or a GID index 0..65535",
                           index.source.c_str(), static_cast<long long>(i));
  p.index = static_cast<int>(i);
  const int64_t v = paramInt("IB_ROCE_VERSION_NUM");
  if (v != 1 && v != 2)
    return invalidArgument("%s=%lld: expected 1 or 2",
                           paramRaw("IB_ROCE_VERSION_NUM").source.c_str(),
                           static_cast<long long>(v));
  p.roceVersion = static_cast<int>(v);
  const std::string family = paramString("IB_ADDR_FAMILY");
  if (family == "AF_INET") {
    p.family = 2;
  } else if (family == "AF_INET6") {
    p.family = 10;
  } else {
    return invalidArgument("%s=%s: expected AF_INET or AF_INET6",
                           paramRaw("IB_ADDR_FAMILY").source.c_str(), family.c_str());
  }
  return p;
}

}  // namespace chorus
