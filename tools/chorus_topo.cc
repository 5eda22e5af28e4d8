// chorus-topo: the topology Chorus sees and the rings and trees it builds on it.
//   chorus-topo [--file F] [--json|--dot]
//                                this host (or the topology file F, as CHORUS_TOPO_FILE would
//                                load it): CPUs, NUMA nodes, caches, interfaces, HCAs, GPUs, a
//                                device matrix like `nvidia-smi topo -m`, the transport a device
//                                communicator would use between every two GPUs (CHORUS_P2P_LEVEL,
//                                CHORUS_P2P_DISABLE and CHORUS_SHM_DISABLE apply), and the ring
//                                and trees for one rank per GPU (per NUMA node without GPUs)
//   chorus-topo --comm [--dot]   run as every rank of a job (e.g. under chorusrun); rank 0
//                                prints the hosts, the transport and expected bandwidth between
//                                every pair of ranks, the ring and both trees (or Graphviz DOT)
// The ranks find each other like the perf tools: CHORUS_RANK / CHORUS_NRANKS (chorusrun) and
// the rendezvous CHORUS_COMM_ID / NCCL_COMM_ID.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "algorithms/topo_graph.h"
#include "bootstrap/bootstrap.h"
#include "core/comm.h"
#include "topo/discover.h"
#include "topo/hca_filter.h"
#include "topo/topo_file.h"
#include "transport/device_path.h"

namespace {

void usage(FILE* out) {
  fprintf(out,
          "usage: chorus-topo [--file F] [--json | --dot]\n"
          "       chorus-topo --comm [--dot]\n"
          "  (none)   this host's topology (CHORUS_TOPO_FILE/CHORUS_TOPO_DUMP_FILE apply)\n"
          "  --file F read the topology from the Chorus topology file F instead\n"
          "  --json   print the topology as a Chorus topology file\n"
          "  --comm   join a communicator as CHORUS_RANK of CHORUS_NRANKS (rendezvous at\n"
          "           CHORUS_COMM_ID/NCCL_COMM_ID) and print its topology on rank 0\n"
          "  --dot    Graphviz DOT instead of text\n"
          "example: chorusrun -n 4 chorus-topo --comm\n");
}

bool envInt(const char* name, int* out) {
  const char* s = getenv(name);
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > 1 << 24) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string bytesText(uint64_t b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return chorus::formatString(
      v == static_cast<double>(static_cast<uint64_t>(v)) ? "%.0f %s" : "%.1f %s", v, units[u]);
}

// A device of the matrix: a GPU or a network device (an interface and/or HCA on one PCI
// function).
struct Device {
  std::string label, name, busId;
  int gpu = -1;  // index into gpus, or -1 for a NIC
  int numa = -1;
};

std::vector<Device> matrixDevices(const chorus::LocalTopology& t) {
  std::vector<Device> devs;
  for (const chorus::Gpu& g : t.gpus)
    devs.push_back(
        {chorus::formatString("GPU%d", g.index), g.name, g.pciBusId, g.index, g.numaNode});
  int nic = 0;
  auto addNic = [&](const std::string& name, const std::string& bus, int numa) {
    for (Device& d : devs)
      if (d.gpu < 0 && !bus.empty() && d.busId == bus) {
        d.name += "/" + name;
        return;
      }
    devs.push_back({chorus::formatString("NIC%d", nic++), name, bus, -1, numa});
  };
  for (const chorus::IbDevice& ib : t.ibDevices) addNic(ib.name, ib.pciBusId, ib.numaNode);
  for (const chorus::NetInterface& n : t.netInterfaces)
    if (!n.loopback && !n.isVirtual && !n.pciBusId.empty()) addNic(n.name, n.pciBusId, n.numaNode);
  return devs;
}

std::string linkText(const chorus::LocalTopology& t, const Device& a, const Device& b) {
  if (&a == &b) return "X";
  if (a.gpu >= 0 && b.gpu >= 0) {
    const chorus::Gpu& g = t.gpus[a.gpu];
    int links = b.gpu < static_cast<int>(g.nvlinks.size()) ? g.nvlinks[b.gpu] : 0;
    if (links > 0) return chorus::formatString("NV%d", links);
    if (chorus::nvlinkConnected(t, a.gpu, b.gpu)) return "NVS";
  }
  return chorus::pciDistanceName(chorus::pciDistance(t, a.busId, b.busId));
}

// The transport of a device communicator between every two GPUs, one rank (process) per GPU.
void printDeviceTransports(const chorus::LocalTopology& t, const chorus::DevicePathOptions& o) {
  printf(
      "\n# Device transports (one rank per GPU, this host): P2P level %s, P2P %s, shared memory "
      "%s\n%-6s",
      chorus::p2pLevelName(o.p2pLevel), o.p2pDisabled ? "disabled" : "enabled",
      o.shmDisabled ? "disabled" : "enabled", "");
  std::vector<chorus::DeviceEndpoint> ranks;
  for (const chorus::Gpu& g : t.gpus) {
    printf(" %10s", chorus::formatString("GPU%d", g.index).c_str());
    ranks.push_back(chorus::makeDeviceEndpoint(t.hostId, 1 + g.index, g.index, g.pciBusId));
  }
  printf("\n");
  for (size_t a = 0; a < ranks.size(); ++a) {
    printf("%-6s", chorus::formatString("GPU%d", t.gpus[a].index).c_str());
    for (size_t b = 0; b < ranks.size(); ++b)
      printf(" %10s", a == b ? "X"
                             : chorus::devicePathName(
                                   chorus::chooseDevicePath(t, ranks[a], ranks[b], o).kind));
    printf("\n");
  }
}

void printLocal(const chorus::LocalTopology& t, const chorus::DevicePathOptions& deviceOptions) {
  printf("# host %s (host id %016llx, from %s)\n", t.hostname.c_str(),
         static_cast<unsigned long long>(t.hostId), t.source.c_str());
  printf("# cpu: %s; %zu package(s), %zu NUMA node(s), %d cores, %d PUs\n",
         t.cpuModel.empty() ? "?" : t.cpuModel.c_str(), t.packages.size(), t.numaNodes.size(),
         t.cores, t.pus);
  for (const chorus::NumaNode& n : t.numaNodes)
    printf("numa %d: cpus %s, %s\n", n.osIndex, chorus::formatCpuList(n.cpus).c_str(),
           n.memoryBytes ? bytesText(n.memoryBytes).c_str() : "memory unknown");
  for (const chorus::CacheSummary& c : t.caches)
    printf("cache L%d %s: %s x%d (shared by %d PU%s)\n", c.level, c.type.c_str(),
           bytesText(c.sizeBytes).c_str(), c.count, c.sharedByPus, c.sharedByPus == 1 ? "" : "s");
  printf("pci devices: %zu\n", t.pciDevices.size());
  for (const chorus::NetInterface& n : t.netInterfaces) {
    std::string addrs;
    for (const chorus::NetAddress& a : n.addresses)
      addrs += chorus::formatString(" %s/%d", a.address.c_str(), a.prefixLength);
    printf("net %s: %s, %s, mtu %d, numa %d%s%s%s%s\n", n.name.c_str(), n.up ? "up" : "down",
           n.speedMbps > 0 ? chorus::formatString("%lld Mb/s", (long long)n.speedMbps).c_str()
                           : "speed unknown",
           n.mtu, n.numaNode, n.pciBusId.empty() ? "" : (", pci " + n.pciBusId).c_str(),
           n.loopback ? ", loopback" : "", n.isVirtual && !n.loopback ? ", virtual" : "",
           addrs.c_str());
  }
  chorus::Result<std::vector<chorus::HcaPort>> allowed = chorus::selectHcaPortsFromEnvironment(t);
  if (!allowed.isOk()) printf("# %s\n", allowed.status().message().c_str());
  for (const chorus::IbDevice& ib : t.ibDevices)
    for (const chorus::IbPort& p : ib.ports) {
      bool used = false;
      for (const chorus::HcaPort& h :
           allowed.isOk() ? allowed.value() : std::vector<chorus::HcaPort>())
        used = used || (h.device == ib.name && h.port == p.port);
      printf("hca %s port %d: %s, %.0f Gb/s, %s, numa %d, pci %s, %zu gid(s)%s\n", ib.name.c_str(),
             p.port, p.state.c_str(), p.rateGbps, p.linkLayer.c_str(), ib.numaNode,
             ib.pciBusId.c_str(), p.gids.size(), used ? "" : " (excluded by the IB_HCA filter)");
    }
  for (const chorus::Gpu& g : t.gpus)
    printf("gpu %d: %s, pci %s, numa %d\n", g.index, g.name.c_str(), g.pciBusId.c_str(),
           g.numaNode);

  std::vector<Device> devs = matrixDevices(t);
  if (!devs.empty()) {
    printf(
        "\n# devices (X: self; NV#: NVLink links; NVS: through NVSwitch; PIX: one PCIe switch;"
        " PXB: several bridges; PHB: host bridge; NODE: one NUMA node; SYS: across NUMA "
        "nodes)\n%-6s",
        "");
    for (const Device& d : devs) printf(" %6s", d.label.c_str());
    printf("  %-6s %s\n", "NUMA", "CPU affinity");
    for (const Device& a : devs) {
      printf("%-6s", a.label.c_str());
      for (const Device& b : devs) printf(" %6s", linkText(t, a, b).c_str());
      const chorus::NumaNode* node = chorus::findNumaNode(t, a.numa);
      printf("  %-6d %s\n", a.numa, node ? chorus::formatCpuList(node->cpus).c_str() : "?");
    }
    for (const Device& d : devs)
      if (d.gpu < 0) printf("%s: %s (pci %s)\n", d.label.c_str(), d.name.c_str(), d.busId.c_str());
  }
  if (!t.gpus.empty()) printDeviceTransports(t, deviceOptions);

  // One rank per GPU (or NUMA node): the ring, both trees, and each rank's nearest interface.
  std::vector<int> order = chorus::localRingOrder(t);
  const bool gpus = !t.gpus.empty();
  const char* unit = gpus ? "GPU" : "numa";
  printf("\n# ring for one rank per %s:", gpus ? "GPU" : "NUMA node");
  for (size_t i = 0; i < order.size(); ++i) {
    printf(" %s%d", unit, order[i]);
    if (gpus && order.size() > 1) {
      const Device& a = devs[order[i]];
      const Device& b = devs[order[(i + 1) % order.size()]];
      printf(" -%s-", linkText(t, a, b).c_str());
    }
  }
  printf("\n");
  std::vector<std::vector<int>> hosts(1);
  for (size_t i = 0; i < order.size(); ++i) hosts[0].push_back(static_cast<int>(i));
  for (int tree = 0; tree < chorus::kNumTrees && order.size() > 1; ++tree) {
    printf("# tree %d (child<-parent):", tree);
    for (size_t i = 0; i < order.size(); ++i) {
      chorus::TreeNode node = chorus::hostTreeNode(hosts, static_cast<int>(i), tree);
      if (node.parent < 0)
        printf(" %s%d<-root", unit, order[i]);
      else
        printf(" %s%d<-%s%d", unit, order[i], unit, order[node.parent]);
    }
    printf("\n");
  }
  for (int id : order) {
    const chorus::NetInterface* nic = gpus
                                          ? chorus::nearestNetInterfaceToPci(t, t.gpus[id].pciBusId)
                                          : chorus::nearestNetInterface(t, id);
    printf("# %s%d uses interface %s\n", unit, id, nic ? nic->name.c_str() : "(none)");
  }
}

void printLocalDot(const chorus::LocalTopology& t) {
  printf("graph host {\n  label=\"%s\";\n", t.hostname.c_str());
  for (const chorus::NumaNode& n : t.numaNodes)
    printf("  numa%d [shape=box, label=\"NUMA %d\\ncpus %s\"];\n", n.osIndex, n.osIndex,
           chorus::formatCpuList(n.cpus).c_str());
  std::vector<Device> devs = matrixDevices(t);
  for (const Device& d : devs) {
    printf("  %s [label=\"%s\\n%s\"];\n", d.label.c_str(), d.label.c_str(), d.name.c_str());
    if (d.numa >= 0) printf("  %s -- numa%d [style=dotted];\n", d.label.c_str(), d.numa);
  }
  for (size_t a = 0; a < devs.size(); ++a)
    for (size_t b = a + 1; b < devs.size(); ++b) {
      std::string l = linkText(t, devs[a], devs[b]);
      if (l.rfind("NV", 0) == 0 || l == "PIX")
        printf("  %s -- %s [label=\"%s\"%s];\n", devs[a].label.c_str(), devs[b].label.c_str(),
               l.c_str(), l == "PIX" ? "" : ", penwidth=3");
    }
  printf("}\n");
}

int runLocal(const char* file, bool json, bool dot) {
  chorus::Result<chorus::LocalTopology> topo =
      file != nullptr ? chorus::loadTopologyFile(file) : chorus::localTopologyFromEnvironment();
  if (!topo.isOk()) {
    fprintf(stderr, "chorus-topo: %s\n", topo.status().message().c_str());
    return 1;
  }
  if (json) {
    fputs(chorus::dumpTopology(topo.value()).c_str(), stdout);
  } else if (dot) {
    printLocalDot(topo.value());
  } else {
    chorus::Result<chorus::DevicePathOptions> deviceOptions = chorus::DevicePathOptions();
    if (!topo.value().gpus.empty()) deviceOptions = chorus::devicePathOptionsFromEnv();
    if (!deviceOptions.isOk()) {
      fprintf(stderr, "chorus-topo: %s\n", deviceOptions.status().message().c_str());
      return 1;
    }
    printLocal(topo.value(), deviceOptions.value());
  }
  return 0;
}

int runComm(bool dot) {
  int rank = 0, nranks = 0;
  if (!envInt("CHORUS_RANK", &rank) || !envInt("CHORUS_NRANKS", &nranks) || rank >= nranks) {
    fprintf(stderr,
            "chorus-topo: --comm needs CHORUS_RANK and CHORUS_NRANKS (rank < nranks), e.g. "
            "under chorusrun\n");
    return 2;
  }
  chorus::Result<chorus::UniqueIdInfo> id = chorus::uniqueIdFromEnvironment();
  if (!id.isOk()) {
    fprintf(stderr, "chorus-topo: %s\n", id.status().message().c_str());
    return 2;
  }
  chorus::CommOptions options;
  options.host = true;
  auto comm = chorus::Communicator::create(id.value(), nranks, rank, options);
  if (!comm.isOk()) {
    fprintf(stderr, "chorus-topo: rank %d: %s\n", rank, comm.status().message().c_str());
    return 1;
  }
  if (rank == 0) fputs(comm.value()->topologyReport(dot).c_str(), stdout);
  fflush(stdout);
  chorus::Status s = comm.value()->finalize();
  if (!s.isOk()) {
    fprintf(stderr, "chorus-topo: rank %d: %s\n", rank, s.message().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool comm = false, dot = false, json = false;
  const char* file = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--comm") == 0) {
      comm = true;
    } else if (strcmp(argv[i], "--dot") == 0) {
      dot = true;
    } else if (strcmp(argv[i], "--json") == 0) {
      json = true;
    } else if (strcmp(argv[i], "--file") == 0 && i + 1 < argc) {
      file = argv[++i];
    } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "chorus-topo: unknown option %s\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if ((json && dot) || (comm && (json || file != nullptr))) {
    usage(stderr);
    return 2;
  }
  return comm ? runComm(dot) : runLocal(file, json, dot);
}
