// Collective and algorithm identities, and the user's algorithm override (CHORUS_ALGO /
// NCCL_ALGO).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace chorus {

enum class Collective : int {
  kAllReduce = 0,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kCount,
};
// "AllReduce", "AllGather", ... as NCCL's logs spell them.
const char* collectiveName(Collective c);

// Every algorithm the selector can choose. Ring, tree and recursive doubling run over FIFO
// connectors (shared memory or the network); one-shot and two-shot read peers' staged inputs
// directly from a shared-memory region, so they need every rank on one host. The hierarchical
// algorithm runs in phases over two communicators of its own, one per host and one across
// hosts per local index (core/comm_hier.cc), so it needs several hosts with the same number
// (at least two) of ranks each.
enum class Algorithm : int {
  kRing = 0,
  kTree,
  kOneShot,
  kTwoShot,
  kRd,    // recursive doubling (all-reduce)
  kHier,  // within hosts, across hosts, within hosts again
  kCount,
};
// "ring", "tree", "oneshot", "twoshot", "rd", "hier": the names CHORUS_ALGO accepts.
const char* algorithmName(Algorithm a);

// The algorithms the user allows: one bit per Algorithm.
struct AlgorithmMask {
  uint32_t bits = (1u << static_cast<int>(Algorithm::kCount)) - 1;
  bool isSet = false;  // from the environment (else every algorithm is allowed)
  std::string text;    // "CHORUS_ALGO=tree" for messages

  bool allows(Algorithm a) const { return (bits >> static_cast<int>(a)) & 1u; }
};

// Parses an algorithm list: names separated by commas, any case ("ring", "tree", "oneshot",
// "twoshot", "rd", "hier", and "direct" for both direct algorithms); a leading ^ excludes the
// listed names instead. An unknown name or a list that excludes everything is an error naming the
// variable and the accepted values (never silently ignored).
Result<AlgorithmMask> parseAlgorithmList(const std::string& value, const std::string& source);

// The override from CHORUS_ALGO, else NCCL_ALGO; unset or empty allows everything.
Result<AlgorithmMask> algorithmOverride();

}  // namespace chorus
