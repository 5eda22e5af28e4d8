// Discovery of the local topology: CPUs, NUMA and PCI from hwloc (or /sys without it), network
// interfaces and InfiniBand HCAs from /sys, GPUs from the CUDA driver and NVML when installed.
#pragma once

#include <string>

#include "common/status.h"
#include "topo/topology.h"

namespace chorus {

struct DiscoverOptions {
  // Where sysfs is mounted. Tests point it at a fake tree; anything but "/sys" also turns hwloc
  // off, since hwloc only ever reads the real machine.
  std::string sysRoot = "/sys";
  // Builds with hwloc use it for CPUs, caches, NUMA and PCI (honouring HWLOC_XMLFILE and
  // HWLOC_SYNTHETIC); false reads those from sysRoot instead.
  bool useHwloc = true;
  // Loads libcuda.so.1 (and libnvidia-ml.so.1 for NVLink) to list GPUs; no driver means no GPUs.
  bool probeGpus = true;
  // Fills interface addresses from getifaddrs() (addresses of the running network namespace).
  bool readAddresses = true;
};

// Looks at the machine. Missing optional /sys files and absent drivers leave fields unknown or
// lists empty; only a failure to describe the CPUs at all is an error.
Result<LocalTopology> discoverLocalTopology(const DiscoverOptions& options = DiscoverOptions());

// The topology a communicator should use: CHORUS_TOPO_FILE (alias NCCL_TOPO_FILE) when set, else
// discovery; then, when CHORUS_TOPO_DUMP_FILE is set, written there. Errors name the variable.
Result<LocalTopology> localTopologyFromEnvironment();

}  // namespace chorus
