// Memory operations the device kernels synchronise with, for the device and for the CPU that
// runs the same kernel code in tests. Counters are 64-bit and only grow; a publish is a release
// store at system scope (the reader may be another GPU or a CPU), a poll an acquire load. LL
// lines travel as two 8-byte halves, each a 4-byte datum next to its 4-byte flag: the device
// writes and reads the whole 16-byte line in one access, the CPU each half atomically, so a
// reader that sees both flags sees both data words.
#pragma once

#include <cstdint>

#include "cuda/hd.h"

#if !defined(__CUDA_ARCH__)
#include <thread>
#endif

namespace chorus {
namespace dev {

CHORUS_HD inline uint64_t loadAcquire(const uint64_t* p) {
#ifdef __CUDA_ARCH__
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

CHORUS_HD inline void storeRelease(uint64_t* p, uint64_t v) {
#ifdef __CUDA_ARCH__
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

CHORUS_HD inline uint32_t loadFlag(const uint32_t* p) {
#ifdef __CUDA_ARCH__
  return *static_cast<const volatile uint32_t*>(p);
#else
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

// Adds one and returns the value before (grid barriers).
CHORUS_HD inline uint64_t fetchAdd(uint64_t* p, uint64_t v) {
#ifdef __CUDA_ARCH__
  return atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
#endif
}

// Orders this thread's data stores before a later publish by any thread of its block.
CHORUS_HD inline void fenceSystem() {
#ifdef __CUDA_ARCH__
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// Orders this block's earlier accesses to global memory against the grid barrier's counter
// (all blocks of a launch run on one GPU).
CHORUS_HD inline void fenceDevice() {
#ifdef __CUDA_ARCH__
  __threadfence();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// What a waiting thread does between polls.
CHORUS_HD inline void pollPause() {
#if defined(__CUDA_ARCH__)
#if __CUDA_ARCH__ >= 700
  __nanosleep(32);
#endif
#else
  std::this_thread::yield();
#endif
}

// One LL line: two (datum, flag) halves.
struct alignas(16) LlLine {
  uint32_t data0;
  uint32_t flag0;
  uint32_t data1;
  uint32_t flag1;
};
static_assert(sizeof(LlLine) == 16, "an LL line is 16 bytes");

constexpr uint32_t kLlDataBytes = 8;  // payload of one line

// The flag a line carries in FIFO step `step`: never the zero of a line no step has written
// yet (flags cycle through 1..2^32-1, so also after 2^32 steps), and different from the flag
// the same slot carried nslots steps earlier.
CHORUS_HD inline uint32_t llFlag(uint64_t step) {
  return static_cast<uint32_t>(step % 0xffffffffull) + 1u;
}

CHORUS_HD inline void llStore(LlLine* line, uint64_t data, uint32_t flag) {
  uint32_t lo = static_cast<uint32_t>(data);
  uint32_t hi = static_cast<uint32_t>(data >> 32);
#ifdef __CUDA_ARCH__
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"(lo), "r"(flag),
               "r"(hi), "r"(flag)
               : "memory");
#else
  auto* halves = reinterpret_cast<uint64_t*>(line);
  __atomic_store_n(&halves[0], (static_cast<uint64_t>(flag) << 32) | lo, __ATOMIC_RELAXED);
  __atomic_store_n(&halves[1], (static_cast<uint64_t>(flag) << 32) | hi, __ATOMIC_RELAXED);
#endif
}

// True, with the line's 8 data bytes in *data, when both halves carry `flag`.
CHORUS_HD inline bool llTryLoad(const LlLine* line, uint32_t flag, uint64_t* data) {
  uint32_t d0, f0, d1, f1;
#ifdef __CUDA_ARCH__
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(line)
               : "memory");
#else
  const auto* halves = reinterpret_cast<const uint64_t*>(line);
  uint64_t h0 = __atomic_load_n(&halves[0], __ATOMIC_RELAXED);
  uint64_t h1 = __atomic_load_n(&halves[1], __ATOMIC_RELAXED);
  d0 = static_cast<uint32_t>(h0);
  f0 = static_cast<uint32_t>(h0 >> 32);
  d1 = static_cast<uint32_t>(h1);
  f1 = static_cast<uint32_t>(h1 >> 32);
#endif
  if (f0 != flag || f1 != flag) return false;
  *data = (static_cast<uint64_t>(d1) << 32) | d0;
  return true;
}

}  // namespace dev
}  // namespace chorus
