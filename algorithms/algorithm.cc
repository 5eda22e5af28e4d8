#include "algorithms/algorithm.h"

#include <strings.h>

#include "common/param.h"

namespace chorus {

Result<Algorithm> algorithmOverride() {
  ParamValue v = paramRaw("ALGO");
  if (!v.isSet || v.value.empty()) return Algorithm::kAuto;
  if (strcasecmp(v.value.c_str(), "ring") == 0) return Algorithm::kRing;
  if (strcasecmp(v.value.c_str(), "tree") == 0) return Algorithm::kTree;
  return invalidArgument("%s=\"%s\" names no algorithm Chorus implements (accepted: ring, tree)",
                         v.source.c_str(), v.value.c_str());
}

}  // namespace chorus
