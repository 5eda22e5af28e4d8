// Values read from the environment, as any user may set them: the first byte picks the parser,
// the rest is the value. Every value gives an answer or an error, never a fault; what succeeds
// keeps its promises (a parsed address prints and parses back to itself, a filter selects only
// what exists, an algorithm or protocol set is not empty).
#include <cstdlib>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/log.h"
#include "common/param.h"
#include "common/socket.h"
#include "cuda/dev_plan.h"
#include "fuzz.h"
#include "topo/hca_filter.h"

namespace {

std::vector<chorus::InterfaceAddress> someInterfaces() {
  std::vector<chorus::InterfaceAddress> all;
  const char* names[] = {"lo", "eth0", "eth1", "ib0", "docker0", "ens5f1"};
  const char* addrs[] = {"127.0.0.1",   "10.0.0.2",   "10.1.0.2",
                         "192.168.7.1", "172.17.0.1", "[fd00::5]"};
  for (int i = 0; i < 6; ++i) {
    chorus::Result<chorus::SocketAddress> a =
        chorus::SocketAddress::parse(addrs[i] + std::string(":0"));
    if (!a.isOk()) continue;
    chorus::InterfaceAddress ia{};
    ia.name = names[i];
    ia.addr = a.value().storage();
    ia.netmask = a.value().storage();
    ia.family = a.value().storage().ss_family;
    ia.loopback = i == 0;
    all.push_back(ia);
  }
  return all;
}

chorus::LocalTopology someHcas() {
  chorus::LocalTopology t;
  for (int d = 0; d < 2; ++d) {
    chorus::IbDevice dev;
    dev.name = "mlx5_" + std::to_string(d);
    for (int p = 1; p <= 2 - d; ++p) {
      chorus::IbPort port;
      port.port = p;
      port.state = "ACTIVE";
      dev.ports.push_back(port);
    }
    t.ibDevices.push_back(dev);
  }
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 7;
  const std::string value(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (kind) {
    case 0: {  // CHORUS_COMM_ID
      chorus::Result<chorus::SocketAddress> a = chorus::SocketAddress::parse(value);
      if (!a.isOk()) break;
      chorus::Result<chorus::SocketAddress> back =
          chorus::SocketAddress::parse(a.value().toString());
      FUZZ_CHECK(back.isOk());
      FUZZ_CHECK(back.value() == a.value());
      break;
    }
    case 1: {  // CHORUS_SOCKET_IFNAME (and SOCKET_FAMILY from the same bytes)
      static const std::vector<chorus::InterfaceAddress> all = someInterfaces();
      chorus::Result<std::vector<chorus::InterfaceAddress>> picked = chorus::selectInterfaces(
          all, value, "CHORUS_SOCKET_IFNAME", size % 3 == 0 ? value : "", "CHORUS_SOCKET_FAMILY");
      if (picked.isOk())
        for (const chorus::InterfaceAddress& ia : picked.value()) {
          bool known = false;
          for (const chorus::InterfaceAddress& x : all) known = known || x.name == ia.name;
          FUZZ_CHECK(known);
        }
      break;
    }
    case 2: {  // CHORUS_IB_HCA
      static const chorus::LocalTopology topo = someHcas();
      chorus::Result<std::vector<chorus::HcaPort>> ports =
          chorus::selectHcaPorts(topo, value, "CHORUS_IB_HCA");
      if (ports.isOk()) FUZZ_CHECK(ports.value().size() <= 3);
      break;
    }
    case 3: {  // CHORUS_ALGO
      chorus::Result<chorus::AlgorithmMask> m = chorus::parseAlgorithmList(value, "CHORUS_ALGO");
      (void)m;
      break;
    }
    case 4: {  // CHORUS_PROTO
      chorus::Result<chorus::dev::ProtoMask> m = chorus::dev::parseProtoList(value, "CHORUS_PROTO");
      (void)m;
      break;
    }
    case 5: {  // CHORUS_DEBUG and CHORUS_DEBUG_SUBSYS
      const int level = chorus::parseLogLevel(value);
      FUZZ_CHECK(level >= 0 && level <= 3);
      (void)chorus::parseLogSubsys(value);
      break;
    }
    default: {  // any integer knob
      if (value.find('\0') != std::string::npos) break;
      setenv("CHORUS_STEPS", value.c_str(), 1);
      (void)chorus::paramInt("STEPS");
      unsetenv("CHORUS_STEPS");
      break;
    }
  }
  return 0;
}
