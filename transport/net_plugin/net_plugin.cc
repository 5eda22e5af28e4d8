#include "transport/net_plugin/net_plugin.h"

#include <dlfcn.h>
#include <strings.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "common/log.h"
#include "common/param.h"
#include "chorus_config.h"
#include "transport/net_plugin/net_abi.h"
#if CHORUS_HAVE_IBVERBS
#include "transport/ib/ib_net.h"
#endif
#include "transport/socket/socket_net.h"

namespace chorus {

namespace {

// The plugin's log lines join Chorus's (NET subsystem), at the plugin's level.
void pluginLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                  const char* fmt, ...) {
  (void)flags;
  const LogLevel ours = level <= NCCL_LOG_WARN || level == NCCL_LOG_ABORT ? LogLevel::kWarn
                        : level == NCCL_LOG_INFO                          ? LogLevel::kInfo
                                                                          : LogLevel::kTrace;
  if (level == NCCL_LOG_NONE || !logEnabled(ours, kSubsysNet)) return;
  char text[1024];
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  logWrite(ours, kSubsysNet, file != nullptr ? file : "plugin", line, "plugin: %s", text);
}

// v10 and newer plugins may report events to a profiler; Chorus has none.
ncclResult_t noProfiler(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

Status pluginStatus(ncclResult_t r, const char* what, const char* plugin) {
  if (r == ncclSuccess) return Status::ok();
  const int code = static_cast<int>(r);
  const Code c = code == ncclSystemError       ? Code::kSystemError
                 : code == ncclInvalidArgument ? Code::kInvalidArgument
                 : code == ncclInvalidUsage    ? Code::kInvalidUsage
                 : code == ncclRemoteError     ? Code::kRemoteError
                                               : Code::kInternalError;
  return Status(c, formatString("net plugin %s: %s failed (error %d)", plugin, what, code));
}

#define PLUGIN_CALL(what, call)                                       \
  do {                                                                \
    ncclResult_t r_ = (call);                                         \
    if (r_ != ncclSuccess) return pluginStatus(r_, what, net_->name); \
  } while (0)

// One version's table behind NetPlugin. Net: ncclNet_vN_t; Props: its properties struct.
template <class Net, class Props, int V>
class PluginOf final : public NetPlugin {
 public:
  static constexpr int kMaxGroup = 8;  // the most buffers of a grouped receive NCCL posts

  // The library stays loaded for the process's life (plugins keep threads and state), as NCCL
  // does.
  PluginOf(const Net* net, std::string library) : net_(net), library_(std::move(library)) {}

  Status start() {
    if constexpr (V >= 11) {
      // One context for the process: Chorus loads a plugin once and shares it between its
      // communicators (NCCL makes one per communicator, with the communicator's id). The
      // connection config, given to connect before v11, comes with it.
      ncclNetCommConfig_v11_t config;
      config.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
      PLUGIN_CALL("init", net_->init(&ctx_, 0, &config, pluginLogger, noProfiler));
    } else if constexpr (V >= 10)
      PLUGIN_CALL("init", net_->init(pluginLogger, noProfiler));
    else
      PLUGIN_CALL("init", net_->init(pluginLogger));
    int n = 0;
    PLUGIN_CALL("devices", net_->devices(&n));
    if (n <= 0)
      return invalidUsage("net plugin %s (%s) has no device", net_->name, library_.c_str());
    for (int d = 0; d < n; ++d) map_.push_back(d);
    return fuse();
  }

  // Fuses the groups CHORUS_NET_MERGE gives (by default the ports of one NIC) into virtual
  // devices with makeVDevice; each takes its first member's place in Chorus's numbering and
  // the other members leave it.
  Status fuse() {
    const ParamValue setting = paramRaw("NET_MERGE");
    std::vector<std::string> paths, names;
    for (int d : map_) {
      Props p;
      std::memset(&p, 0, sizeof p);
      PLUGIN_CALL("getProperties", net_->getProperties(d, &p));
      paths.push_back(p.pciPath != nullptr ? p.pciPath : "");
      names.push_back(p.name != nullptr ? p.name : "");
    }
    int maxPerNic = 1;
    if constexpr (V >= 12)
      maxPerNic = NCCL_NET_MAX_DEVS_PER_NIC_V12;
    else if constexpr (V >= 9)
      maxPerNic = NCCL_NET_MAX_DEVS_PER_NIC;
    Result<std::vector<std::vector<int>>> groups =
        netMergeGroups(setting.value, paths, std::max(maxPerNic, 2));
    if (!groups.isOk()) return groups.status();
    if (groups.value().empty()) return Status::ok();
    bool canFuse = false;
    if constexpr (V >= 9) canFuse = net_->makeVDevice != nullptr;
    if (!canFuse) {
      if (setting.isSet)
        return invalidUsage(
            "%s=%s: net plugin %s (ncclNet v%d) cannot fuse devices (no "
            "makeVDevice)",
            setting.source.c_str(), setting.value.c_str(), net_->name, V);
      LOG_INFO(kSubsysNet,
               "net plugin %s (ncclNet v%d) has no makeVDevice: ports of one NIC "
               "stay separate devices",
               net_->name, V);
      return Status::ok();
    }
    if constexpr (V >= 9) {
      using VProps = decltype(Props::vProps);  // what makeVDevice takes, in this version
      std::vector<int> fused = map_;
      for (const std::vector<int>& g : groups.value()) {
        VProps vp;
        std::memset(&vp, 0, sizeof vp);
        vp.ndevs = static_cast<int>(g.size());
        std::string members;
        for (size_t i = 0; i < g.size(); ++i) {
          vp.devs[i] = g[i];
          members += formatString("%s%d (%s)",
                                  i == 0              ? ""
                                  : i + 1 == g.size() ? " and "
                                                      : ", ",
                                  g[i], names[static_cast<size_t>(g[i])].c_str());
        }
        int v = -1;
        const ncclResult_t r = net_->makeVDevice(&v, &vp);
        if (r != ncclSuccess || v < 0) {
          // A group the user named is an error; one Chorus guessed stays apart.
          Status s = r != ncclSuccess ? pluginStatus(r, "makeVDevice", net_->name)
                                      : internalError("net plugin %s: makeVDevice gave device %d",
                                                      net_->name, v);
          s = s.withContext(formatString("fusing devices %s", members.c_str()));
          if (setting.isSet) return s;
          LOG_WARN(kSubsysNet, "%s; they stay separate devices", s.message().c_str());
          continue;
        }
        for (int d : g) fused[static_cast<size_t>(d)] = -1;
        fused[static_cast<size_t>(g[0])] = v;
        LOG_INFO(kSubsysNet, "net plugin %s: devices %s fused into virtual device %d%s", net_->name,
                 members.c_str(), v, setting.isSet ? "" : " (ports of one PCI device)");
      }
      map_.clear();
      for (int d : fused)
        if (d >= 0) map_.push_back(d);
    }
    return Status::ok();
  }

  const char* name() const override { return net_->name; }
  int version() const override { return V; }
  const std::string& library() const override { return library_; }
  int devices() const override { return static_cast<int>(map_.size()); }

  Status properties(int dev, Properties* out) override {
    CHORUS_TRY(toPlugin(&dev));
    Props p;
    std::memset(&p, 0, sizeof p);
    PLUGIN_CALL("getProperties", net_->getProperties(dev, &p));
    out->name = p.name != nullptr ? p.name : "";
    out->speedMbps = p.speed;
    out->maxRecvs = p.maxRecvs;
    out->ptrSupport = p.ptrSupport;
    out->pciPath = p.pciPath != nullptr ? p.pciPath : "";
    if constexpr (V >= 9)
      out->maxMessageBytes = p.maxP2pBytes > 0 ? p.maxP2pBytes : size_t(1) << 30;
    else
      out->maxMessageBytes = size_t(1) << 30;
    if constexpr (V >= 12) {
      out->railId = p.railId;
      out->planeId = p.planeId;
    }
    return Status::ok();
  }

  Status listen(int dev, void* handle, void** listenComm) override {
    *listenComm = nullptr;
    CHORUS_TRY(toPlugin(&dev));
    if constexpr (V >= 11)
      PLUGIN_CALL("listen", net_->listen(ctx_, dev, handle, listenComm));
    else
      PLUGIN_CALL("listen", net_->listen(dev, handle, listenComm));
    if (*listenComm == nullptr)
      return internalError("net plugin %s: listen gave no comm", net_->name);
    return Status::ok();
  }
  Status connect(int dev, void* handle, void** sendComm) override {
    *sendComm = nullptr;
    CHORUS_TRY(toPlugin(&dev));
    ncclNetDeviceHandle_v8_t* devComm = nullptr;  // the same type in every version
    if constexpr (V >= 11) {
      PLUGIN_CALL("connect", net_->connect(ctx_, dev, handle, sendComm, &devComm));
    } else if constexpr (V >= 10) {
      ncclNetCommConfig_v10_t config;
      config.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
      PLUGIN_CALL("connect", net_->connect(dev, &config, handle, sendComm, &devComm));
    } else {
      PLUGIN_CALL("connect", net_->connect(dev, handle, sendComm, &devComm));
    }
    return Status::ok();
  }
  Status accept(void* listenComm, void** recvComm) override {
    *recvComm = nullptr;
    ncclNetDeviceHandle_v8_t* devComm = nullptr;  // the same type in every version
    PLUGIN_CALL("accept", net_->accept(listenComm, recvComm, &devComm));
    return Status::ok();
  }
  Status regMr(void* comm, void* data, size_t size, void** mhandle) override {
    PLUGIN_CALL("regMr", net_->regMr(comm, data, size, NCCL_PTR_HOST, mhandle));
    return Status::ok();
  }
  Status regMrDevice(void* comm, void* data, size_t size, void** mhandle) override {
    PLUGIN_CALL("regMr", net_->regMr(comm, data, size, NCCL_PTR_CUDA, mhandle));
    return Status::ok();
  }
  Status regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                     void** mhandle) override {
    *mhandle = nullptr;
    if (net_->regMrDmaBuf == nullptr)
      return invalidUsage("net plugin %s (ncclNet v%d) has no regMrDmaBuf", net_->name, V);
    PLUGIN_CALL("regMrDmaBuf", net_->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle));
    return Status::ok();
  }
  Status deregMr(void* comm, void* mhandle) override {
    PLUGIN_CALL("deregMr", net_->deregMr(comm, mhandle));
    return Status::ok();
  }
  Status isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    *request = nullptr;
    if constexpr (V >= 10) {
      PLUGIN_CALL("isend", net_->isend(sendComm, data, size, tag, mhandle, nullptr, request));
    } else if constexpr (V == 9) {
      PLUGIN_CALL("isend", net_->isend(sendComm, data, size, tag, mhandle, request));
    } else {
      if (size > static_cast<size_t>(INT_MAX))
        return internalError("net plugin %s: a v8 isend of %zu bytes", net_->name, size);
      PLUGIN_CALL("isend",
                  net_->isend(sendComm, data, static_cast<int>(size), tag, mhandle, request));
    }
    return Status::ok();
  }
  Status irecv(void* recvComm, void* data, size_t size, int tag, void* mhandle,
               void** request) override {
    return irecvGroup(recvComm, 1, &data, &size, &tag, &mhandle, request);
  }
  Status irecvGroup(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                    void** mhandles, void** request) override {
    *request = nullptr;
    if (n < 1 || n > kMaxGroup)
      return internalError("net plugin %s: a grouped receive of %d buffers", net_->name, n);
    int tagv[kMaxGroup];
    std::copy(tags, tags + n, tagv);
    if constexpr (V >= 9) {
      size_t sizev[kMaxGroup];
      std::copy(sizes, sizes + n, sizev);
      if constexpr (V >= 10)
        PLUGIN_CALL("irecv",
                    net_->irecv(recvComm, n, data, sizev, tagv, mhandles, nullptr, request));
      else
        PLUGIN_CALL("irecv", net_->irecv(recvComm, n, data, sizev, tagv, mhandles, request));
    } else {
      int sizev[kMaxGroup];
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > static_cast<size_t>(INT_MAX))
          return internalError("net plugin %s: a v8 irecv of %zu bytes", net_->name, sizes[i]);
        sizev[i] = static_cast<int>(sizes[i]);
      }
      PLUGIN_CALL("irecv", net_->irecv(recvComm, n, data, sizev, tagv, mhandles, request));
    }
    return Status::ok();
  }
  Status test(void* request, bool* done, size_t* size) override {
    return testGroup(request, 1, done, size);
  }
  Status testGroup(void* request, int n, bool* done, size_t* sizes) override {
    if (n < 1 || n > kMaxGroup)
      return internalError("net plugin %s: a test of %d sizes", net_->name, n);
    int d = 0;
    int sizev[kMaxGroup] = {};
    PLUGIN_CALL("test", net_->test(request, &d, sizev));
    *done = d != 0;
    if (*done && sizes != nullptr)
      for (int i = 0; i < n; ++i) sizes[i] = sizev[i] < 0 ? 0 : static_cast<size_t>(sizev[i]);
    return Status::ok();
  }
  Status iflush(void* recvComm, int n, void** data, const size_t* sizes, void** mhandles,
                void** request) override {
    *request = nullptr;
    if (n < 1 || n > kMaxGroup)
      return internalError("net plugin %s: a flush of %d buffers", net_->name, n);
    if (net_->iflush == nullptr)
      return invalidUsage("net plugin %s (ncclNet v%d) has no iflush", net_->name, V);
    int sizev[kMaxGroup];
    for (int i = 0; i < n; ++i) {
      if (sizes[i] > static_cast<size_t>(INT_MAX))
        return internalError("net plugin %s: a flush of %zu bytes", net_->name, sizes[i]);
      sizev[i] = static_cast<int>(sizes[i]);
    }
    PLUGIN_CALL("iflush", net_->iflush(recvComm, n, data, sizev, mhandles, request));
    return Status::ok();
  }
  bool flushesDevice() const override { return net_->iflush != nullptr; }
  Status closeSend(void* c) override {
    PLUGIN_CALL("closeSend", net_->closeSend(c));
    return Status::ok();
  }
  Status closeRecv(void* c) override {
    PLUGIN_CALL("closeRecv", net_->closeRecv(c));
    return Status::ok();
  }
  Status closeListen(void* c) override {
    PLUGIN_CALL("closeListen", net_->closeListen(c));
    return Status::ok();
  }

 private:
  // Chorus's device index to the plugin's (virtual devices in place of their members).
  Status toPlugin(int* dev) const {
    if (*dev < 0 || *dev >= static_cast<int>(map_.size()))
      return internalError("net plugin %s: no device %d", net_->name, *dev);
    *dev = map_[static_cast<size_t>(*dev)];
    return Status::ok();
  }

  const Net* net_;
  std::string library_;
  std::vector<int> map_;
  void* ctx_ = nullptr;  // v11 and v12: what init gave, for listen and connect (the process's life)
};

#undef PLUGIN_CALL

template <class Net, class Props, int V>
Result<std::unique_ptr<NetPlugin>> startPlugin(void* table, const std::string& path) {
  std::unique_ptr<PluginOf<Net, Props, V>> p(
      new PluginOf<Net, Props, V>(static_cast<const Net*>(table), path));
  CHORUS_TRY(p->start());
  return std::unique_ptr<NetPlugin>(p.release());
}

bool looksLikeFile(const std::string& s) {
  if (s.find('/') != std::string::npos) return true;
  const size_t n = s.size();
  return s.compare(0, 3, "lib") == 0 && n > 6 && s.compare(n - 3, 3, ".so") == 0;
}

}  // namespace

Result<std::vector<std::vector<int>>> netMergeGroups(const std::string& value,
                                                     const std::vector<std::string>& pciPaths,
                                                     int maxPerNic) {
  const int n = static_cast<int>(pciPaths.size());
  std::vector<std::vector<int>> groups;
  if (value.empty() || strcasecmp(value.c_str(), "auto") == 0) {
    std::vector<bool> taken(pciPaths.size(), false);
    for (int d = 0; d < n; ++d) {
      if (taken[d] || pciPaths[d].empty()) continue;
      std::vector<int> g{d};
      for (int e = d + 1; e < n && static_cast<int>(g.size()) < maxPerNic; ++e)
        if (!taken[e] && pciPaths[e] == pciPaths[d]) {
          g.push_back(e);
          taken[e] = true;
        }
      if (g.size() >= 2) groups.push_back(g);
    }
    return groups;
  }
  if (strcasecmp(value.c_str(), "none") == 0 || value == "0") return groups;
  std::vector<bool> taken(pciPaths.size(), false);
  const char* p = value.c_str();
  while (*p != '\0') {
    std::vector<int> g;
    while (true) {
      char* end = nullptr;
      errno = 0;
      const long d = strtol(p, &end, 10);
      if (end == p || errno != 0)
        return invalidArgument("CHORUS_NET_MERGE=%s: \"%s\" is not a device index", value.c_str(),
                               p);
      if (d < 0 || d >= n)
        return invalidArgument(
            "CHORUS_NET_MERGE=%s: device %ld does not exist (the plugin has "
            "%d)",
            value.c_str(), d, n);
      if (taken[d])
        return invalidArgument("CHORUS_NET_MERGE=%s: device %ld is in two groups", value.c_str(),
                               d);
      taken[d] = true;
      g.push_back(static_cast<int>(d));
      p = end;
      if (*p != ',') break;
      ++p;
    }
    if (*p != '\0' && *p != ';')
      return invalidArgument("CHORUS_NET_MERGE=%s: \"%s\" is neither ',' nor ';'", value.c_str(),
                             p);
    if (g.size() < 2 || static_cast<int>(g.size()) > maxPerNic)
      return invalidArgument("CHORUS_NET_MERGE=%s: a group of %zu devices (2 to %d)", value.c_str(),
                             g.size(), maxPerNic);
    groups.push_back(g);
    if (*p == ';') ++p;
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

int netDeviceNumaNode(const std::string& pciPath) {
  if (pciPath.empty()) return -1;
  FILE* f = fopen((pciPath + "/numa_node").c_str(), "re");
  if (f == nullptr) return -1;
  int node = -1;
  if (fscanf(f, "%d", &node) != 1) node = -1;
  fclose(f);
  return node < 0 ? -1 : node;
}

std::string netDeviceBusId(const std::string& pciPath) {
  auto lastName = [](std::string path) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    return normalizePciBusId(slash == std::string::npos ? path : path.substr(slash + 1));
  };
  if (pciPath.empty()) return "";
  std::string bus = lastName(pciPath);
  if (!bus.empty()) return bus;
  char resolved[PATH_MAX];
  return realpath(pciPath.c_str(), resolved) != nullptr ? lastName(resolved) : "";
}

std::vector<int> gpuNearNetDevices(const LocalTopology& topo, const std::string& gpuBusId,
                                   const std::vector<std::string>& deviceBusIds,
                                   PciDistance* distance) {
  std::vector<int> near;
  PciDistance best = PciDistance::kPxb;  // the farthest that counts as near
  for (int d = 0; d < static_cast<int>(deviceBusIds.size()); ++d) {
    const std::string& bus = deviceBusIds[static_cast<size_t>(d)];
    if (bus.empty() || gpuBusId.empty()) continue;
    const PciDistance dist = pciDistance(topo, gpuBusId, bus);
    if (dist > best || dist == PciDistance::kSelf) continue;
    if (dist < best) near.clear();
    best = dist;
    near.push_back(d);
  }
  if (distance != nullptr) *distance = near.empty() ? PciDistance::kUnknown : best;
  return near;
}

std::vector<int> nearNetDevices(const std::vector<int>& deviceNodes, int node) {
  std::vector<int> near, all;
  for (int d = 0; d < static_cast<int>(deviceNodes.size()); ++d) {
    all.push_back(d);
    if (node >= 0 && deviceNodes[d] == node) near.push_back(d);
  }
  return near.empty() ? all : near;
}

NetDeviceChoice chooseNetDevices(const std::vector<int>& deviceNodes,
                                 const std::vector<std::string>& deviceBusIds,
                                 const LocalTopology* topo, int node, const std::string& gpuBusId) {
  NetDeviceChoice c;
  const bool placed = paramInt("NET_NUMA_DEVICES") != 0;
  if (placed && topo != nullptr && !gpuBusId.empty())
    c.devices = gpuNearNetDevices(*topo, gpuBusId, deviceBusIds, &c.gpuDistance);
  c.nearGpu = !c.devices.empty();
  if (!c.nearGpu) {
    c.node = placed ? node : -1;
    c.devices = nearNetDevices(deviceNodes, c.node);
  }
  if (c.devices.empty()) c.devices.push_back(0);
  return c;
}

std::vector<std::string> netPluginCandidates(const char* value) {
  std::vector<std::string> out;
  if (value == nullptr) {
    out.push_back("libnccl-net.so");
    return out;
  }
  std::string list(value);
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string entry = list.substr(start, comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.erase(entry.begin());
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    start = comma + 1;
    if (entry.empty() || strcasecmp(entry.c_str(), "none") == 0) continue;
    out.push_back(entry);
    if (!looksLikeFile(entry)) out.push_back("libnccl-net-" + entry + ".so");
  }
  return out;
}

Result<std::unique_ptr<NetPlugin>> loadNetPlugin(const std::string& library) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    return invalidUsage("cannot load %s: %s", library.c_str(), why != nullptr ? why : "?");
  }
  Result<std::unique_ptr<NetPlugin>> p = invalidUsage(
      "%s exports no ncclNetPlugin_v12, _v11, _v10, _v9 or _v8 (Chorus speaks net plugin "
      "versions 8 to 12)",
      library.c_str());
  if (void* t12 = dlsym(lib, "ncclNetPlugin_v12"))
    p = startPlugin<ncclNet_v12_t, ncclNetProperties_v12_t, 12>(t12, library);
  else if (void* t11 = dlsym(lib, "ncclNetPlugin_v11"))
    p = startPlugin<ncclNet_v11_t, ncclNetProperties_v11_t, 11>(t11, library);
  else if (void* t = dlsym(lib, "ncclNetPlugin_v10"))
    p = startPlugin<ncclNet_v10_t, ncclNetProperties_v10_t, 10>(t, library);
  else if (void* t9 = dlsym(lib, "ncclNetPlugin_v9"))
    p = startPlugin<ncclNet_v9_t, ncclNetProperties_v9_t, 9>(t9, library);
  else if (void* t8 = dlsym(lib, "ncclNetPlugin_v8"))
    p = startPlugin<ncclNet_v8_t, ncclNetProperties_v8_t, 8>(t8, library);
  // A library whose plugin cannot be used stays loaded: its init may have started threads.
  return p;
}

namespace {

std::string& noIbReason() {
  static std::string reason;
  return reason;
}

// The IB network over verbs where Chorus was built with them and NCCL_IB_DISABLE is not 1.
Result<NetPlugin*> builtinIbNet() {
#if CHORUS_HAVE_IBVERBS
  if (paramInt("IB_DISABLE") == 1)
    return invalidUsage("%s=1 turns it off", paramRaw("IB_DISABLE").source.c_str());
  Result<const VerbsApi*> verbs = processVerbs();
  if (!verbs.isOk()) return verbs.status();
  Result<std::unique_ptr<NetPlugin>> net = makeIbNet(verbs.value());
  if (!net.isOk()) return net.status();
  return net.take().release();  // lives as long as the process
#else
  return invalidUsage("this build of Chorus has no verbs support (built without libibverbs-dev)");
#endif
}

// Chorus's sockets: null (the socket transport), or the socket network behind the plugin
// interface where CHORUS_SOCKET_NET asks for it.
Result<NetPlugin*> chorusSockets() {
  if (paramInt("SOCKET_NET") == 0) return static_cast<NetPlugin*>(nullptr);
  Result<std::unique_ptr<NetPlugin>> net = makeSocketNet();
  if (!net.isOk()) return net.status();
  NetPlugin* p = net.take().release();  // lives as long as the process
  LOG_INFO(kSubsysNet | kSubsysInit, "using the socket network, %d device(s)", p->devices());
  return p;
}

// The network chosen, and a warning where CHORUS_SOCKET_NET=1 asked for the socket network
// that another network (a plugin, IB) then took the place of.
Result<NetPlugin*> chooseNetwork();

Result<NetPlugin*> choosePlugin() {
  const int64_t socketNet = paramInt("SOCKET_NET");
  if (socketNet != 0 && socketNet != 1)
    return invalidArgument("%s=%lld is not 0 (the socket transport) or 1 (the socket network)",
                           paramRaw("SOCKET_NET").source.c_str(),
                           static_cast<long long>(socketNet));
  Result<NetPlugin*> chosen = chooseNetwork();
  if (chosen.isOk() && socketNet == 1 && chosen.value() != nullptr &&
      strcmp(chosen.value()->name(), kSocketNetName) != 0)
    LOG_WARN(kSubsysNet | kSubsysInit,
             "%s=1: the socket network is not used: %s carries the links between hosts "
             "(NCCL_NET=Socket insists on sockets)",
             paramRaw("SOCKET_NET").source.c_str(), chosen.value()->name());
  return chosen;
}

Result<NetPlugin*> chooseNetwork() {
  const ParamValue setting = paramRaw("NET_PLUGIN");
  const ParamValue net = paramRaw("NET");
  if (net.isSet && strcasecmp(net.value.c_str(), "socket") == 0) return chorusSockets();
  std::vector<std::string> candidates =
      netPluginCandidates(setting.isSet ? setting.value.c_str() : nullptr);
  std::string tried;
  for (const std::string& lib : candidates) {
    Result<std::unique_ptr<NetPlugin>> p = loadNetPlugin(lib);
    if (!p.isOk()) {
      // The default name, and a bare name's first spelling, are only guesses.
      LOG_INFO(kSubsysNet, "net plugin: %s", p.status().message().c_str());
      tried += (tried.empty() ? "" : "; ") + p.status().message();
      continue;
    }
    NetPlugin* plugin = p.take().release();  // lives as long as the process
    if (net.isSet && strcasecmp(net.value.c_str(), plugin->name()) != 0) {
      LOG_INFO(kSubsysNet, "net plugin %s (%s) is not %s=%s", plugin->name(), lib.c_str(),
               net.source.c_str(), net.value.c_str());
      continue;
    }
    LOG_INFO(kSubsysNet | kSubsysInit, "using net plugin %s (ncclNet v%d) from %s, %d device(s)",
             plugin->name(), plugin->version(), lib.c_str(), plugin->devices());
    return plugin;
  }
  if (setting.isSet && !candidates.empty() && !net.isSet)
    return invalidUsage("%s=%s: no usable net plugin: %s", setting.source.c_str(),
                        setting.value.c_str(), tried.c_str());
  // Chorus's own verbs network, unless another was asked for.
  const bool wantIb = net.isSet && strcasecmp(net.value.c_str(), "IB") == 0;
  if (!net.isSet || wantIb) {
    Result<NetPlugin*> ib = builtinIbNet();
    if (ib.isOk()) {
      LOG_INFO(kSubsysNet | kSubsysInit, "using the IB network (verbs from %s), %d device(s)",
               ib.value()->library().c_str(), ib.value()->devices());
      return ib;
    }
    if (wantIb)
      return invalidArgument("%s=IB: the IB network cannot be used: %s", net.source.c_str(),
                             ib.status().message().c_str());
    LOG_INFO(kSubsysNet, "no IB network: %s", ib.status().message().c_str());
    noIbReason() = ib.status().message();
  }
  if (net.isSet)
    return invalidArgument("%s=%s: no such network (a loaded net plugin's name, IB or Socket)%s%s",
                           net.source.c_str(), net.value.c_str(), tried.empty() ? "" : ": ",
                           tried.c_str());
  return chorusSockets();
}

}  // namespace

std::string whyNoIbNetwork() {
  (void)processNetPlugin();
  return noIbReason();
}

Result<NetPlugin*> processNetPlugin() {
  // Chosen once: plugins are initialised once per process.
  static std::once_flag once;
  static Result<NetPlugin*> chosen = static_cast<NetPlugin*>(nullptr);
  std::call_once(once, [] { chosen = choosePlugin(); });
  return chosen;
}

}  // namespace chorus
