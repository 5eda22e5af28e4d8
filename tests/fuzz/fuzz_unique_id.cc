// The unique id (128 bytes a user passes around): decoding any bytes is safe, and an id that
// decodes encodes back to bytes that decode to the same id.
#include <cstring>

#include "bootstrap/bootstrap.h"
#include "common/socket.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  unsigned char raw[chorus::kUniqueIdBytes] = {};
  std::memcpy(raw, data, size < sizeof(raw) ? size : sizeof(raw));
  chorus::Result<chorus::UniqueIdInfo> id = chorus::decodeUniqueId(raw);
  if (!id.isOk()) return 0;
  unsigned char again[chorus::kUniqueIdBytes];
  chorus::encodeUniqueId(id.value(), again);
  chorus::Result<chorus::UniqueIdInfo> back = chorus::decodeUniqueId(again);
  FUZZ_CHECK(back.isOk());
  FUZZ_CHECK(back.value().secret == id.value().secret);
  FUZZ_CHECK(back.value().magic == id.value().magic);
  FUZZ_CHECK(chorus::addressToString(back.value().rootAddr) ==
             chorus::addressToString(id.value().rootAddr));
  return 0;
}
