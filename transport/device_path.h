// Which transport a pair of ranks of a device (GPU) communicator uses, decided from the local
// topology and the P2P/SHM parameters. Plain data in, plain data out: no CUDA, no I/O, so both
// ranks of a pair, and tests, reach the same verdict from the same data.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "common/status.h"
#include "topo/topology.h"

namespace chorus {

enum class DevicePathKind {
  kP2pSameGpu,  // both ranks on one GPU: one address space in a process, else CUDA IPC handles
  kP2pNvlink,   // GPUs joined by NVLink, directly or through NVSwitches
  kP2pPcie,     // peer access over PCIe, the GPUs within the P2P level
  kP2pStaged,   // no peer access: copy engines move data through a CUDA IPC staging buffer
  kShm,         // pinned host shared memory
  kSocket,      // TCP: other host, or neither P2P nor shared memory allowed
};
// "P2P/same-GPU", "P2P/NVLink", "P2P/PCIe", "P2P/staged", "SHM", "NET/socket".
const char* devicePathName(DevicePathKind kind);

// NCCL_P2P_LEVEL's scale: how far apart two GPUs may be for peer-to-peer. LOC: never between
// GPUs; NVL: over NVLink only; PIX, PXB, PHB, SYS: also over PCIe up to that pciDistance, where
// PHB covers NODE too (NCCL counts any path through one NUMA node's CPU as PHB).
enum class P2pLevel { kLoc, kNvl, kPix, kPxb, kPhb, kSys };
const char* p2pLevelName(P2pLevel level);  // "LOC", "NVL", ...
// The farthest PCI distance at which a level allows a path over PCIe (kSelf: none).
PciDistance farthestPcieDistance(P2pLevel level);

// What a rank tells its peers about where it runs; exchanged as bytes, hence POD.
struct DeviceEndpoint {
  uint64_t hostId;  // topo/host_id.h
  int32_t pid;
  int32_t cudaDev;  // CUDA ordinal in its process
  char busId[16];   // "dddd:bb:dd.f", NUL-padded; empty when unknown
};
static_assert(std::is_trivially_copyable<DeviceEndpoint>::value &&
                  std::is_standard_layout<DeviceEndpoint>::value,
              "DeviceEndpoint travels between ranks as bytes");
// An endpoint with the bus id normalised (normalizePciBusId; empty when it is not a bus id).
DeviceEndpoint makeDeviceEndpoint(uint64_t hostId, int32_t pid, int32_t cudaDev,
                                  const std::string& busId);

struct DevicePathOptions {
  bool p2pDisabled = false;  // P2P_DISABLE: no peer-to-peer between different GPUs
  bool shmDisabled = false;  // SHM_DISABLE
  bool hostLinks = false;    // DEVICE_HOST_LINKS: no P2P at all, every pair through host memory
  P2pLevel p2pLevel = P2pLevel::kPxb;
};

struct DevicePath {
  DevicePathKind kind = DevicePathKind::kSocket;
  // Both ranks on one GPU in different processes: their kernels run in separate CUDA contexts,
  // which the GPU time-slices unless MPS runs, so a kernel spinning on the other may never see
  // it progress. The caller refuses or picks a path that does not spin.
  bool crossContext = false;
  std::string reason;  // one line, e.g. "GPU0 and GPU1 share 12 NVLinks"
};

// The transport between endpoints a and b; the same for (a, b) and (b, a), reason included.
// `topo` is the host's topology, consulted only when both are on that host. GPUs are found in
// topo.gpus by bus id, or by CUDA ordinal when an endpoint has none. Same GPU: same host and bus
// id, or without bus ids the same process and ordinal; it stays P2P/same-GPU whatever the
// options (no peer access is involved; NCCL too keeps P2P at level LOC). A GPU the topology
// lacks has no known peer access: staged when the P2P level allows PCIe.
DevicePath chooseDevicePath(const LocalTopology& topo, const DeviceEndpoint& a,
                            const DeviceEndpoint& b, const DevicePathOptions& options);

// Parses a P2P level: LOC, NVL, PIX, PXB, PHB or SYS in any case, or NCCL's legacy numbers 0-5
// (LOC, PIX, PXB, PHB, SYS, SYS). Anything else is an invalid argument naming `source` (e.g.
// "CHORUS_P2P_LEVEL") and the accepted values.
Result<P2pLevel> parseP2pLevel(const std::string& text, const std::string& source);
// P2P_DISABLE, SHM_DISABLE and P2P_LEVEL (unset or empty: PXB) from the environment.
Result<DevicePathOptions> devicePathOptionsFromEnv();

}  // namespace chorus
