#include "common/param.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "common/log.h"

namespace chorus {

namespace {

// The one list of Chorus's knobs. Keep it sorted by area; chorus-info --params prints it.
const std::vector<ParamDef> kParams = {
    // Logging
    {"DEBUG", ParamType::kString, "", "Log level: WARN, INFO or TRACE (empty: errors only)", true},
    {"DEBUG_SUBSYS", ParamType::kString, "INIT,ENV",
     "Comma list of subsystems to log "
     "(INIT,COLL,P2P,SHM,NET,BOOTSTRAP,ENV,TUNING,PROXY,GRAPH,ALL); "
     "^ in front excludes them",
     true},
    {"DEBUG_FILE", ParamType::kString, "",
     "Write the log to this file instead of stderr; %h expands to the host, %p to the pid", true},
    // Bootstrap
    {"COMM_ID", ParamType::kString, "",
     "host:port of the rendezvous; when set every process derives the same unique id from it and "
     "rank 0 listens there",
     true},
    {"COMM_SECRET", ParamType::kString, "",
     "Shared secret for a COMM_ID rendezvous; connections without it are dropped", false},
    {"INIT_TIMEOUT", ParamType::kInt, "120",
     "Seconds to wait for all ranks to join at init before failing with the missing ranks", false},
    {"TIMEOUT", ParamType::kInt, "600",
     "Seconds any wait for a peer may last before the operation fails (0: wait forever)", false},
    {"PEER_WATCH_MS", ParamType::kInt, "100",
     "Milliseconds between looks at whether the ranks on this host are still there (a lock "
     "each holds that goes with its process); a rank that is gone fails the communicator's "
     "calls at once instead of after TIMEOUT (0: no watch)",
     false},
    {"DUMP", ParamType::kString, "",
     "Directory for dumps of pending operations: a rank whose collective fails (timeout, "
     "failed peer, mismatch) writes what it waited for there, and SIGUSR1 makes every "
     "communicator of the process write one; tools/chorus-waitfor reads them (empty: no dumps, "
     "no signal handler)",
     false},
    {"CHECK_CALLS", ParamType::kInt, "1",
     "Compare every collective and send/recv with the peers' (collective, count, type, "
     "operation, root, order) on the data they exchange; ranks that disagree fail with both "
     "calls named instead of hanging or mixing data (0: off)",
     false},
    // Network
    {"SOCKET_IFNAME", ParamType::kString, "",
     "Interfaces for sockets: prefix list (eth,ens), ^ to exclude, = for exact names", true},
    {"SOCKET_FAMILY", ParamType::kString, "", "AF_INET or AF_INET6 to force an address family",
     true},
    {"SOCKET_BUFFSIZE", ParamType::kInt, "4194304",
     "SO_SNDBUF/SO_RCVBUF of data sockets (0: OS default)", false},
    {"SOCKET_LINK_MBPS", ParamType::kInt, "0",
     "Speed of this rank's link to other hosts (Mb/s) for the cost model, in place of what its "
     "interface reports (a virtual one, veth or bridge, reports none; a shaped or shared link "
     "carries less than it says); the slowest rank's counts; 0: as reported",
     false},
    {"SOCKET_NSTREAMS", ParamType::kInt, "1",
     "TCP connections per socket connector (1..16): messages of 64 KiB and more are striped "
     "over them; the receiving rank's value is used",
     false},
    {"SOCKET_NET", ParamType::kInt, "0",
     "1: ranks on different hosts talk through Chorus's sockets behind the net plugin "
     "interface (the socket network, driven by the net transport as a plugin is); 0: through "
     "the socket transport",
     false},
    {"IB_GID_INDEX", ParamType::kInt, "-1",
     "GID index of RoCE ports (-1: the lowest of the RoCE version and address family asked for)",
     true},
    {"IB_ROCE_VERSION_NUM", ParamType::kInt, "2", "RoCE version whose GIDs are preferred (1 or 2)",
     true},
    {"IB_ADDR_FAMILY", ParamType::kString, "AF_INET",
     "address family of the RoCE GIDs preferred: AF_INET or AF_INET6", true},
    {"NET_PLUGIN", ParamType::kString, "",
     "NCCL net plugin to load: a name X (libnccl-net-X.so), a file name or path, a comma "
     "separated list of these tried in order, or none (unset: libnccl-net.so when there is one); "
     "ranks on different hosts then talk through it instead of Chorus's sockets",
     true},
    {"NET", ParamType::kString, "",
     "Network to use between hosts, by name: a loaded plugin's name, IB for Chorus's verbs "
     "transport, or Socket for its TCP transport (unset: the plugin when one loaded, else IB "
     "when an HCA port is active, else Socket)",
     true},
    {"NET_NUMA_DEVICES", ParamType::kInt, "1",
     "1: a rank's channels take the network devices below its GPU's PCIe switch (device "
     "communicators), else those on its NUMA node (all when none is); 0: "
     "channel c takes device c mod devices on every rank, so both ends of a link use the same "
     "device index (fabrics whose rails do not reach each other)",
     false},
    {"NET_MERGE", ParamType::kString, "auto",
     "Devices of a net plugin fused into virtual NICs (makeVDevice, ncclNet v9 and newer): "
     "auto, the devices that share a PCI path (the ports of one NIC); none; or groups of device "
     "indices, \"0,1;2,3\"",
     false},
    {"NET_GROUPED_RECVS", ParamType::kInt, "1",
     "1: a slot's header and data are received as one grouped receive where the plugin's "
     "device takes them (maxRecvs 2 or more); 0: as two receives",
     false},
    {"NET_PLACE_SLOTS", ParamType::kInt, "1",
     "1: device links through a net plugin send from and receive into the device FIFO's own "
     "memory where the plugin reaches it (host memory; GPU memory with NCCL_PTR_CUDA or as a "
     "dma-buf), so the proxy copies no Simple slot; 0: through the transport's own buffers",
     false},
    {"NET_GDR_LEVEL", ParamType::kString, "",
     "GPUDirect RDMA: farthest apart a rank's GPU and its network devices may be for the "
     "network to move device links' slots in GPU memory: LOC (never), PIX, PXB, PHB or SYS "
     "(any, also unknown), or NCCL's numbers 0-5 (empty: PXB)",
     true},
    {"NET_GDR_READ", ParamType::kInt, "1",
     "1: within NET_GDR_LEVEL, device links' sends leave from GPU memory too; 0: receives only "
     "land in GPU memory, sends go from pinned host memory",
     true},
    {"IB_DISABLE", ParamType::kInt, "0",
     "1: never use the InfiniBand/RoCE network (Chorus's verbs transport), even where HCAs are "
     "active",
     true},
    {"IB_QPS_PER_CONNECTION", ParamType::kInt, "1",
     "Queue pairs per IB connection (1..16): each message is split over them", true},
    {"IB_TIMEOUT", ParamType::kInt, "20",
     "IB local ACK timeout exponent (1..31): 4.096 us * 2^value before a packet is resent", true},
    {"IB_RETRY_CNT", ParamType::kInt, "7", "IB transport retries before a send fails (0..7)", true},
    {"IB_SL", ParamType::kInt, "0", "InfiniBand service level of the queue pairs (0..15)", true},
    {"IB_TC", ParamType::kInt, "0", "Traffic class of RoCE packets (0..255)", true},
    {"IB_ADAPTIVE_ROUTING", ParamType::kInt, "0",
     "1: IB data as plain RDMA writes followed by a zero-byte write with immediate, as adaptive "
     "routing (packets out of order) needs; 0: one write with immediate per queue pair",
     true},
    {"IB_PEER_MEMORY", ParamType::kInt, "-1",
     "GPU memory registered with the HCA by its address (NCCL_PTR_CUDA) through a peer memory "
     "module: -1 where /sys shows nvidia-peermem or nv_peer_mem loaded, 0 never (dma-bufs "
     "only), 1 always",
     false},
    {"IB_VERBS_LIBRARY", ParamType::kString, "libibverbs.so.1",
     "The verbs library the IB network loads (another rdma-core build, or a stand-in)", false},
    {"IB_HCA", ParamType::kString, "",
     "InfiniBand HCA ports to use: name or name:port prefixes, comma separated; = for exact "
     "names, ^ to exclude",
     true},
    // Shared memory
    {"SHM_DISABLE", ParamType::kInt, "0",
     "1: never use shared memory, even between ranks on one host", true},
    {"P2P_DISABLE", ParamType::kInt, "0",
     "1: no peer-to-peer (CUDA IPC, peer access, NVLink) between different GPUs of a device "
     "communicator; shared memory instead",
     true},
    {"DEVICE_HOST_LINKS", ParamType::kInt, "0",
     "1: every link of a device communicator goes through host memory and a proxy thread (shared "
     "memory, or sockets with SHM_DISABLE), even between ranks on one GPU or with peer access",
     false},
    {"P2P_LEVEL", ParamType::kString, "",
     "Farthest apart two GPUs may be for peer-to-peer: LOC (never), NVL (NVLink only), PIX, PXB, "
     "PHB or SYS (PCIe distances), or NCCL's numbers 0-5 (empty: PXB)",
     true},
    // Host communicators
    {"HOST_COMM", ParamType::kInt, "-1",
     "1: communicators run on host memory; 0: require a CUDA device; -1: host when no CUDA device "
     "is "
     "usable",
     false},
    {"HOSTID", ParamType::kString, "",
     "Override the host identity used to group ranks on one host (and on one machine)", false},
    // Data path
    {"BUFFSIZE", ParamType::kInt, "1048576",
     "Bytes of each connector FIFO (split into STEPS slots)", true},
    {"STEPS", ParamType::kInt, "8", "Slots per connector FIFO", false},
    {"SPIN_COUNT", ParamType::kInt, "-1",
     "Polls a waiting thread spins before it yields its core and then sleeps (-1: 2000, or 20 "
     "when a host has more ranks than cores)",
     false},
    {"STREAM_BYTES", ParamType::kInt, "-1",
     "Ring collectives whose output is at least this large write it with non-temporal stores "
     "(0: never; -1: half the last-level cache, at least 4 MiB)",
     false},
    {"SLOT_STREAM", ParamType::kInt, "-1",
     "How a rank writes what peers on its host read next (FIFO slots, direct all-reduce "
     "buffers): -1 whichever measures faster, cached stores or streaming stores that bypass the "
     "writer's caches (faster for a reader on a distant core); 0 always cached; 1 always "
     "streaming",
     false},
    {"SPIN_YIELD_US", ParamType::kInt, "1000",
     "After spinning, microseconds a waiting thread keeps polling while yielding its core "
     "(to a peer waiting for it) before it sleeps",
     false},
    // Topology
    {"TOPO_FILE", ParamType::kString, "",
     "Read the local topology from this Chorus JSON topology file instead of detecting it", true},
    {"TOPO_DUMP_FILE", ParamType::kString, "",
     "Write the detected (or loaded) local topology to this file as Chorus topology JSON", true},
    // Algorithm selection (the cost model picks when these are unset)
    {"TUNING_FILE", ParamType::kString, "",
     "Cost model figures for the algorithm selector, from `chorus-tune --calibrate` (empty: the "
     "built-in figures); a file that cannot be read fails communicator init",
     false},
    {"ALGO", ParamType::kString, "",
     "Algorithms the selector may use: comma list of ring, tree, oneshot, twoshot, direct "
     "(both direct ones), rd, hier; ^ in front excludes them",
     true},
    {"COMPRESS", ParamType::kString, "none",
     "Compressed all-reduce: float32/float64 sum and average all-reduces of host communicators "
     "send bf16, or fp8 e4m3 with a scale per 256 values, with error feedback per send buffer "
     "(none, bf16, fp8); lossy, the same bits on every rank",
     false},
    {"DEVICE_CHANNELS", ParamType::kInt, "16",
     "Ring channels a device communicator connects (1..32); each collective kernel runs one "
     "block per channel",
     false},
    {"DEVICE_DIRECT_BUFFSIZE", ParamType::kInt, "65536",
     "Bytes of each direct all-reduce buffer of a device communicator per channel (six per "
     "channel and rank: staging, LL staging and results, two each); a multiple of 256 up to "
     "16 MiB, 0: no direct all-reduce on the device",
     false},
    {"DEVICE_THREADS", ParamType::kInt, "512",
     "Threads of each block of a device communicator's kernels (64..512, a multiple of 32)", false},
    {"PROTO", ParamType::kString, "",
     "Protocols device communicators may use: comma list of LL, Simple (LL128 is accepted and "
     "has no effect); ^ in front excludes them",
     true},
    {"MIN_CHANNELS", ParamType::kInt, "1",
     "Fewest parallel rings (channels, each driven by its own thread) a ring collective uses",
     true},
    {"MAX_CHANNELS", ParamType::kInt, "16", "Most parallel rings a ring collective may use", true},
    {"DIRECT_BUFFSIZE", ParamType::kInt, "262144",
     "Staging bytes per rank of the direct (oneshot/twoshot) all-reduce, per chunk", false},
    {"WINDOW", ParamType::kInt, "1",
     "1: all-reduce, all-gather, reduce-scatter and broadcast whose buffers lie in windows "
     "(ncclCommWindowRegister over ncclMemAlloc memory, ranks on one host) read the peers' "
     "buffers in place, unless ALGO is set; 0: they run the usual algorithms",
     false},
    {"WINDOW_INPLACE_BYTES", ParamType::kInt, "-1",
     "Smallest window all-reduce that some rank makes in place (so that each rank overwrites "
     "what its peers read from it) to read the buffers in place; smaller ones run the usual "
     "algorithms (-1: none does)",
     false},
    {"WINDOW_MIN_BYTES", ParamType::kInt, "16384",
     "Smallest call (nccl-tests size) that reads window buffers in place; smaller ones run the "
     "usual algorithms",
     false},
};

std::mutex gWarnMutex;
std::set<std::string>* gWarned = nullptr;  // names already warned about (leaked on purpose)

const ParamDef* findParam(const char* name) {
  for (const ParamDef& p : kParams)
    if (strcmp(p.name, name) == 0) return &p;
  return nullptr;
}

void warnOnce(const std::string& key, const std::string& text) {
  std::lock_guard<std::mutex> lock(gWarnMutex);
  if (gWarned == nullptr) gWarned = new std::set<std::string>();
  if (!gWarned->insert(key).second) return;
  LOG_WARN(kSubsysEnv, "%s", text.c_str());
}

}  // namespace

const std::vector<ParamDef>& paramTable() {
  return kParams;
}

ParamValue paramRaw(const char* name) {
  const ParamDef* def = findParam(name);
  if (def == nullptr) return {"", "unknown", false};
  std::string chorusName = std::string("CHORUS_") + name;
  if (const char* v = getenv(chorusName.c_str())) return {v, chorusName, true};
  if (def->ncclAlias) {
    std::string ncclName = std::string("NCCL_") + name;
    if (const char* v = getenv(ncclName.c_str())) return {v, ncclName, true};
  }
  return {def->defaultValue, "default", false};
}

int64_t paramInt(const char* name) {
  const ParamDef* def = findParam(name);
  ParamValue raw = paramRaw(name);
  int64_t fallback = def != nullptr ? strtoll(def->defaultValue, nullptr, 0) : 0;
  if (!raw.isSet) return fallback;
  errno = 0;
  char* end = nullptr;
  long long v = strtoll(raw.value.c_str(), &end, 0);
  if (errno != 0 || end == raw.value.c_str() || *end != '\0') {
    warnOnce(raw.source, raw.source + "=\"" + raw.value +
                             "\" is not an integer; using the default " + def->defaultValue);
    return fallback;
  }
  return v;
}

std::string paramString(const char* name) {
  return paramRaw(name).value;
}

}  // namespace chorus
