// chorus-info: what this Chorus build is and how it is configured.
//   chorus-info            version, features, host identity
//   chorus-info --params   every parameter with its default, current value and description
#include <cstdio>
#include <cstring>
#include <string>

#include "nccl.h"
#include "chorus_config.h"
#include "common/param.h"
#include "topo/host_id.h"

namespace {

void printParams() {
  printf("%-22s %-8s %-12s %-20s %s\n", "NAME", "TYPE", "DEFAULT", "VALUE (SOURCE)", "DESCRIPTION");
  for (const chorus::ParamDef& p : chorus::paramTable()) {
    chorus::ParamValue v = chorus::paramRaw(p.name);
    std::string name = std::string("CHORUS_") + p.name;
    std::string value = v.isSet ? v.value + " (" + v.source + ")" : "-";
    std::string alias = p.ncclAlias ? std::string(" (alias NCCL_") + p.name + ")" : "";
    printf("%-22s %-8s %-12s %-20s %s%s\n", name.c_str(),
           p.type == chorus::ParamType::kInt ? "int" : "string",
           *p.defaultValue ? p.defaultValue : "\"\"", value.c_str(), p.doc, alias.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "--params") == 0) {
    printParams();
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "usage: chorus-info [--params]\n");
    return argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) ? 0 : 2;
  }
  printf("Chorus %s (NCCL API %d)\n", CHORUS_VERSION, NCCL_VERSION_CODE);
  printf("features: cuda=%d ibverbs=%d hwloc=%d\n", CHORUS_HAVE_CUDA, CHORUS_HAVE_IBVERBS,
         CHORUS_HAVE_HWLOC);
  printf("host id: %016llx (%s)\n", static_cast<unsigned long long>(chorus::localHostId()),
         chorus::localHostIdText().c_str());
  return 0;
}
