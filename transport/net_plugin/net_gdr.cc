#include "transport/net_plugin/net_gdr.h"

#include "common/param.h"
#include "transport/net_plugin/net_abi.h"

namespace chorus {

Result<P2pLevel> parseNetGdrLevel(const std::string& text, const std::string& source) {
  Result<P2pLevel> level = parseP2pLevel(text, source);
  if (!level.isOk() || level.value() == P2pLevel::kNvl)
    return invalidArgument(
        "%s=%s is not a GPUDirect RDMA level (accepted: LOC, PIX, PXB, PHB, SYS in any case, or "
        "NCCL's numbers 0-5 for LOC, PIX, PXB, PHB, SYS, SYS)",
        source.c_str(), text.c_str());
  return level;
}

Result<NetGdrOptions> netGdrOptionsFromEnv() {
  NetGdrOptions o;
  const ParamValue level = paramRaw("NET_GDR_LEVEL");
  if (level.isSet && level.value.find_first_not_of(" \t") != std::string::npos) {
    CHORUS_ASSIGN_OR_RETURN(o.level, parseNetGdrLevel(level.value, level.source));
  }
  o.read = paramInt("NET_GDR_READ") != 0;
  o.place = paramInt("NET_PLACE_SLOTS") != 0;
  return o;
}

NetGdr chooseNetGdr(const NetGdrOptions& o, const NetGdrDevices& d) {
  NetGdr g;
  const bool cuda = (d.ptrSupport & NCCL_PTR_CUDA) != 0;
  const bool dmabuf = (d.ptrSupport & NCCL_PTR_DMABUF) != 0;
  const bool unknown = d.distance == PciDistance::kUnknown;
  if (!o.place) {
    g.why = "the network moves no slot in place (NET_PLACE_SLOTS=0)";
  } else if (d.count == 0) {
    g.why = "no network device";
  } else if (!cuda && !dmabuf) {
    g.why = "the network takes no GPU memory (neither NCCL_PTR_CUDA nor NCCL_PTR_DMABUF)";
  } else if (o.level == P2pLevel::kLoc) {
    g.why = "NET_GDR_LEVEL is LOC";
  } else if (unknown && o.level != P2pLevel::kSys) {
    g.why = formatString(
        "the distance between the GPU and the network devices is unknown (NET_GDR_LEVEL %s; SYS "
        "takes any)",
        p2pLevelName(o.level));
  } else if (!unknown && d.distance > farthestPcieDistance(o.level)) {
    g.why = formatString("the GPU and the network devices are %s apart, beyond NET_GDR_LEVEL %s",
                         pciDistanceName(d.distance), p2pLevelName(o.level));
  }
  if (!g.why.empty()) return g;
  g.dmabufOnly = !cuda;
  g.recv = d.flush;
  g.send = o.read;
  const std::string where = unknown ? std::string("at an unknown distance")
                                    : formatString("%s apart", pciDistanceName(d.distance));
  g.why = formatString(
      "the GPU and the network devices are %s (NET_GDR_LEVEL %s)%s: receives "
      "into %s, sends from %s",
      where.c_str(), p2pLevelName(o.level), g.dmabufOnly ? ", dma-bufs" : "",
      g.recv ? "GPU memory" : "host memory (the network cannot flush GPU memory)",
      g.send ? "GPU memory" : "host memory (NET_GDR_READ=0)");
  if (!g.recv && !g.send) g.dmabufOnly = false;
  return g;
}

}  // namespace chorus
