// Device transport choice per pair of ranks (transport/device_path.h) over the topology fixtures:
// same GPU (one process, two processes), NVLink, PCIe within and beyond the P2P level, staged
// without peer access, the P2P_DISABLE/SHM_DISABLE fallbacks, other hosts, GPUs the topology
// lacks, symmetry, and parsing P2P_LEVEL.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/status.h"
#include "topo/topo_file.h"
#include "topo/topology.h"
#include "transport/device_path.h"

namespace chorus {
namespace {

LocalTopology loadFixture(const std::string& name) {
  Result<LocalTopology> r = loadTopologyFile(std::string(CHORUS_TOPO_FIXTURES) + "/" + name);
  EXPECT_TRUE(r.isOk()) << r.status().message();
  return r.isOk() ? r.take() : LocalTopology();
}

// dual_socket_4gpu_2nic.json: GPU0/GPU1 (0000:18/19) share a PCIe switch (PIX) on NUMA 0 and
// GPU2/GPU3 (0000:cd/ce) on NUMA 1; each pair has 12 NVLinks and peer access, nothing across
// the sockets (SYS).
LocalTopology dualSocket() {
  return loadFixture("dual_socket_4gpu_2nic.json");
}

// The same machine without its NVLink bridges, so its pairs go over PCIe.
LocalTopology dualSocketPcie() {
  LocalTopology t = dualSocket();
  for (Gpu& g : t.gpus) g.nvlinks.assign(t.gpus.size(), 0);
  return t;
}

// nvlink_8gpu.json without its NVSwitches: GPU0/GPU1 are PIX, GPU0/GPU2 sit under different root
// complexes of NUMA 0 (NODE), GPU0/GPU4 are on different sockets (SYS); all have peer access.
LocalTopology dgxPcie() {
  LocalTopology t = loadFixture("nvlink_8gpu.json");
  for (Gpu& g : t.gpus) g.nvswitchLinks = 0;
  return t;
}

// One rank per GPU of `t`, each in its own process.
DeviceEndpoint rankOn(const LocalTopology& t, int gpu, int pid = -1) {
  return makeDeviceEndpoint(t.hostId, pid >= 0 ? pid : 100 + gpu, gpu, t.gpus[gpu].pciBusId);
}

DevicePath choose(const LocalTopology& t, const DeviceEndpoint& a, const DeviceEndpoint& b,
                  const DevicePathOptions& o = DevicePathOptions()) {
  DevicePath p = chooseDevicePath(t, a, b, o);
  DevicePath q = chooseDevicePath(t, b, a, o);
  EXPECT_EQ(p.kind, q.kind) << p.reason << " / " << q.reason;
  EXPECT_EQ(p.crossContext, q.crossContext);
  EXPECT_EQ(p.reason, q.reason);
  EXPECT_FALSE(p.reason.empty());
  return p;
}

DevicePathOptions level(P2pLevel l) {
  DevicePathOptions o;
  o.p2pLevel = l;
  return o;
}

TEST(DevicePath, SameGpuOneProcessSharesTheAddressSpace) {
  LocalTopology t = dualSocket();
  DevicePath p = choose(t, rankOn(t, 1, 7), rankOn(t, 1, 7));
  EXPECT_EQ(p.kind, DevicePathKind::kP2pSameGpu);
  EXPECT_FALSE(p.crossContext);
  EXPECT_NE(p.reason.find("GPU1"), std::string::npos) << p.reason;
  // Without bus ids: the same ordinal in the same process.
  DeviceEndpoint a = makeDeviceEndpoint(t.hostId, 7, 0, "");
  EXPECT_EQ(choose(t, a, a).kind, DevicePathKind::kP2pSameGpu);
  EXPECT_EQ(choose(t, a, makeDeviceEndpoint(t.hostId, 7, 1, "")).kind, DevicePathKind::kP2pNvlink);
}

TEST(DevicePath, SameGpuTwoProcessesIsCrossContext) {
  LocalTopology t = dualSocket();
  // The bus id decides, whatever each process calls the GPU (CUDA_VISIBLE_DEVICES).
  DeviceEndpoint a = makeDeviceEndpoint(t.hostId, 7, 2, "0000:CD:00.0");
  DeviceEndpoint b = makeDeviceEndpoint(t.hostId, 8, 0, "cd:00.0");
  DevicePath p = choose(t, a, b);
  EXPECT_EQ(p.kind, DevicePathKind::kP2pSameGpu);
  EXPECT_TRUE(p.crossContext);
  EXPECT_NE(p.reason.find("MPS"), std::string::npos) << p.reason;
  // Not P2P between different GPUs, so neither P2P_DISABLE nor SHM_DISABLE changes it.
  DevicePathOptions off;
  off.p2pDisabled = off.shmDisabled = true;
  EXPECT_EQ(chooseDevicePath(t, a, b, off).kind, DevicePathKind::kP2pSameGpu);
}

TEST(DevicePath, NvlinkPairs) {
  LocalTopology t = dualSocket();  // GPU0-GPU1: 12 direct NVLinks (also PIX)
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 1));
  EXPECT_EQ(p.kind, DevicePathKind::kP2pNvlink);
  EXPECT_FALSE(p.crossContext);
  EXPECT_EQ(p.reason, "GPU0 and GPU1 share 12 NVLinks");
  LocalTopology dgx = loadFixture("nvlink_8gpu.json");  // GPU0-GPU7: NVSwitch, SYS over PCIe
  EXPECT_EQ(choose(dgx, rankOn(dgx, 0), rankOn(dgx, 7)).kind, DevicePathKind::kP2pNvlink);
  // NVL allows NVLink only; LOC not even that.
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), level(P2pLevel::kNvl)).kind,
            DevicePathKind::kP2pNvlink);
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), level(P2pLevel::kLoc)).kind,
            DevicePathKind::kShm);
}

TEST(DevicePath, PciePairWithinTheLevel) {
  LocalTopology t = dualSocketPcie();  // GPU0-GPU1: PIX, peer access
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 1));
  EXPECT_EQ(p.kind, DevicePathKind::kP2pPcie) << p.reason;
  EXPECT_NE(p.reason.find("PIX"), std::string::npos) << p.reason;
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), level(P2pLevel::kPix)).kind,
            DevicePathKind::kP2pPcie);
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), level(P2pLevel::kNvl)).kind,
            DevicePathKind::kShm);
  // PXB: GPU1 moved one switch further down, so the two meet two bridges above GPU1.
  for (PciDevice& d : t.pciDevices)
    if (d.busId == t.gpus[1].pciBusId) d.upstream.insert(d.upstream.begin(), "0000:17:05.0");
  ASSERT_EQ(pciDistance(t, t.gpus[0].pciBusId, t.gpus[1].pciBusId), PciDistance::kPxb);
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1)).kind, DevicePathKind::kP2pPcie);
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), level(P2pLevel::kPix)).kind,
            DevicePathKind::kShm);
}

TEST(DevicePath, PeerAccessMissingWithinTheLevelIsStaged) {
  LocalTopology t = dualSocketPcie();  // GPU0-GPU1: PIX
  t.gpus[1].p2p[0] = false;            // one direction is enough to lose it
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 1));
  EXPECT_EQ(p.kind, DevicePathKind::kP2pStaged) << p.reason;
  EXPECT_FALSE(p.crossContext);
}

TEST(DevicePath, AcrossSocketsBeyondTheDefaultLevelIsShm) {
  LocalTopology t = dgxPcie();  // GPU0-GPU4: SYS, peer access; GPU0-GPU2: NODE
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 4));
  EXPECT_EQ(p.kind, DevicePathKind::kShm);
  EXPECT_EQ(p.reason, "GPU0 and GPU4 are SYS apart, beyond P2P level PXB: host shared memory");
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 2)).kind, DevicePathKind::kShm);
  // PHB covers NODE (one NUMA node's CPU), as in NCCL, but not SYS.
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 2), level(P2pLevel::kPhb)).kind,
            DevicePathKind::kP2pPcie);
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 4), level(P2pLevel::kPhb)).kind,
            DevicePathKind::kShm);
  LocalTopology dual = dualSocket();  // GPU1-GPU2: SYS without peer access
  EXPECT_EQ(choose(dual, rankOn(dual, 1), rankOn(dual, 2)).kind, DevicePathKind::kShm);
}

TEST(DevicePath, P2pLevelSysAllowsAcrossSockets) {
  LocalTopology t = dgxPcie();  // GPU0-GPU4: SYS with peer access
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 4), level(P2pLevel::kSys)).kind,
            DevicePathKind::kP2pPcie);
  LocalTopology dual = dualSocket();  // GPU1-GPU2: SYS, no peer access
  EXPECT_EQ(choose(dual, rankOn(dual, 1), rankOn(dual, 2), level(P2pLevel::kSys)).kind,
            DevicePathKind::kP2pStaged);
}

TEST(DevicePath, P2pDisabledFallsBackToShm) {
  LocalTopology t = dualSocket();
  DevicePathOptions o;
  o.p2pDisabled = true;
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 1), o);  // NVLink pair
  EXPECT_EQ(p.kind, DevicePathKind::kShm);
  EXPECT_NE(p.reason.find("P2P_DISABLE"), std::string::npos) << p.reason;
  LocalTopology pcie = dualSocketPcie();  // PIX with peer access
  EXPECT_EQ(choose(pcie, rankOn(pcie, 0), rankOn(pcie, 1), o).kind, DevicePathKind::kShm);
}

TEST(DevicePath, OtherHostIsSocket) {
  LocalTopology t = dualSocket();
  DeviceEndpoint far = rankOn(t, 0);
  far.hostId ^= 1;  // the same bus id on another machine is another GPU
  DevicePath p = choose(t, rankOn(t, 0), far);
  EXPECT_EQ(p.kind, DevicePathKind::kSocket);
  EXPECT_FALSE(p.crossContext);
  EXPECT_EQ(choose(t, rankOn(t, 1), far).kind, DevicePathKind::kSocket);
}

TEST(DevicePath, ShmAndP2pDisabledIsSocket) {
  LocalTopology t = dualSocket();
  DevicePathOptions o;
  o.p2pDisabled = o.shmDisabled = true;
  DevicePath p = choose(t, rankOn(t, 0), rankOn(t, 1), o);
  EXPECT_EQ(p.kind, DevicePathKind::kSocket);
  EXPECT_NE(p.reason.find("SHM_DISABLE"), std::string::npos) << p.reason;
  // Beyond the level (SYS) with shared memory off: socket too.
  DevicePathOptions shmOff;
  shmOff.shmDisabled = true;
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 3), shmOff).kind, DevicePathKind::kSocket);
  // SHM_DISABLE alone leaves P2P alone.
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), shmOff).kind, DevicePathKind::kP2pNvlink);
}

// CHORUS_DEVICE_HOST_LINKS=1: every pair through host memory, the same GPU too; sockets when
// shared memory is off; other hosts stay sockets.
TEST(DevicePath, HostLinksSendEveryPairThroughHostMemory) {
  LocalTopology t = dualSocket();
  DevicePathOptions o;
  o.hostLinks = true;
  DevicePath same = choose(t, rankOn(t, 1, 7), rankOn(t, 1, 7), o);
  EXPECT_EQ(same.kind, DevicePathKind::kShm);
  EXPECT_NE(same.reason.find("DEVICE_HOST_LINKS"), std::string::npos) << same.reason;
  EXPECT_EQ(choose(t, rankOn(t, 0), rankOn(t, 1), o).kind, DevicePathKind::kShm);  // NVLink
  DeviceEndpoint far = rankOn(t, 0);
  far.hostId ^= 1;
  EXPECT_EQ(choose(t, rankOn(t, 0), far, o).kind, DevicePathKind::kSocket);
  o.shmDisabled = true;
  EXPECT_EQ(choose(t, rankOn(t, 1, 7), rankOn(t, 1, 8), o).kind, DevicePathKind::kSocket);
}

TEST(DevicePath, GpuMissingFromTheTopologyIsStaged) {
  LocalTopology t = dualSocket();
  DeviceEndpoint ghost = makeDeviceEndpoint(t.hostId, 200, 4, "0000:99:00.0");
  DevicePath p = choose(t, rankOn(t, 0), ghost);
  EXPECT_EQ(p.kind, DevicePathKind::kP2pStaged);
  EXPECT_NE(p.reason.find("0000:99:00.0 is not in the topology"), std::string::npos) << p.reason;
  // Levels that allow no PCIe P2P still send it to shared memory.
  EXPECT_EQ(choose(t, rankOn(t, 0), ghost, level(P2pLevel::kNvl)).kind, DevicePathKind::kShm);
  // Without a bus id the ordinal finds it; an ordinal the topology lacks is missing too.
  EXPECT_EQ(
      choose(t, makeDeviceEndpoint(t.hostId, 7, 0, ""), makeDeviceEndpoint(t.hostId, 8, 1, ""))
          .kind,
      DevicePathKind::kP2pNvlink);
  EXPECT_EQ(choose(t, rankOn(t, 0), makeDeviceEndpoint(t.hostId, 8, 9, "")).kind,
            DevicePathKind::kP2pStaged);
  // An empty topology: every pair of GPUs is staged.
  EXPECT_EQ(choose(LocalTopology(), rankOn(t, 0), rankOn(t, 1)).kind, DevicePathKind::kP2pStaged);
}

TEST(DevicePath, SymmetricOverEveryPairAndOption) {
  for (const char* name : {"dual_socket_4gpu_2nic.json", "nvlink_8gpu.json"}) {
    LocalTopology t = loadFixture(name);
    std::vector<DeviceEndpoint> ends;
    for (size_t g = 0; g < t.gpus.size(); ++g) {
      ends.push_back(rankOn(t, static_cast<int>(g)));
      ends.push_back(rankOn(t, static_cast<int>(g), 1));  // all in one process
    }
    ends.push_back(makeDeviceEndpoint(t.hostId, 300, 0, "0000:99:00.0"));
    ends.push_back(makeDeviceEndpoint(t.hostId ^ 1, 100, 0, t.gpus[0].pciBusId));
    for (int bits = 0; bits < 8; ++bits)
      for (int l = 0; l <= static_cast<int>(P2pLevel::kSys); ++l) {
        DevicePathOptions o = level(static_cast<P2pLevel>(l));
        o.p2pDisabled = bits & 1;
        o.shmDisabled = bits & 2;
        o.hostLinks = bits & 4;
        for (const DeviceEndpoint& a : ends)
          for (const DeviceEndpoint& b : ends) {
            SCOPED_TRACE(std::string(name) + " " + a.busId + " pid " + std::to_string(a.pid) +
                         " / " + b.busId + " pid " + std::to_string(b.pid));
            choose(t, a, b, o);  // checks both orders agree
          }
      }
  }
}

TEST(DevicePath, ParseP2pLevel) {
  struct Case {
    const char* text;
    P2pLevel want;
  } good[] = {{"LOC", P2pLevel::kLoc},   {"nvl", P2pLevel::kNvl}, {"Pix", P2pLevel::kPix},
              {" PXB ", P2pLevel::kPxb}, {"phb", P2pLevel::kPhb}, {"SYS", P2pLevel::kSys},
              {"0", P2pLevel::kLoc},     {"1", P2pLevel::kPix},   {"2", P2pLevel::kPxb},
              {"3", P2pLevel::kPhb},     {"4", P2pLevel::kSys},   {"5", P2pLevel::kSys}};
  for (const Case& c : good) {
    Result<P2pLevel> r = parseP2pLevel(c.text, "CHORUS_P2P_LEVEL");
    ASSERT_TRUE(r.isOk()) << c.text << ": " << r.status().message();
    EXPECT_EQ(r.value(), c.want) << c.text;
  }
  for (const char* bad : {"", "PCI", "NODE", "6", "-1", "2x", "PXB,SYS"}) {
    Result<P2pLevel> r = parseP2pLevel(bad, "NCCL_P2P_LEVEL");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    const std::string& m = r.status().message();
    EXPECT_EQ(m.rfind(std::string("NCCL_P2P_LEVEL=") + bad + ":", 0), 0u) << m;
    EXPECT_NE(m.find("LOC, NVL, PIX, PXB, PHB, SYS"), std::string::npos) << m;
  }
  EXPECT_STREQ(p2pLevelName(P2pLevel::kPhb), "PHB");
}

TEST(DevicePath, OptionsFromEnvironment) {
  for (const char* v :
       {"CHORUS_P2P_LEVEL", "NCCL_P2P_LEVEL", "CHORUS_P2P_DISABLE", "NCCL_P2P_DISABLE",
        "CHORUS_SHM_DISABLE", "NCCL_SHM_DISABLE", "CHORUS_DEVICE_HOST_LINKS"})
    unsetenv(v);
  Result<DevicePathOptions> d = devicePathOptionsFromEnv();
  ASSERT_TRUE(d.isOk());
  EXPECT_EQ(d.value().p2pLevel, P2pLevel::kPxb);
  EXPECT_FALSE(d.value().p2pDisabled);
  EXPECT_FALSE(d.value().shmDisabled);
  EXPECT_FALSE(d.value().hostLinks);
  setenv("CHORUS_DEVICE_HOST_LINKS", "1", 1);
  ASSERT_TRUE(devicePathOptionsFromEnv().isOk());
  EXPECT_TRUE(devicePathOptionsFromEnv().value().hostLinks);
  unsetenv("CHORUS_DEVICE_HOST_LINKS");
  setenv("NCCL_P2P_LEVEL", "sys", 1);
  setenv("NCCL_P2P_DISABLE", "1", 1);
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  Result<DevicePathOptions> o = devicePathOptionsFromEnv();
  ASSERT_TRUE(o.isOk()) << o.status().message();
  EXPECT_EQ(o.value().p2pLevel, P2pLevel::kSys);
  EXPECT_TRUE(o.value().p2pDisabled);
  EXPECT_TRUE(o.value().shmDisabled);
  setenv("CHORUS_P2P_LEVEL", "far", 1);  // wins over the alias, and is refused
  Result<DevicePathOptions> bad = devicePathOptionsFromEnv();
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHORUS_P2P_LEVEL=far"), std::string::npos)
      << bad.status().message();
  for (const char* v :
       {"CHORUS_P2P_LEVEL", "NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "CHORUS_SHM_DISABLE"})
    unsetenv(v);
}

}  // namespace
}  // namespace chorus
