#include "algorithms/algorithm.h"

#include <strings.h>

#include "common/param.h"

namespace chorus {

const char* algorithmName(Algorithm algo) {
  switch (algo) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kAuto:
      return "auto";
  }
  return "?";
}

Result<Algorithm> algorithmOverride() {
  ParamValue v = paramRaw("ALGO");
  if (!v.isSet || v.value.empty()) return Algorithm::kAuto;
  if (strcasecmp(v.value.c_str(), "ring") == 0) return Algorithm::kRing;
  return invalidArgument("%s=\"%s\" names no algorithm Chorus implements (accepted: ring)",
                         v.source.c_str(), v.value.c_str());
}

}  // namespace chorus
