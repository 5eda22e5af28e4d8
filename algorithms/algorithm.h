// Algorithm identities and the user's override (CHORUS_ALGO / NCCL_ALGO).
#pragma once

#include "common/status.h"

namespace chorus {

enum class Algorithm : int { kAuto = -1, kRing = 0, kTree = 1 };

// Parses CHORUS_ALGO/NCCL_ALGO (ring or tree, any case). Unset -> kAuto; a name Chorus does not
// implement is an error naming the variable and the accepted values (never silently ignored).
Result<Algorithm> algorithmOverride();

}  // namespace chorus
