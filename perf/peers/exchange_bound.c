/* exchange_bound: the transfer reference of the Chorus comparison. P processes (one per rank,
 * pinned round-robin to the CPUs they may use) each own a block in shared memory, and each
 * takes the block of the next process (rank + 1 mod P), all of them at once. Two things
 * are timed, per size:
 *   pull:   the owner has written its block beforehand (untimed, ordinary stores); the reader
 *           copies it into memory of its own, with memcpy and with streaming stores (the
 *           faster of the two counts). The lines come from the owner's caches.
 *   staged: the owner copies its data from private memory into its block, all processes meet
 *           at a barrier, then each copies its peer's block into memory of its own; staging,
 *           barrier and copy are timed together. User buffers are private to their process,
 *           so this is the least a collective through shared memory does to move a peer's data
 *           (written once by the owner, read once by the reader), including what rewriting a
 *           block the peer has just read costs. Measured with ordinary and with streaming
 *           stores for the staging copy; "staged" is the faster of the two.
 * With two ranks every rank's result of an all-reduce depends on all of the peer's input, of an
 * all-gather or a reduce-scatter on half of it and of a broadcast on all of the root's, and the
 * nccl-tests bus bandwidth counts exactly those bytes: a collective's busbw stays below "pull"
 * at the same size, and one that passes data through shared memory in one bulk step per call
 * reaches "staged" at most (pipelining can hide part of the barrier, not the copies). */

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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MAX_PROCS 16
#define MAX_SIZES 32
#define MAX_REPS 2000
/* 0, 1: pull with memcpy / with streaming stores; 2, 3: staged with memcpy / with streaming
 * stores for the staging copy */
#define MODES 4

struct Shared {
  _Atomic long arrived; /* spin barrier: count of arrivals so far */
  char pad[64 - sizeof(long)];
  _Atomic int failed;
  double seconds[MODES][MAX_SIZES][MAX_REPS][MAX_PROCS];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t parseSize(const char* s, const char* what) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end != s && *end != '\0' && end[1] == '\0') {
    const char* u = strchr("kmg", *end | 32);
    if (u != NULL && *u != '\0') {
      for (const char* p = "kmg"; p <= u; ++p) v *= 1024;
      ++end;
    }
  }
  if (end == s || *end != '\0' || !(v >= 4096) || v > 1e11) {
    fprintf(stderr, "exchange_bound: %s '%s' must be a size of at least 4K\n", what, s);
    exit(2);
  }
  return (size_t)v & ~(size_t)63;
}

static int parseCount(const char* s, int lo, int hi, const char* what) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "exchange_bound: %s must be an integer in [%d, %d]\n", what, lo, hi);
    exit(2);
  }
  return (int)v;
}

static int compareDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* All procs arrive; the k-th use of the barrier waits for k * procs arrivals. Spins, then yields
 * the core, so that more processes than cores still get through. */
static void barrier(struct Shared* sh, int procs, long* uses) {
  long target = ++*uses * procs;
  atomic_fetch_add_explicit(&sh->arrived, 1, memory_order_acq_rel);
  for (int spins = 0; atomic_load_explicit(&sh->arrived, memory_order_acquire) < target;) {
    if (++spins > 1000) sched_yield();
  }
}

/* dst = src, with streaming stores when asked (and available). */
static void stage(unsigned char* dst, const unsigned char* src, size_t bytes, int streaming) {
#if defined(__SSE2__)
  if (streaming) {
    for (size_t i = 0; i < bytes; i += 64) {
      __m128i a = _mm_load_si128((const __m128i*)(src + i));
      __m128i b = _mm_load_si128((const __m128i*)(src + i + 16));
      __m128i c = _mm_load_si128((const __m128i*)(src + i + 32));
      __m128i d = _mm_load_si128((const __m128i*)(src + i + 48));
      _mm_stream_si128((__m128i*)(dst + i), a);
      _mm_stream_si128((__m128i*)(dst + i + 16), b);
      _mm_stream_si128((__m128i*)(dst + i + 32), c);
      _mm_stream_si128((__m128i*)(dst + i + 48), d);
    }
    _mm_sfence();
    return;
  }
#else
  (void)streaming;
#endif
  memcpy(dst, src, bytes);
}

static void pinTo(int id) {
  cpu_set_t allowed, mine;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  int n = CPU_COUNT(&allowed), k = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed)) continue;
    if (k++ == id % n) {
      CPU_ZERO(&mine);
      CPU_SET(cpu, &mine);
      sched_setaffinity(0, sizeof(mine), &mine);
      return;
    }
  }
}

static int repsFor(size_t bytes, int maxReps) {
  size_t r = ((size_t)128 << 20) / bytes; /* about 128 MiB copied per size and mode */
  if (r < 5) r = 5;
  if (r > (size_t)maxReps) r = (size_t)maxReps;
  return (int)r;
}

static void worker(struct Shared* sh, unsigned char* blocks, size_t stride, int id, int procs,
                   const size_t* sizes, int nsizes, int maxReps) {
  pinTo(id);
  unsigned char* mine = blocks + (size_t)id * stride;
  int peer = (id + 1) % procs;
  const unsigned char* theirs = blocks + (size_t)peer * stride;
  unsigned char* src = aligned_alloc(4096, stride);
  unsigned char* dst = aligned_alloc(4096, stride);
  if (src == NULL || dst == NULL) {
    fprintf(stderr, "exchange_bound: cannot allocate 2 x %zu bytes\n", stride);
    atomic_store(&sh->failed, 1);
    _exit(1);
  }
  memset(src, 0, stride);
  memset(dst, 0, stride);
  long uses = 0;
  for (int m = 0; m < MODES; ++m) {
    for (int s = 0; s < nsizes; ++s) {
      size_t bytes = sizes[s];
      int reps = repsFor(bytes, maxReps);
      for (int r = -2; r < reps; ++r) { /* two untimed repetitions first */
        unsigned char tag = (unsigned char)(r * 7 + id * 31 + 11);
        unsigned char want = (unsigned char)(r * 7 + peer * 31 + 11);
        memset(src, tag, bytes);
        if (m < 2) stage(mine, src, bytes, 0);
        barrier(sh, procs, &uses);
        double t0 = now();
        if (m >= 2) {
          stage(mine, src, bytes, m == 3);
          barrier(sh, procs, &uses);
        }
        stage(dst, theirs, bytes, m == 1);
        double t = now() - t0;
        if (dst[0] != want || dst[bytes / 2] != want || dst[bytes - 1] != want)
          atomic_store(&sh->failed, 1);
        if (r >= 0) sh->seconds[m][s][r][id] = t;
        barrier(sh, procs, &uses); /* nobody overwrites a block that is being read */
      }
    }
  }
  free(src);
  free(dst);
}

static void usage(FILE* out) {
  fprintf(out,
          "usage: exchange_bound [-p procs=2] [-b min=64K] [-e max=256M] [-f factor=4] "
          "[-r max_reps=2000]\n");
}

int main(int argc, char** argv) {
  int procs = 2, maxReps = MAX_REPS, factor = 4;
  size_t minBytes = 64 << 10, maxBytes = (size_t)256 << 20;
  int c;
  while ((c = getopt(argc, argv, "p:b:e:f:r:h")) != -1) {
    switch (c) {
      case 'p':
        procs = parseCount(optarg, 2, MAX_PROCS, "-p (processes)");
        break;
      case 'b':
        minBytes = parseSize(optarg, "-b");
        break;
      case 'e':
        maxBytes = parseSize(optarg, "-e");
        break;
      case 'f':
        factor = parseCount(optarg, 2, 1024, "-f (factor)");
        break;
      case 'r':
        maxReps = parseCount(optarg, 10, MAX_REPS, "-r (repetitions)");
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (maxBytes < minBytes) {
    fprintf(stderr, "exchange_bound: -e must not be below -b\n");
    return 2;
  }
  size_t sizes[MAX_SIZES];
  int nsizes = 0;
  for (size_t b = minBytes; b <= maxBytes && nsizes < MAX_SIZES; b *= (size_t)factor)
    sizes[nsizes++] = b;
  size_t stride = (sizes[nsizes - 1] + 4095) & ~(size_t)4095;

  struct Shared* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  unsigned char* blocks = mmap(NULL, stride * (size_t)procs, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (sh == MAP_FAILED || blocks == MAP_FAILED) {
    perror("exchange_bound: mmap");
    return 1;
  }
  for (int id = 0; id < procs; ++id) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("exchange_bound: fork");
      return 1;
    }
    if (pid == 0) {
      worker(sh, blocks, stride, id, procs, sizes, nsizes, maxReps);
      _exit(0);
    }
  }
  int failed = 0;
  for (int id = 0; id < procs; ++id) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed || atomic_load(&sh->failed)) {
    fprintf(stderr, "exchange_bound: a process failed or copied the wrong data\n");
    return 1;
  }

  printf(
      "# exchange_bound: %d processes, each taking the block of the next one (shared "
      "memory) into its own memory, all at once; GB/s received per process (block bytes "
      "over the slowest process's time), median over repetitions\n",
      procs);
  printf("# %12s  %6s  %11s  %11s  %13s  %13s  %8s  %8s\n", "size(B)", "reps", "pull-memcpy",
         "pull-stream", "staged-memcpy", "staged-stream", "pull", "staged");
  static double rates[MAX_REPS];
  for (int s = 0; s < nsizes; ++s) {
    int reps = repsFor(sizes[s], maxReps);
    double med[MODES] = {0, 0, 0, 0};
    for (int m = 0; m < MODES; ++m) {
      for (int r = 0; r < reps; ++r) {
        double slowest = 0;
        for (int id = 0; id < procs; ++id)
          if (sh->seconds[m][s][r][id] > slowest) slowest = sh->seconds[m][s][r][id];
        rates[r] = slowest > 0 ? (double)sizes[s] / slowest / 1e9 : 0;
      }
      qsort(rates, (size_t)reps, sizeof(double), compareDouble);
      med[m] = reps % 2 ? rates[reps / 2] : 0.5 * (rates[reps / 2 - 1] + rates[reps / 2]);
    }
    double pull = med[0] > med[1] ? med[0] : med[1];
    double staged = med[2] > med[3] ? med[2] : med[3];
    printf("  %12zu  %6d  %11.2f  %11.2f  %13.2f  %13.2f  %8.2f  %8.2f\n", sizes[s], reps, med[0],
           med[1], med[2], med[3], pull, staged);
  }
  return 0;
}
