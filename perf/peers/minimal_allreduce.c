/* minimal_allreduce: a dedicated two-process shared-memory all-reduce (float32 sum), the
 * smallest program that does the job well on one host, as a yardstick for the Chorus
 * comparison: whatever a general library loses to it is the price of its generality.
 *
 * Two-shot with half-buffer staging: rank r owns half r of the buffer. Each rank copies the
 * half its peer owns into a shared staging buffer, raises its "staged" counter, waits for the
 * peer's, adds the peer's staged copy of its own half to its input and writes the sum to its
 * output and to a shared result buffer, raises "reduced", waits for the peer's and copies the
 * peer's finished half into its output. Shared buffers are written with streaming stores (the
 * reader sits on another core) from halves of 1 KiB on, with cached stores below (a streamed
 * line makes the reader go to memory), and used by call parity (two of each), which is safe because
 * each call waits for the peer to have passed the previous one. Waiting spins, then yields the
 * core. No chunking: one buffer holds the largest size. Each process is bound to a CPU of its
 * own when it may use two (a forked child starts on its parent's core and would otherwise share
 * it for the first milliseconds).
 *
 * Options and output follow nccl-tests (-b -e -f -n -w -c; -a is accepted and ignored), so
 * compare.py reads its rows like the other benchmarks'. x86-64 streams with AVX2 where the CPU
 * has it, else SSE2; elsewhere plain stores. */

#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Halves at least this long (floats) go to the shared buffers with streaming stores. */
#define kStreamFloats ((size_t)256)

struct Counter {
  _Alignas(64) _Atomic uint64_t value;
  char pad[64 - sizeof(uint64_t)];
};

struct Header {
  struct Counter staged[2], reduced[2];
  double seconds[2];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* x = a, or x = a + b when b is given; x goes to dst with cached stores when dst is given and
 * to streamed with streaming stores when streamed is given (32-byte aligned). Returns the
 * elements done: all but a tail of fewer than 8. */
#if defined(__x86_64__)
__attribute__((target("avx2"))) static size_t combineAvx2(float* dst, float* streamed,
                                                          const float* a, const float* b,
                                                          size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(a + i);
    if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
    if (dst) _mm256_storeu_ps(dst + i, v);
    _mm256_stream_ps(streamed + i, v);
  }
  _mm_sfence();
  return i;
}

static size_t combineSse2(float* dst, float* streamed, const float* a, const float* b, size_t n) {
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_loadu_ps(a + i);
    if (b) v = _mm_add_ps(v, _mm_loadu_ps(b + i));
    if (dst) _mm_storeu_ps(dst + i, v);
    _mm_stream_ps(streamed + i, v);
  }
  _mm_sfence();
  return i;
}
#endif

static void combine(float* dst, float* streamed, const float* a, const float* b, size_t n) {
  size_t i = 0;
  if (streamed && n < kStreamFloats) {
    for (; i < n; ++i) {
      const float v = b ? a[i] + b[i] : a[i];
      if (dst) dst[i] = v;
      streamed[i] = v;
    }
    return;
  }
#if defined(__x86_64__)
  static int avx2 = -1;
  if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2") ? 1 : 0;
  if (streamed)
    i = avx2 ? combineAvx2(dst, streamed, a, b, n) : combineSse2(dst, streamed, a, b, n);
#endif
  for (; i < n; ++i) {
    const float v = b ? a[i] + b[i] : a[i];
    if (dst) dst[i] = v;
    if (streamed) streamed[i] = v;
  }
}

static void waitFor(_Atomic uint64_t* counter, uint64_t target) {
  int polls = 0;
  while (atomic_load_explicit(counter, memory_order_acquire) < target) {
    if (++polls >= 2000) {
      sched_yield();
      polls = 0;
    }
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: minimal_allreduce [-b minbytes=8] [-e maxbytes=32M] [-f factor=2] [-n iters=20] "
          "[-w warmup=5] [-c check=1]\n");
  exit(2);
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char** argv) {
  size_t minBytes = 8, maxBytes = 32 << 20;
  long factor = 2, iters = 20, warmup = 5, check = 1;
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:n:w:c:a:")) != -1) {
    switch (opt) {
      case 'b':
        minBytes = parseSize(optarg);
        break;
      case 'e':
        maxBytes = parseSize(optarg);
        break;
      case 'f':
        factor = atol(optarg);
        break;
      case 'n':
        iters = atol(optarg);
        break;
      case 'w':
        warmup = atol(optarg);
        break;
      case 'c':
        check = atol(optarg);
        break;
      case 'a':
        break;
      default:
        usage();
    }
  }
  if (minBytes < 4 || maxBytes < minBytes || factor < 2 || iters < 1 || warmup < 0) usage();

  /* Shared: header, then per rank two staging and two result buffers of maxBytes each. */
  const size_t stride = (maxBytes + 4095) & ~(size_t)4095;
  const size_t regionBytes = 4096 + 8 * stride;
  /* Faulted in up front (as a library's persistent buffers would be), not in the timed calls. */
  char* region = mmap(NULL, regionBytes, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (region == MAP_FAILED) {
    perror("minimal_allreduce: mmap");
    return 1;
  }
  struct Header* h = (struct Header*)region;
  float *staging[2][2], *result[2][2];
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) {
      staging[r][k] = (float*)(region + 4096 + (size_t)(4 * r + k) * stride);
      result[r][k] = (float*)(region + 4096 + (size_t)(4 * r + 2 + k) * stride);
    }

  fflush(stdout);
  const pid_t child = fork();
  if (child < 0) {
    perror("minimal_allreduce: fork");
    return 1;
  }
  const int rank = child == 0 ? 1 : 0, peer = 1 - rank;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) >= 2) {
    int seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &allowed) || seen++ != rank) continue;
      cpu_set_t mine;
      CPU_ZERO(&mine);
      CPU_SET(cpu, &mine);
      sched_setaffinity(0, sizeof(mine), &mine);
      break;
    }
  }
  float* in = aligned_alloc(64, stride);
  float* out = aligned_alloc(64, stride);
  if (!in || !out) return 1;
  memset(in, 0, stride);
  memset(out, 0, stride);
  if (rank == 0) {
    printf("# minimal_allreduce: two processes, shared memory, float32 sum, two-shot\n");
    printf("#%11s %12s %8s %6s %6s %7s %6s %6s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
  }
  uint64_t seq = 0;
  int failed = 0;
  for (size_t bytes = minBytes; bytes <= maxBytes && bytes >= minBytes; bytes *= factor) {
    const size_t count = bytes / 4;
    /* Half boundaries at multiples of 8 floats keep the streamed halves 32-byte aligned. */
    size_t split = (count / 2 + 7) & ~(size_t)7;
    if (split > count) split = count;
    const size_t mineBegin = rank == 0 ? 0 : split, mineEnd = rank == 0 ? split : count;
    const size_t theirBegin = rank == 0 ? split : 0, theirEnd = rank == 0 ? count : split;
    for (size_t i = 0; i < count; ++i) in[i] = (float)(rank + 1) * (float)(i % 1000);
    double t0 = 0;
    for (long it = -warmup; it < iters; ++it) {
      if (it == 0) t0 = now();
      const int k = (int)(++seq & 1);
      /* The peer's half, staged where the peer reads it (same offsets as in the buffer). */
      combine(NULL, staging[rank][k] + theirBegin, in + theirBegin, NULL, theirEnd - theirBegin);
      atomic_store_explicit(&h->staged[rank].value, seq, memory_order_release);
      waitFor(&h->staged[peer].value, seq);
      /* My half: rank 0's operand first on both ranks, the same sum bit for bit. */
      const float* first = rank == 0 ? in + mineBegin : staging[0][k] + mineBegin;
      const float* second = rank == 1 ? in + mineBegin : staging[1][k] + mineBegin;
      combine(out + mineBegin, result[rank][k], first, second, mineEnd - mineBegin);
      atomic_store_explicit(&h->reduced[rank].value, seq, memory_order_release);
      waitFor(&h->reduced[peer].value, seq);
      memcpy(out + theirBegin, result[peer][k], (theirEnd - theirBegin) * 4);
    }
    h->seconds[rank] = (now() - t0) / (double)iters;
    long wrong = 0;
    if (check)
      for (size_t i = 0; i < count; ++i)
        if (out[i] != 3.0f * (float)(i % 1000)) ++wrong;
    /* Both ranks' times are in; the slower counts (as the collective's end). */
    const uint64_t sync = ++seq;
    atomic_store_explicit(&h->staged[rank].value, sync, memory_order_release);
    waitFor(&h->staged[peer].value, sync);
    if (rank == 0) {
      const double sec = h->seconds[0] > h->seconds[1] ? h->seconds[0] : h->seconds[1];
      const double algbw = (double)bytes / sec / 1e9;
      char w[24];
      if (check)
        snprintf(w, sizeof(w), "%ld", wrong);
      else
        snprintf(w, sizeof(w), "N/A");
      printf("%12zu %12zu %8s %6s %6s %7.2f %6.2f %6.2f %6s\n", bytes, count, "float", "sum", "-1",
             sec * 1e6, algbw, algbw, w);
      fflush(stdout);
    }
    if (wrong) failed = 1;
    /* The other rank must not start the next size before rank 0 read both times. */
    const uint64_t sync2 = ++seq;
    atomic_store_explicit(&h->reduced[rank].value, sync2, memory_order_release);
    waitFor(&h->reduced[peer].value, sync2);
  }
  if (rank == 1) _exit(failed);
  int status = 0;
  waitpid(child, &status, 0);
  return failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
