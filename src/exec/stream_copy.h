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
// left to choose (-1): 16 MiB on Intel CPUs, where it measured faster for out-of-place
// all-reduce; 0 (never) elsewhere: on an AMD EPYC (Zen 5) it measured 30% slower.
long long defaultStreamBytes();

}  // namespace chorus
