// chorus-info: what this Chorus build is and how it is configured.
//   chorus-info            version, features, host identity, the network between hosts
//   chorus-info --params   every parameter with its default, current value and description
#include <cstdio>
#include <cstring>
#include <string>

#include "nccl.h"
#include "chorus_config.h"
#include "common/param.h"
#include "topo/host_id.h"
#include "transport/net_plugin/net_plugin.h"

namespace {

void printParams() {
  printf("%-22s %-8s %-12s %-20s %s\n", "NAME", "TYPE", "DEFAULT", "VALUE (SOURCE)", "DESCRIPTION");
  for (const chorus::ParamDef& p : chorus::paramTable()) {
    chorus::ParamValue v = chorus::paramRaw(p.name);
    std::string name = std::string("CHORUS_") + p.name;
    std::string value = v.isSet ? v.value + " (" + v.source + ")" : "-";
    std::string alias = p.ncclAlias ? std::string(" (alias NCCL_") + p.name + ")" : "";
    printf("%-22s %-8s %-12s %-20s %s%s\n", name.c_str(),
           p.type == chorus::ParamType::kInt ? "int" : "string",
           *p.defaultValue ? p.defaultValue : "\"\"", value.c_str(), p.doc, alias.c_str());
  }
}

// What ranks on different hosts would use: a net plugin, the IB network, or sockets (and why
// not IB).
void printNetwork() {
  chorus::Result<chorus::NetPlugin*> net = chorus::processNetPlugin();
  if (!net.isOk()) {
    printf("network between hosts: error: %s\n", net.status().message().c_str());
    return;
  }
  if (net.value() == nullptr) {
    const std::string why = chorus::whyNoIbNetwork();
    printf("network between hosts: Socket (TCP)%s%s\n",
           why.empty() ? "" : "; IB not used: ", why.c_str());
    return;
  }
  chorus::NetPlugin* p = net.value();
  printf("network between hosts: %s (ncclNet v%d, %s)\n", p->name(), p->version(),
         p->library().c_str());
  // As the transport sees them: virtual NICs in their first port's place, with what places
  // them (PCI function and NUMA node, rail and plane) and whether receives group.
  for (int d = 0; d < p->devices(); ++d) {
    chorus::NetPlugin::Properties props;
    if (!p->properties(d, &props).isOk()) continue;
    const std::string bus = chorus::netDeviceBusId(props.pciPath);
    std::string where = props.pciPath.empty() ? "no PCI path"
                        : bus.empty()         ? "PCI path " + props.pciPath
                                              : "PCI " + bus;
    const int node = chorus::netDeviceNumaNode(props.pciPath);
    if (node >= 0) where += " (NUMA node " + std::to_string(node) + ")";
    if (props.railId >= 0)
      where += ", rail " + std::to_string(props.railId) + " plane " + std::to_string(props.planeId);
    printf("  device %d: %s, %d Mbit/s, %s, receives of up to %d buffer%s\n", d, props.name.c_str(),
           props.speedMbps, where.c_str(), props.maxRecvs, props.maxRecvs == 1 ? "" : "s");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--params") == 0) {
    printParams();
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: chorus-info [--params]\n");
    return argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? 0 : 2;
  }
  printf("Chorus %s (NCCL API %d)\n", CHORUS_VERSION, NCCL_VERSION_CODE);
  printf("features: cuda=%d ibverbs=%d hwloc=%d\n", CHORUS_HAVE_CUDA, CHORUS_HAVE_IBVERBS,
         CHORUS_HAVE_HWLOC);
  printf("host id: %016llx (%s)\n", static_cast<unsigned long long>(chorus::localHostId()),
         chorus::localHostIdText().c_str());
  printNetwork();
  return 0;
}
