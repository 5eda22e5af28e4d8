#include "exec/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace chorus {

void streamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  // Up to the first 16-byte boundary of the destination with an ordinary copy.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  size_t body = bytes & ~size_t(63);
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  memcpy(d + body, s + body, bytes - body);
  _mm_sfence();
#else
  memcpy(dst, src, bytes);
#endif
}

long long defaultStreamBytes(unsigned long long lastLevelCacheBytes) {
  constexpr long long kFloor = 4ll << 20;
  if (lastLevelCacheBytes == 0) return 16ll << 20;
  const long long half = static_cast<long long>(lastLevelCacheBytes / 2);
  return half > kFloor ? half : kFloor;
}

}  // namespace chorus
