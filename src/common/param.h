// Every tunable of Chorus, declared once in a table (param.cc) with its type, default and a
// one-line description. Values come from CHORUS_<NAME>, else from NCCL_<NAME>, else the default.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace chorus {

enum class ParamType { kInt, kString };

struct ParamDef {
  const char* name;  // without prefix, e.g. "INIT_TIMEOUT"
  ParamType type;
  const char* defaultValue;
  const char* doc;
  bool ncclAlias;  // whether NCCL_<name> is honoured too
};

const std::vector<ParamDef>& paramTable();

// The raw value and where it came from ("CHORUS_X", "NCCL_X" or "default").
struct ParamValue {
  std::string value;
  std::string source;
  bool isSet;  // set in the environment (not the default)
};
ParamValue paramRaw(const char* name);

// Integer parameter; an unparsable value logs a warning once and yields the default.
int64_t paramInt(const char* name);
std::string paramString(const char* name);

}  // namespace chorus
