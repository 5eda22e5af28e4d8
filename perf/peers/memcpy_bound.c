/* memcpy_bound: the memory-bandwidth reference of the Chorus comparison. P processes (one per
 * rank of the collective) each copy their own large buffer with memcpy, all at once, and the
 * bytes read plus written per second are reported. An all-reduce whose ranks only had to read
 * their input once and write their output once would move 2 x size bytes per rank, so its
 * busbw (= algbw at 2 ranks) could reach about half of one process's read+write rate: that
 * half is printed as the bound. */

#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 256
#define MAX_REPS 1000

struct Shared {
  pthread_barrier_t barrier;
  double seconds[MAX_REPS][MAX_PROCS];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static size_t parseSize(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end != s && *end != '\0' && end[1] == '\0') {
    const char* u = strchr("kmg", *end | 32);
    if (u != NULL && *u != '\0') {
      for (const char* p = "kmg"; p <= u; ++p) v *= 1024;
      ++end;
    }
  }
  if (end == s || *end != '\0' || !(v >= 4096) || v > 1e12) {
    fprintf(stderr, "memcpy_bound: invalid size '%s' (at least 4K)\n", s);
    exit(2);
  }
  return (size_t)v;
}

static int parseCount(const char* s, int lo, int hi, const char* what) {
  char* end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "memcpy_bound: %s must be an integer in [%d, %d]\n", what, lo, hi);
    exit(2);
  }
  return (int)v;
}

static int compareDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* One process: its own source and destination, touched before timing. */
static void copier(struct Shared* sh, int id, size_t bytes, int reps, int copies) {
  char* src = aligned_alloc(4096, bytes);
  char* dst = aligned_alloc(4096, bytes);
  if (src == NULL || dst == NULL) {
    fprintf(stderr, "memcpy_bound: cannot allocate 2 x %zu bytes\n", bytes);
    _exit(1);
  }
  memset(src, id + 1, bytes);
  memset(dst, 0, bytes);
  memcpy(dst, src, bytes); /* one untimed copy */
  for (int r = 0; r < reps; ++r) {
    pthread_barrier_wait(&sh->barrier);
    double t0 = now();
    for (int k = 0; k < copies; ++k) {
      src[(size_t)k * 64 % bytes] ^= 1; /* keep the compiler from merging copies */
      memcpy(dst, src, bytes);
    }
    sh->seconds[r][id] = now() - t0;
  }
  if (dst[bytes - 1] == 0x7f && dst[0] == 0x7e) puts("");
  free(src);
  free(dst);
}

int main(int argc, char** argv) {
  int procs = 2, reps = 5, copies = 4;
  size_t bytes = (size_t)256 << 20;
  int c;
  while ((c = getopt(argc, argv, "p:s:r:k:h")) != -1) {
    switch (c) {
      case 'p':
        procs = parseCount(optarg, 1, MAX_PROCS, "-p (processes)");
        break;
      case 's':
        bytes = parseSize(optarg);
        break;
      case 'r':
        reps = parseCount(optarg, 1, MAX_REPS, "-r (repetitions)");
        break;
      case 'k':
        copies = parseCount(optarg, 1, 1 << 20, "-k (copies per repetition)");
        break;
      default:
        printf("usage: memcpy_bound [-p procs=2] [-s bytes=256M] [-r reps=5] [-k copies=4]\n");
        return c == 'h' ? 0 : 2;
    }
  }
  struct Shared* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("memcpy_bound: mmap");
    return 1;
  }
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&sh->barrier, &attr, (unsigned)procs);

  for (int id = 0; id < procs; ++id) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("memcpy_bound: fork");
      return 1;
    }
    if (pid == 0) {
      copier(sh, id, bytes, reps, copies);
      _exit(0);
    }
  }
  int failed = 0;
  for (int id = 0; id < procs; ++id) {
    int status = 0;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed) {
    fprintf(stderr, "memcpy_bound: a copying process failed\n");
    return 1;
  }

  /* A repetition's rate counts every process's bytes over the slowest process's time. */
  double perRep[MAX_REPS];
  double moved = 2.0 * (double)bytes * copies; /* read + written by one process */
  printf("# memcpy_bound: %d processes, each copying %zu bytes %d times per repetition\n", procs,
         bytes, copies);
  printf("# %4s  %14s  %14s\n", "rep", "total(GB/s)", "perproc(GB/s)");
  for (int r = 0; r < reps; ++r) {
    double slowest = 0;
    for (int id = 0; id < procs; ++id)
      if (sh->seconds[r][id] > slowest) slowest = sh->seconds[r][id];
    perRep[r] = slowest > 0 ? moved * procs / slowest / 1e9 : 0;
    printf("  %4d  %14.2f  %14.2f\n", r, perRep[r], perRep[r] / procs);
  }
  qsort(perRep, (size_t)reps, sizeof(double), compareDouble);
  double median = reps % 2 ? perRep[reps / 2] : 0.5 * (perRep[reps / 2 - 1] + perRep[reps / 2]);
  printf("total_rw_GBps %.3f\n", median);
  printf("per_process_rw_GBps %.3f\n", median / procs);
  printf("bound_busbw_GBps %.3f\n", median / procs / 2.0);
  return 0;
}
