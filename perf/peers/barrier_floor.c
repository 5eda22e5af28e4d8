/* barrier_floor: the latency reference of the Chorus comparison. P processes (one per rank of
 * the collective) pass a bare shared-memory barrier over and over: each stores the number of
 * the round it reached in a cache line of its own, then polls every peer's line until all have
 * reached it, spinning a few polls and then yielding its core (so that with more processes than
 * cores the peer it waits for gets to run). Any all-reduce has to let every rank learn that
 * every other rank's input is there, which is at least this exchange, so the time of one round
 * is a floor for a small all-reduce on this machine. Prints the median over repetitions. */

#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 256
#define MAX_REPS 100

struct Line {
  _Atomic long round;
  char pad[64 - sizeof(long)];
};

struct Shared {
  struct Line lines[MAX_PROCS];
  double seconds[MAX_REPS];
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void usage(void) {
  fprintf(stderr,
          "usage: barrier_floor [-p procs=2] [-n rounds=20000] [-r reps=5] [-s spins=-1]\n"
          "  spins: polls before each yield (-1: 2000, or 20 with more processes than CPUs)\n");
  exit(2);
}

int main(int argc, char** argv) {
  int procs = 2, reps = 5, opt;
  long rounds = 20000, spins = -1;
  while ((opt = getopt(argc, argv, "p:n:r:s:")) != -1) {
    switch (opt) {
      case 'p':
        procs = atoi(optarg);
        break;
      case 'n':
        rounds = atol(optarg);
        break;
      case 'r':
        reps = atoi(optarg);
        break;
      case 's':
        spins = atol(optarg);
        break;
      default:
        usage();
    }
  }
  if (procs < 1 || procs > MAX_PROCS || rounds < 1 || reps < 1 || reps > MAX_REPS) usage();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (spins < 0) spins = procs > cpus ? 20 : 2000;
  struct Shared* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  memset(sh, 0, sizeof(*sh));
  int me = 0;
  for (int p = 1; p < procs; ++p) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      me = p;
      break;
    }
  }
  long round = 0;
  /* Warm-up, then the timed repetitions; process 0 times each (all leave a round together). */
  for (int rep = -1; rep < reps; ++rep) {
    long count = rep < 0 ? rounds / 10 + 1 : rounds;
    double t0 = now();
    for (long i = 0; i < count; ++i) {
      ++round;
      atomic_store_explicit(&sh->lines[me].round, round, memory_order_release);
      for (int q = 0; q < procs; ++q) {
        long polls = 0;
        while (atomic_load_explicit(&sh->lines[q].round, memory_order_acquire) < round)
          if (++polls > spins) sched_yield();
      }
    }
    if (me == 0 && rep >= 0) sh->seconds[rep] = (now() - t0) / (double)count;
  }
  if (me != 0) return 0;
  for (int p = 1; p < procs; ++p) wait(NULL);
  double sorted[MAX_REPS];
  memcpy(sorted, sh->seconds, sizeof(double) * reps);
  qsort(sorted, reps, sizeof(double), cmp);
  printf("# barrier_floor: %d processes, %ld rounds per repetition, %ld polls before each yield\n",
         procs, rounds, spins);
  for (int rep = 0; rep < reps; ++rep) printf("# rep %d: %.3f us\n", rep, sh->seconds[rep] * 1e6);
  printf("barrier_us %.3f\n", sorted[reps / 2] * 1e6);
  return 0;
}
