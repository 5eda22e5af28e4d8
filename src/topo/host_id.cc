#include "topo/host_id.h"

#include <unistd.h>

#include <fstream>

#include "common/param.h"

namespace chorus {

namespace {

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// FNV-1a: stable across processes and builds, which std::hash does not promise.
uint64_t hashText(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string localHostIdText() {
  std::string over = paramString("HOSTID");
  if (!over.empty()) return "override:" + over;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  if (n < 0) n = 0;
  ns[n] = '\0';
  return std::string(host) + "|" + readFirstLine("/proc/sys/kernel/random/boot_id") + "|" + ns;
}

uint64_t localHostId() {
  return hashText(localHostIdText());
}

uint64_t localMachineId() {
  if (!paramString("HOSTID").empty()) return localHostId();
  const std::string boot = readFirstLine("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) return localHostId();
  return hashText("machine|" + boot);
}

}  // namespace chorus
