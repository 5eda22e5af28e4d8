// A copy whose destination bypasses the caches (non-temporal stores): for large outputs that
// will not be read again soon, it saves the read-for-ownership of every destination line and
// leaves the caches to the data still in flight.
#pragma once

#include <cstddef>

namespace chorus {

// Copies bytes; the stores are ordered (sfence) before it returns. Falls back to memcpy where
// the CPU has no streaming stores.
void streamCopy(void* dst, const void* src, size_t bytes);

// The output size from which ring collectives stream their outputs when CHORUS_STREAM_BYTES is
// left to choose (-1): half the last-level cache (lastLevelCacheBytes; 16 MiB when unknown),
// where an output stops fitting beside the data still in flight, and at least 4 MiB.
long long defaultStreamBytes(unsigned long long lastLevelCacheBytes);

}  // namespace chorus
