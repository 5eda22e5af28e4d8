// The topology file (CHORUS_TOPO_FILE, JSON) and the JSON reader under it: any text parses or
// gives an error; JSON that parses writes back to text that parses to the same text again; a
// topology that loads dumps to a file that loads to an equal topology.
#include <string>

#include "fuzz.h"
#include "topo/json.h"
#include "topo/topo_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  chorus::json::Value v;
  chorus::json::ParseError error;
  if (chorus::json::parse(text, &v, &error)) {
    const std::string once = chorus::json::write(v);
    chorus::json::Value again;
    FUZZ_CHECK(chorus::json::parse(once, &again, &error));
    FUZZ_CHECK(chorus::json::write(again) == once);
  }
  chorus::Result<chorus::LocalTopology> topo = chorus::parseTopology(text, "fuzz");
  if (topo.isOk()) {
    const std::string dumped = chorus::dumpTopology(topo.value());
    chorus::Result<chorus::LocalTopology> back = chorus::parseTopology(dumped, "fuzz-dump");
    FUZZ_CHECK(back.isOk());
    FUZZ_CHECK(chorus::describeTopologyDifference(topo.value(), back.value()).empty());
  }
  return 0;
}
