#include "topo/hca_filter.h"

#include <cstdlib>

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

}  // namespace chorus
