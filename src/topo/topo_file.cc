#include "topo/topo_file.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>
#include <sstream>

#include "topo/json.h"

namespace chorus {

namespace {

using json::Kind;
using json::Value;

// ---------------------------------------------------------------------------------------------
// Writing

std::string hex16(unsigned v) {
  char buf[8];
  snprintf(buf, sizeof(buf), "0x%04x", v & 0xffffu);
  return buf;
}

Value str(const std::string& s) {
  return Value::makeString(s);
}

Value integer(int64_t i) {
  return Value::makeInt(i);
}

Value dumpPci(const PciDevice& d) {
  Value upstream = Value::makeArray();
  for (const std::string& b : d.upstream) upstream.push(str(b));
  Value v = Value::makeObject();
  v.add("bus_id", str(d.busId))
      .add("vendor_id", str(hex16(d.vendorId)))
      .add("device_id", str(hex16(d.deviceId)))
      .add("class", str(hex16(d.classCode)))
      .add("numa_node", integer(d.numaNode))
      .add("link_width", integer(d.linkWidth))
      .add("link_speed_gts", Value::makeDouble(d.linkSpeedGts))
      .add("upstream", std::move(upstream))
      .add("host_bridge", str(d.hostBridge));
  return v;
}

Value dumpNet(const NetInterface& n) {
  Value addresses = Value::makeArray();
  for (const NetAddress& a : n.addresses) {
    Value entry = Value::makeObject();
    entry.add("family", str(a.family == AddressFamily::kIpv4 ? "ipv4" : "ipv6"))
        .add("address", str(a.address))
        .add("prefix", integer(a.prefixLength));
    addresses.push(std::move(entry));
  }
  Value v = Value::makeObject();
  v.add("name", str(n.name))
      .add("up", Value::makeBool(n.up))
      .add("speed_mbps", integer(n.speedMbps))
      .add("mtu", integer(n.mtu))
      .add("addresses", std::move(addresses))
      .add("pci_bus_id", str(n.pciBusId))
      .add("numa_node", integer(n.numaNode))
      .add("loopback", Value::makeBool(n.loopback))
      .add("virtual", Value::makeBool(n.isVirtual));
  return v;
}

Value dumpIb(const IbDevice& d) {
  Value ports = Value::makeArray();
  for (const IbPort& p : d.ports) {
    Value gids = Value::makeArray();
    for (const IbGid& g : p.gids) {
      Value entry = Value::makeObject();
      entry.add("index", integer(g.index)).add("gid", str(g.gid));
      if (!g.type.empty()) entry.add("type", str(g.type));
      gids.push(std::move(entry));
    }
    Value port = Value::makeObject();
    port.add("port", integer(p.port))
        .add("state", str(p.state))
        .add("rate_gbps", Value::makeDouble(p.rateGbps))
        .add("link_layer", str(p.linkLayer))
        .add("gids", std::move(gids));
    ports.push(std::move(port));
  }
  Value v = Value::makeObject();
  v.add("name", str(d.name))
      .add("node_guid", str(d.nodeGuid))
      .add("pci_bus_id", str(d.pciBusId))
      .add("numa_node", integer(d.numaNode))
      .add("ports", std::move(ports));
  return v;
}

Value dumpGpu(const Gpu& g) {
  Value p2p = Value::makeArray();
  for (bool b : g.p2p) p2p.push(Value::makeBool(b));
  Value nvlinks = Value::makeArray();
  for (int n : g.nvlinks) nvlinks.push(integer(n));
  Value v = Value::makeObject();
  v.add("index", integer(g.index))
      .add("name", str(g.name))
      .add("pci_bus_id", str(g.pciBusId))
      .add("numa_node", integer(g.numaNode))
      .add("p2p", std::move(p2p))
      .add("nvlinks", std::move(nvlinks))
      .add("nvswitch_links", integer(g.nvswitchLinks));
  return v;
}

// ---------------------------------------------------------------------------------------------
// Reading

struct Source {
  const std::string& name;
};

Status errorAt(const Source& src, const Value& at, const std::string& path,
               const std::string& message) {
  if (path.empty())
    return invalidUsage("%s:%d:%d: %s", src.name.c_str(), at.line, at.column, message.c_str());
  return invalidUsage("%s:%d:%d: %s: %s", src.name.c_str(), at.line, at.column, path.c_str(),
                      message.c_str());
}

// "0x" followed by 1..maxDigits hex digits.
bool parseHex(const std::string& text, size_t maxDigits, uint64_t* out) {
  if (text.size() < 3 || text.size() > maxDigits + 2 || text[0] != '0' ||
      (text[1] != 'x' && text[1] != 'X'))
    return false;
  uint64_t v = 0;
  for (size_t i = 2; i < text.size(); ++i) {
    char c = static_cast<char>(tolower(static_cast<unsigned char>(text[i])));
    if (!isxdigit(static_cast<unsigned char>(c))) return false;
    v = (v << 4) | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  *out = v;
  return true;
}

std::string describeFound(const Value& v) {
  if (v.kind == Kind::kNumber && !v.isInteger) return "a non-integer number";
  if (v.kind == Kind::kString) return "the string \"" + v.text + "\"";
  return json::kindName(v.kind);
}

// Reads the members of one object, checking types and rejecting unknown keys.
class ObjectReader {
 public:
  ObjectReader(const Source& src, const Value& obj, std::string path)
      : src_(src), obj_(obj), path_(std::move(path)) {}

  Status checkKeys(std::initializer_list<const char*> allowed) const {
    for (const auto& m : obj_.members) {
      bool known = false;
      for (const char* k : allowed) known = known || m.first == k;
      if (known) continue;
      std::string list;
      for (const char* k : allowed) list += std::string(list.empty() ? "" : ", ") + k;
      return errorAt(src_, m.second, keyPath(m.first.c_str()),
                     "unknown key (expected one of: " + list + ")");
    }
    return Status::ok();
  }

  std::string keyPath(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

  // The member, nullptr when absent; an error when absent and required.
  Status member(const char* key, bool required, Kind kind, const Value** out) const {
    *out = obj_.find(key);
    if (*out == nullptr) {
      if (!required) return Status::ok();
      return errorAt(src_, obj_, keyPath(key), "required key is missing");
    }
    if ((*out)->kind != kind)
      return errorAt(
          src_, **out, keyPath(key),
          std::string("expected ") + json::kindName(kind) + " but found " + describeFound(**out));
    return Status::ok();
  }

  Status getInt(const char* key, bool required, int64_t min, int64_t max, int64_t* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kNumber, &v));
    if (v == nullptr) return Status::ok();
    return checkInt(*v, keyPath(key), min, max, out);
  }

  Status checkInt(const Value& v, const std::string& path, int64_t min, int64_t max,
                  int64_t* out) const {
    if (v.kind != Kind::kNumber || !v.isInteger)
      return errorAt(src_, v, path, "expected an integer but found " + describeFound(v));
    if (v.integer < min || v.integer > max)
      return errorAt(src_, v, path,
                     formatString("%" PRId64 " is out of range (%" PRId64 "..%" PRId64 ")",
                                  v.integer, min, max));
    *out = v.integer;
    return Status::ok();
  }

  template <class T>
  Status getIntAs(const char* key, bool required, int64_t min, int64_t max, T* out) const {
    int64_t v = static_cast<int64_t>(*out);
    CHORUS_TRY(getInt(key, required, min, max, &v));
    *out = static_cast<T>(v);
    return Status::ok();
  }

  Status getNumber(const char* key, bool required, double* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kNumber, &v));
    if (v == nullptr) return Status::ok();
    if (v->number < 0) return errorAt(src_, *v, keyPath(key), "must not be negative");
    *out = v->number;
    return Status::ok();
  }

  Status getString(const char* key, bool required, std::string* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kString, &v));
    if (v != nullptr) *out = v->text;
    return Status::ok();
  }

  Status getBool(const char* key, bool required, bool* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kBool, &v));
    if (v != nullptr) *out = v->boolean;
    return Status::ok();
  }

  Status getHex16(const char* key, uint16_t* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, true, Kind::kString, &v));
    uint64_t n = 0;
    if (!parseHex(v->text, 4, &n))
      return errorAt(src_, *v, keyPath(key),
                     "\"" + v->text + "\" is not a 16-bit hex number (expected e.g. \"0x10de\")");
    *out = static_cast<uint16_t>(n);
    return Status::ok();
  }

  Status getBusId(const char* key, bool required, std::string* out) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kString, &v));
    if (v == nullptr || (!required && v->text.empty())) return Status::ok();  // "": none
    return checkBusId(*v, keyPath(key), out);
  }

  Status checkBusId(const Value& v, const std::string& path, std::string* out) const {
    std::string lower;
    for (char c : v.text)
      lower.push_back(static_cast<char>(tolower(static_cast<unsigned char>(c))));
    if (!isPciBusId(lower))
      return errorAt(src_, v, path,
                     "\"" + v.text + "\" is not a PCI bus id (expected dddd:bb:dd.f in hex)");
    *out = lower;
    return Status::ok();
  }

  // Calls fn(item, "<path>.key[i]") for each item of an array member.
  Status forEach(const char* key, bool required,
                 const std::function<Status(const Value&, const std::string&)>& fn) const {
    const Value* v = nullptr;
    CHORUS_TRY(member(key, required, Kind::kArray, &v));
    if (v == nullptr) return Status::ok();
    for (size_t i = 0; i < v->items.size(); ++i)
      CHORUS_TRY(fn(v->items[i], keyPath(key) + "[" + std::to_string(i) + "]"));
    return Status::ok();
  }

  const Value& object() const { return obj_; }

 private:
  const Source& src_;
  const Value& obj_;
  std::string path_;
};

// Array elements that stand for records must be objects.
Status objectAt(const Source& src, const Value& v, const std::string& path) {
  if (v.kind == Kind::kObject) return Status::ok();
  return errorAt(src, v, path, "expected an object but found " + describeFound(v));
}

class TopologyReader {
 public:
  explicit TopologyReader(const Source& src) : src_(src) {}

  Result<LocalTopology> read(const Value& root) {
    if (root.kind != Kind::kObject)
      return errorAt(src_, root, "",
                     "expected an object at the top level but found " + describeFound(root));
    ObjectReader top(src_, root, "");
    if (root.find("chorus_topology") == nullptr)
      return invalidUsage("%s: not a Chorus topology file (the key \"chorus_topology\" is missing)",
                          src_.name.c_str());
    int64_t version = 0;
    CHORUS_TRY(top.getInt("chorus_topology", true, INT64_MIN, INT64_MAX, &version));
    if (version != kTopologyFileVersion)
      return errorAt(src_, *root.find("chorus_topology"), "chorus_topology",
                     formatString("version %" PRId64 " is not supported (this build reads %d)",
                                  version, kTopologyFileVersion));
    CHORUS_TRY(top.checkKeys({"chorus_topology", "hostname", "host_id", "source", "cpu_model",
                              "cores", "pus", "packages", "numa_nodes", "caches", "pci_devices",
                              "net_interfaces", "ib_devices", "gpus"}));
    LocalTopology t;
    CHORUS_TRY(top.getString("hostname", true, &t.hostname));
    CHORUS_TRY(readHostId(top, &t.hostId));
    CHORUS_TRY(top.getString("source", false, &t.source));
    CHORUS_TRY(top.getString("cpu_model", false, &t.cpuModel));
    CHORUS_TRY(top.getIntAs("cores", true, 0, INT32_MAX, &t.cores));
    CHORUS_TRY(top.getIntAs("pus", true, 0, INT32_MAX, &t.pus));
    // NUMA nodes first: everything else refers to them.
    CHORUS_TRY(top.forEach("numa_nodes", true, [&](const Value& v, const std::string& path) {
      return readNuma(v, path, &t);
    }));
    CHORUS_TRY(top.forEach("packages", true, [&](const Value& v, const std::string& path) {
      return readPackage(v, path, &t);
    }));
    CHORUS_TRY(top.forEach("caches", false, [&](const Value& v, const std::string& path) {
      return readCache(v, path, &t);
    }));
    CHORUS_TRY(top.forEach("pci_devices", false, [&](const Value& v, const std::string& path) {
      return readPci(v, path, &t);
    }));
    CHORUS_TRY(top.forEach("net_interfaces", false, [&](const Value& v, const std::string& path) {
      return readNet(v, path, &t);
    }));
    CHORUS_TRY(top.forEach("ib_devices", false, [&](const Value& v, const std::string& path) {
      return readIb(v, path, &t);
    }));
    const Value* gpus = root.find("gpus");
    size_t gpuCount = gpus != nullptr && gpus->kind == Kind::kArray ? gpus->items.size() : 0;
    CHORUS_TRY(top.forEach("gpus", false, [&](const Value& v, const std::string& path) {
      return readGpu(v, path, gpuCount, &t);
    }));
    return t;
  }

 private:
  Status readHostId(const ObjectReader& top, uint64_t* out) {
    std::string text;
    CHORUS_TRY(top.getString("host_id", false, &text));
    if (!text.empty() && !parseHex(text, 16, out))
      return errorAt(src_, *top.object().find("host_id"), "host_id",
                     "\"" + text +
                         "\" is not a 64-bit hex number (expected \"0x\" and 1 to 16 "
                         "hex digits)");
    return Status::ok();
  }

  Status cpuList(const ObjectReader& r, const std::string& path, std::vector<int>* out) {
    std::string text;
    CHORUS_TRY(r.getString("cpus", true, &text));
    if (!parseCpuList(text, out))
      return errorAt(src_, *r.object().find("cpus"), path + ".cpus",
                     "\"" + text + "\" is not a cpulist (expected e.g. \"0-15,32-47\")");
    return Status::ok();
  }

  Status numaRef(const ObjectReader& r, const LocalTopology& t, int* out) {
    CHORUS_TRY(r.getIntAs("numa_node", false, -1, INT32_MAX, out));
    if (*out < 0 || findNumaNode(t, *out) != nullptr) return Status::ok();
    std::string known;
    for (const NumaNode& n : t.numaNodes)
      known += (known.empty() ? "" : ", ") + std::to_string(n.osIndex);
    return errorAt(src_, *r.object().find("numa_node"), r.keyPath("numa_node"),
                   formatString("NUMA node %d does not exist (numa_nodes has %s)", *out,
                                known.empty() ? "none" : known.c_str()));
  }

  Status unique(std::set<std::string>* seen, const std::string& name, const ObjectReader& r,
                const char* key) {
    if (seen->insert(name).second) return Status::ok();
    return errorAt(src_, *r.object().find(key), r.keyPath(key),
                   "\"" + name + "\" appears more than once");
  }

  Status readNuma(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"os_index", "cpus", "memory_bytes"}));
    NumaNode n;
    CHORUS_TRY(r.getIntAs("os_index", true, 0, INT32_MAX, &n.osIndex));
    CHORUS_TRY(cpuList(r, path, &n.cpus));
    CHORUS_TRY(r.getIntAs("memory_bytes", true, 0, INT64_MAX, &n.memoryBytes));
    if (findNumaNode(*t, n.osIndex) != nullptr)
      return errorAt(src_, *v.find("os_index"), path + ".os_index",
                     formatString("NUMA node %d appears more than once", n.osIndex));
    t->numaNodes.push_back(std::move(n));
    return Status::ok();
  }

  Status readPackage(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"os_index", "cpus"}));
    CpuPackage p;
    CHORUS_TRY(r.getIntAs("os_index", true, 0, INT32_MAX, &p.osIndex));
    CHORUS_TRY(cpuList(r, path, &p.cpus));
    for (const CpuPackage& other : t->packages)
      if (other.osIndex == p.osIndex)
        return errorAt(src_, *v.find("os_index"), path + ".os_index",
                       formatString("package %d appears more than once", p.osIndex));
    t->packages.push_back(std::move(p));
    return Status::ok();
  }

  Status readCache(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"level", "type", "size_bytes", "shared_by_pus", "count"}));
    CacheSummary c;
    CHORUS_TRY(r.getIntAs("level", true, 1, 5, &c.level));
    CHORUS_TRY(r.getString("type", true, &c.type));
    if (c.type != "data" && c.type != "instruction" && c.type != "unified")
      return errorAt(src_, *v.find("type"), path + ".type",
                     "\"" + c.type +
                         "\" is not a cache type (expected data, instruction or "
                         "unified)");
    CHORUS_TRY(r.getIntAs("size_bytes", true, 0, INT64_MAX, &c.sizeBytes));
    CHORUS_TRY(r.getIntAs("shared_by_pus", true, 0, INT32_MAX, &c.sharedByPus));
    CHORUS_TRY(r.getIntAs("count", true, 0, INT32_MAX, &c.count));
    t->caches.push_back(std::move(c));
    return Status::ok();
  }

  Status readPci(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"bus_id", "vendor_id", "device_id", "class", "numa_node", "link_width",
                            "link_speed_gts", "upstream", "host_bridge"}));
    PciDevice d;
    CHORUS_TRY(r.getBusId("bus_id", true, &d.busId));
    CHORUS_TRY(unique(&pciSeen_, d.busId, r, "bus_id"));
    CHORUS_TRY(r.getHex16("vendor_id", &d.vendorId));
    CHORUS_TRY(r.getHex16("device_id", &d.deviceId));
    CHORUS_TRY(r.getHex16("class", &d.classCode));
    CHORUS_TRY(numaRef(r, *t, &d.numaNode));
    CHORUS_TRY(r.getIntAs("link_width", false, -1, 32, &d.linkWidth));
    CHORUS_TRY(r.getNumber("link_speed_gts", false, &d.linkSpeedGts));
    CHORUS_TRY(r.forEach("upstream", false, [&](const Value& item, const std::string& p) {
      std::string bus;
      if (item.kind != Kind::kString)
        return errorAt(src_, item, p, "expected a string but found " + describeFound(item));
      CHORUS_TRY(r.checkBusId(item, p, &bus));
      d.upstream.push_back(bus);
      return Status::ok();
    }));
    CHORUS_TRY(r.getString("host_bridge", false, &d.hostBridge));
    if (!d.hostBridge.empty()) {
      // A root bus "dddd:bb" is a bus id without its device and function.
      std::string probe = normalizePciBusId(d.hostBridge + ":00.0");
      if (d.hostBridge.size() != 7 || probe.empty())
        return errorAt(src_, *v.find("host_bridge"), path + ".host_bridge",
                       "\"" + d.hostBridge + "\" is not a root bus (expected dddd:bb in hex)");
      d.hostBridge = probe.substr(0, 7);
    }
    t->pciDevices.push_back(std::move(d));
    return Status::ok();
  }

  Status readAddress(const Value& v, const std::string& path, NetInterface* n) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"family", "address", "prefix"}));
    NetAddress a;
    std::string family;
    CHORUS_TRY(r.getString("family", true, &family));
    if (family != "ipv4" && family != "ipv6")
      return errorAt(src_, *v.find("family"), path + ".family",
                     "\"" + family + "\" is not an address family (expected ipv4 or ipv6)");
    a.family = family == "ipv4" ? AddressFamily::kIpv4 : AddressFamily::kIpv6;
    CHORUS_TRY(r.getString("address", true, &a.address));
    unsigned char buf[16];
    if (inet_pton(a.family == AddressFamily::kIpv4 ? AF_INET : AF_INET6, a.address.c_str(), buf) !=
        1)
      return errorAt(src_, *v.find("address"), path + ".address",
                     "\"" + a.address + "\" is not a numeric " + family + " address");
    CHORUS_TRY(r.getIntAs("prefix", true, 0, a.family == AddressFamily::kIpv4 ? 32 : 128,
                          &a.prefixLength));
    n->addresses.push_back(std::move(a));
    return Status::ok();
  }

  Status readNet(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"name", "up", "speed_mbps", "mtu", "addresses", "pci_bus_id",
                            "numa_node", "loopback", "virtual"}));
    NetInterface n;
    CHORUS_TRY(r.getString("name", true, &n.name));
    CHORUS_TRY(unique(&netSeen_, n.name, r, "name"));
    CHORUS_TRY(r.getBool("up", true, &n.up));
    CHORUS_TRY(r.getInt("speed_mbps", false, -1, INT64_MAX, &n.speedMbps));
    CHORUS_TRY(r.getIntAs("mtu", false, 0, INT32_MAX, &n.mtu));
    CHORUS_TRY(r.forEach("addresses", false, [&](const Value& a, const std::string& p) {
      return readAddress(a, p, &n);
    }));
    CHORUS_TRY(r.getBusId("pci_bus_id", false, &n.pciBusId));
    CHORUS_TRY(numaRef(r, *t, &n.numaNode));
    CHORUS_TRY(r.getBool("loopback", false, &n.loopback));
    CHORUS_TRY(r.getBool("virtual", false, &n.isVirtual));
    t->netInterfaces.push_back(std::move(n));
    return Status::ok();
  }

  Status readPort(const Value& v, const std::string& path, IbDevice* d) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"port", "state", "rate_gbps", "link_layer", "gids"}));
    IbPort p;
    CHORUS_TRY(r.getIntAs("port", true, 1, 255, &p.port));
    CHORUS_TRY(r.getString("state", true, &p.state));
    CHORUS_TRY(r.getNumber("rate_gbps", false, &p.rateGbps));
    CHORUS_TRY(r.getString("link_layer", true, &p.linkLayer));
    if (p.linkLayer != "InfiniBand" && p.linkLayer != "Ethernet")
      return errorAt(src_, *v.find("link_layer"), path + ".link_layer",
                     "\"" + p.linkLayer +
                         "\" is not a link layer (expected InfiniBand or "
                         "Ethernet)");
    CHORUS_TRY(r.forEach("gids", false, [&](const Value& g, const std::string& gp) {
      CHORUS_TRY(objectAt(src_, g, gp));
      ObjectReader gr(src_, g, gp);
      CHORUS_TRY(gr.checkKeys({"index", "gid", "type"}));
      IbGid gid;
      CHORUS_TRY(gr.getIntAs("index", true, 0, INT32_MAX, &gid.index));
      CHORUS_TRY(gr.getString("gid", true, &gid.gid));
      CHORUS_TRY(gr.getString("type", false, &gid.type));
      unsigned char buf[16];
      if (inet_pton(AF_INET6, gid.gid.c_str(), buf) != 1)
        return errorAt(src_, *g.find("gid"), gp + ".gid",
                       "\"" + gid.gid + "\" is not a GID (expected 8 groups of 4 hex digits)");
      p.gids.push_back(std::move(gid));
      return Status::ok();
    }));
    d->ports.push_back(std::move(p));
    return Status::ok();
  }

  Status readIb(const Value& v, const std::string& path, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys({"name", "node_guid", "pci_bus_id", "numa_node", "ports"}));
    IbDevice d;
    CHORUS_TRY(r.getString("name", true, &d.name));
    CHORUS_TRY(unique(&ibSeen_, d.name, r, "name"));
    CHORUS_TRY(r.getString("node_guid", false, &d.nodeGuid));
    CHORUS_TRY(r.getBusId("pci_bus_id", false, &d.pciBusId));
    CHORUS_TRY(numaRef(r, *t, &d.numaNode));
    CHORUS_TRY(r.forEach(
        "ports", true, [&](const Value& p, const std::string& pp) { return readPort(p, pp, &d); }));
    t->ibDevices.push_back(std::move(d));
    return Status::ok();
  }

  Status readGpu(const Value& v, const std::string& path, size_t gpuCount, LocalTopology* t) {
    CHORUS_TRY(objectAt(src_, v, path));
    ObjectReader r(src_, v, path);
    CHORUS_TRY(r.checkKeys(
        {"index", "name", "pci_bus_id", "numa_node", "p2p", "nvlinks", "nvswitch_links"}));
    Gpu g;
    CHORUS_TRY(r.getIntAs("index", true, 0, INT32_MAX, &g.index));
    if (static_cast<size_t>(g.index) != t->gpus.size())
      return errorAt(src_, *v.find("index"), path + ".index",
                     formatString("is %d but must equal the position in the array (%zu)", g.index,
                                  t->gpus.size()));
    CHORUS_TRY(r.getString("name", true, &g.name));
    CHORUS_TRY(r.getBusId("pci_bus_id", true, &g.pciBusId));
    CHORUS_TRY(numaRef(r, *t, &g.numaNode));
    g.p2p.assign(gpuCount, false);
    g.nvlinks.assign(gpuCount, 0);
    for (const char* key : {"p2p", "nvlinks"}) {
      const Value* list = v.find(key);
      if (list != nullptr && list->kind == Kind::kArray && list->items.size() != gpuCount)
        return errorAt(
            src_, *list, r.keyPath(key),
            formatString("has %zu entries but there are %zu GPUs", list->items.size(), gpuCount));
    }
    size_t i = 0;
    CHORUS_TRY(r.forEach("p2p", false, [&](const Value& item, const std::string& p) {
      if (item.kind != Kind::kBool)
        return errorAt(src_, item, p, "expected a boolean but found " + describeFound(item));
      g.p2p[i++] = item.boolean;
      return Status::ok();
    }));
    i = 0;
    CHORUS_TRY(r.forEach("nvlinks", false, [&](const Value& item, const std::string& p) {
      int64_t links = 0;
      CHORUS_TRY(r.checkInt(item, p, 0, 64, &links));
      g.nvlinks[i++] = static_cast<int>(links);
      return Status::ok();
    }));
    CHORUS_TRY(r.getIntAs("nvswitch_links", false, 0, 64, &g.nvswitchLinks));
    t->gpus.push_back(std::move(g));
    return Status::ok();
  }

  const Source& src_;
  std::set<std::string> pciSeen_;
  std::set<std::string> netSeen_;
  std::set<std::string> ibSeen_;
};

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

}  // namespace

std::string dumpTopology(const LocalTopology& t) {
  Value packages = Value::makeArray();
  for (const CpuPackage& p : t.packages) {
    Value v = Value::makeObject();
    v.add("os_index", integer(p.osIndex)).add("cpus", str(formatCpuList(p.cpus)));
    packages.push(std::move(v));
  }
  Value numa = Value::makeArray();
  for (const NumaNode& n : t.numaNodes) {
    Value v = Value::makeObject();
    v.add("os_index", integer(n.osIndex))
        .add("cpus", str(formatCpuList(n.cpus)))
        .add("memory_bytes", integer(static_cast<int64_t>(n.memoryBytes)));
    numa.push(std::move(v));
  }
  Value caches = Value::makeArray();
  for (const CacheSummary& c : t.caches) {
    Value v = Value::makeObject();
    v.add("level", integer(c.level))
        .add("type", str(c.type))
        .add("size_bytes", integer(static_cast<int64_t>(c.sizeBytes)))
        .add("shared_by_pus", integer(c.sharedByPus))
        .add("count", integer(c.count));
    caches.push(std::move(v));
  }
  Value pci = Value::makeArray();
  for (const PciDevice& d : t.pciDevices) pci.push(dumpPci(d));
  Value nets = Value::makeArray();
  for (const NetInterface& n : t.netInterfaces) nets.push(dumpNet(n));
  Value ibs = Value::makeArray();
  for (const IbDevice& d : t.ibDevices) ibs.push(dumpIb(d));
  Value gpus = Value::makeArray();
  for (const Gpu& g : t.gpus) gpus.push(dumpGpu(g));

  Value root = Value::makeObject();
  root.add("chorus_topology", integer(kTopologyFileVersion))
      .add("hostname", str(t.hostname))
      .add("host_id", str(formatString("0x%016" PRIx64, t.hostId)))
      .add("source", str(t.source))
      .add("cpu_model", str(t.cpuModel))
      .add("cores", integer(t.cores))
      .add("pus", integer(t.pus))
      .add("packages", std::move(packages))
      .add("numa_nodes", std::move(numa))
      .add("caches", std::move(caches))
      .add("pci_devices", std::move(pci))
      .add("net_interfaces", std::move(nets))
      .add("ib_devices", std::move(ibs))
      .add("gpus", std::move(gpus));
  return json::write(root);
}

Result<LocalTopology> parseTopology(const std::string& text, const std::string& sourceName) {
  Value root;
  json::ParseError error;
  if (!json::parse(text, &root, &error))
    return invalidUsage("%s:%d:%d: malformed JSON: %s", sourceName.c_str(), error.line,
                        error.column, error.message.c_str());
  Source src{sourceName};
  return TopologyReader(src).read(root);
}

Result<LocalTopology> loadTopologyFile(const std::string& path) {
  FILE* f = fopen(path.c_str(), "r");
  if (f == nullptr) return errnoError(errno, "cannot read topology file " + path);
  std::string text;
  char buf[65536];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (err != 0) return errnoError(err, "cannot read topology file " + path);
  return parseTopology(text, path);
}

Status dumpTopologyFile(const LocalTopology& topo, const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::string text = dumpTopology(topo);
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) return errnoError(errno, "cannot write topology file " + path);
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  int err = errno;
  if (fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp.c_str());
    return errnoError(err, "cannot write topology file " + path);
  }
  return Status::ok();
}

std::string describeTopologyDifference(const LocalTopology& a, const LocalTopology& b) {
  std::vector<std::string> la = splitLines(dumpTopology(a));
  std::vector<std::string> lb = splitLines(dumpTopology(b));
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string& x = i < la.size() ? la[i] : std::string("<end>");
    const std::string& y = i < lb.size() ? lb[i] : std::string("<end>");
    if (x != y) return "line " + std::to_string(i + 1) + ": " + x + " vs " + y;
  }
  return "";
}

}  // namespace chorus
