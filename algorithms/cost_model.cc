#include "algorithms/cost_model.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "common/log.h"
#include "common/param.h"

namespace chorus {

const std::vector<CostField>& costFields() {
  static const std::vector<CostField> fields = {
      {"shm_step_us", &CostModel::shmStepUs, "one FIFO hand-off between ranks of a host (us)"},
      {"shm_gbps", &CostModel::shmGBps, "reduce-copy throughput of one ring channel (GB/s)"},
      {"shm_max_gbps", &CostModel::shmMaxGBps, "all channels of a rank together (GB/s)"},
      {"net_step_us", &CostModel::netStepUs, "one hand-off through the network (us)"},
      {"net_gbps", &CostModel::netGBps, "one network channel (GB/s)"},
      {"net_max_gbps", &CostModel::netMaxGBps, "all network channels of a rank (GB/s)"},
      {"direct_sync_us", &CostModel::directSyncUs, "a flag published and every peer's seen (us)"},
      {"mem_gbps", &CostModel::memGBps, "one core streaming reads plus writes (GB/s)"},
      {"cache_mib", &CostModel::cacheMiB,
       "buffers of a host's ranks that still fit in the caches (MiB)"},
      {"dram_gbps", &CostModel::dramGBps, "one core streaming from beyond the caches (GB/s)", true},
      {"ring_traffic", &CostModel::ringTraffic,
       "memory traffic per byte a ring step moves beyond the caches (bytes)"},
      {"tree_cost", &CostModel::treeCost,
       "a tree step's time per byte against a ring step's (at least 1)", false, 1.0},
      {"wake_us", &CostModel::wakeUs,
       "waking a peer that is not running, per rank ahead of it on its core (us)"},
      {"net_wake_us", &CostModel::netWakeUs, "the same through the network (us)"},
      {"oversub_share", &CostModel::oversubShare,
       "of its part of the cores, what a rank turns into throughput when oversubscribed (<= 1)",
       false, 0, 1.0},
      {"net_ring_share", &CostModel::netRingShare,
       "of that, what a ring through sockets keeps when oversubscribed (<= 1)", false, 0, 1.0},
      {"channel_launch_us", &CostModel::channelLaunchUs, "starting one more channel thread (us)"},
  };
  return fields;
}

Result<CostModel> readTuningFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return errnoError(errno != 0 ? errno : ENOENT, "cannot read tuning file " + path);
  CostModel m;
  std::vector<bool> seen(costFields().size(), false);
  std::string line;
  int lineNo = 0;
  while (std::getline(in, line)) {
    ++lineNo;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.erase(hash);
    std::istringstream words(line);
    std::string name, value, extra;
    if (!(words >> name)) continue;
    const auto where = [&] { return formatString("tuning file %s line %d", path.c_str(), lineNo); };
    if (!(words >> value) || (words >> extra))
      return invalidArgument("%s: expected \"name value\"", where().c_str());
    size_t f = 0;
    while (f < costFields().size() && name != costFields()[f].name) ++f;
    if (f == costFields().size()) {
      std::string known;
      for (const CostField& c : costFields())
        known += (known.empty() ? "" : ", ") + std::string(c.name);
      return invalidArgument("%s: unknown figure \"%s\" (known: %s)", where().c_str(), name.c_str(),
                             known.c_str());
    }
    if (seen[f]) return invalidArgument("%s: %s given twice", where().c_str(), name.c_str());
    seen[f] = true;
    char* end = nullptr;
    const double v = strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v <= 0)
      return invalidArgument("%s: %s = \"%s\" is not a positive number", where().c_str(),
                             name.c_str(), value.c_str());
    const CostField& field = costFields()[f];
    if (!field.within(v))
      return invalidArgument("%s: %s = %s is outside [%g, %g]", where().c_str(), name.c_str(),
                             value.c_str(), field.lowest,
                             field.highest > 0 ? field.highest : HUGE_VAL);
    m.*(field.member) = v;
  }
  return m;
}

Status writeTuningFile(const std::string& path, const CostModel& model,
                       const std::vector<std::string>& comments) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return errnoError(errno, "cannot write tuning file " + path);
  for (const std::string& c : comments) fprintf(f, "# %s\n", c.c_str());
  for (const CostField& c : costFields())
    fprintf(f, "%-18s %-10.4g # %s\n", c.name, model.*(c.member), c.doc);
  if (fclose(f) != 0) return errnoError(errno, "cannot write tuning file " + path);
  return Status::ok();
}

namespace {

struct ProcessModel {
  CostModel model;
  Status status = Status::ok();
};

const ProcessModel& processModel() {
  static ProcessModel pm;
  static std::once_flag once;
  std::call_once(once, [] {
    const ParamValue file = paramRaw("TUNING_FILE");
    if (!file.isSet || file.value.empty()) return;
    Result<CostModel> m = readTuningFile(file.value);
    if (!m.isOk()) {
      pm.status = m.status().withContext(file.source + "=" + file.value);
      LOG_WARN(kSubsysTuning, "%s", pm.status.message().c_str());
      return;
    }
    pm.model = m.value();
    LOG_INFO(kSubsysTuning, "cost model from %s", file.value.c_str());
  });
  return pm;
}

}  // namespace

const CostModel& costModel() {
  return processModel().model;
}

Status costModelStatus() {
  return processModel().status;
}

}  // namespace chorus
