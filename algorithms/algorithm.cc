#include "algorithms/algorithm.h"

#include <strings.h>

#include "common/param.h"

namespace chorus {

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "AllReduce";
    case Collective::kAllGather:
      return "AllGather";
    case Collective::kReduceScatter:
      return "ReduceScatter";
    case Collective::kBroadcast:
      return "Broadcast";
    case Collective::kReduce:
      return "Reduce";
    default:
      return "?";
  }
}

const char* algorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kOneShot:
      return "oneshot";
    case Algorithm::kTwoShot:
      return "twoshot";
    case Algorithm::kRd:
      return "rd";
    case Algorithm::kHier:
      return "hier";
    default:
      return "?";
  }
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Bits named by one list entry, or 0 when the name is unknown.
uint32_t namedBits(const std::string& name) {
  auto bit = [](Algorithm a) { return 1u << static_cast<int>(a); };
  if (strcasecmp(name.c_str(), "direct") == 0)
    return bit(Algorithm::kOneShot) | bit(Algorithm::kTwoShot);
  for (int a = 0; a < static_cast<int>(Algorithm::kCount); ++a)
    if (strcasecmp(name.c_str(), algorithmName(static_cast<Algorithm>(a))) == 0)
      return bit(static_cast<Algorithm>(a));
  return 0;
}

}  // namespace

Result<AlgorithmMask> parseAlgorithmList(const std::string& value, const std::string& source) {
  AlgorithmMask mask;
  std::string text = trim(value);
  if (text.empty()) return mask;
  mask.isSet = true;
  mask.text = source + "=" + value;
  bool exclude = text[0] == '^';
  if (exclude) text = text.substr(1);
  uint32_t named = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string name = trim(text.substr(pos, comma - pos));
    uint32_t bits = namedBits(name);
    if (bits == 0)
      return invalidArgument(
          "%s: \"%s\" names no algorithm Chorus implements (accepted: ring, tree, oneshot, "
          "twoshot, rd, hier, direct; comma-separated, ^ in front to exclude)",
          mask.text.c_str(), name.c_str());
    named |= bits;
    pos = comma + 1;
  }
  const uint32_t all = AlgorithmMask().bits;
  mask.bits = exclude ? all & ~named : named;
  if (mask.bits == 0)
    return invalidArgument(
        "%s excludes every algorithm (accepted: ring, tree, oneshot, twoshot, rd, hier)",
        mask.text.c_str());
  return mask;
}

Result<AlgorithmMask> algorithmOverride() {
  ParamValue v = paramRaw("ALGO");
  if (!v.isSet) return AlgorithmMask();
  return parseAlgorithmList(v.value, v.source);
}

}  // namespace chorus
