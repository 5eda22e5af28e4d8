/* mpi_bench: the MPI side of the Chorus comparison. Times MPI_Allreduce, MPI_Allgather,
 * MPI_Reduce_scatter_block and MPI_Bcast on float32 with the command line, size meaning,
 * output columns and bus bandwidth of Chorus's <coll>_perf tools, so that compare.py parses
 * both alike. Built with either MPI's wrapper (mpicc.openmpi, mpicc.mpich); not part of the
 * Meson build. */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum Coll { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, NUM_COLLS };
static const char* const kCollNames[NUM_COLLS] = {"all_reduce", "all_gather", "reduce_scatter",
                                                  "broadcast"};

struct Options {
  enum Coll coll;
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmupIters, check, average, root, inPlace;
};

/* Element counts of one call, as Chorus's perf tools define them for a test size. */
struct Counts {
  size_t send, recv, param;
  size_t sendInplaceOffset, recvInplaceOffset; /* per rank, in elements */
};

static int gRank = 0, gSize = 1;

static void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "mpi_bench: rank %d: ", gRank);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static void usage(void) {
  printf(
      "usage: mpi_bench <all_reduce|all_gather|reduce_scatter|broadcast> [options]\n"
      "  -b <size>   smallest size, with K/M/G suffix (default 32M)\n"
      "  -e <size>   largest size (default 32M)\n"
      "  -i <size>   additive step between sizes (default 1M)\n"
      "  -f <n>      multiplicative step between sizes (overrides -i when > 1)\n"
      "  -n <n>      timed iterations (default 20)\n"
      "  -w <n>      warmup iterations at the largest and smallest size (default 5)\n"
      "  -c <n>      validated runs per size, 0 = none (default 1)\n"
      "  -a <0..3>   time reported across ranks: 0 rank 0, 1 avg, 2 min, 3 max (default 1)\n"
      "  -r <rank>   broadcast root (default 0)\n"
      "  -I <0/1>    also time the in-place form (MPI_IN_PLACE; default 0)\n"
      "  -d float -o sum   accepted; float32 sum is the only case\n"
      "Sizes, columns and busbw follow Chorus's <coll>_perf tools; the type is float32.\n");
}

static long parseInt(const char* s, const char* what, long lo, long hi) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
    fail("invalid %s '%s': expected an integer in [%ld, %ld]", what, s, lo, hi);
  return v;
}

static size_t parseSize(const char* s, const char* what) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end != s && *end != '\0' && end[1] == '\0') {
    const char* units = "kmgt";
    const char* u = strchr(units, *end | 32);
    if (u != NULL && *u != '\0') {
      v = ldexp(v, 10 * (int)(u - units + 1));
      ++end;
    }
  }
  if (end == s || *end != '\0' || !(v >= 0) || v > 1e18)
    fail("invalid %s '%s': expected a byte count such as 8, 64K, 1M or 2G", what, s);
  return (size_t)v;
}

static struct Options parseOptions(int argc, char** argv) {
  struct Options o = {NUM_COLLS, 32 << 20, 32 << 20, 1 << 20, 1, 20, 5, 1, 1, 0, 0};
  int c;
  while ((c = getopt(argc, argv, "b:e:i:f:n:w:c:a:r:I:d:o:h")) != -1) {
    switch (c) {
      case 'b':
        o.minBytes = parseSize(optarg, "minbytes (-b)");
        break;
      case 'e':
        o.maxBytes = parseSize(optarg, "maxbytes (-e)");
        break;
      case 'i':
        o.stepBytes = parseSize(optarg, "stepbytes (-i)");
        break;
      case 'f':
        o.stepFactor = (size_t)parseInt(optarg, "stepfactor (-f)", 1, 1 << 20);
        break;
      case 'n':
        o.iters = (int)parseInt(optarg, "iters (-n)", 1, INT32_MAX);
        break;
      case 'w':
        o.warmupIters = (int)parseInt(optarg, "warmup_iters (-w)", 0, INT32_MAX);
        break;
      case 'c':
        o.check = (int)parseInt(optarg, "check (-c)", 0, 1 << 20);
        break;
      case 'a':
        o.average = (int)parseInt(optarg, "average (-a)", 0, 3);
        break;
      case 'r':
        o.root = (int)parseInt(optarg, "root (-r)", 0, INT32_MAX);
        break;
      case 'I':
        o.inPlace = (int)parseInt(optarg, "inplace (-I)", 0, 1);
        break;
      case 'd':
        if (strcmp(optarg, "float") != 0 && strcmp(optarg, "float32") != 0)
          fail("datatype '%s' is not supported: mpi_bench times float only", optarg);
        break;
      case 'o':
        if (strcmp(optarg, "sum") != 0)
          fail("op '%s' is not supported: mpi_bench times sum only", optarg);
        break;
      case 'h':
        if (gRank == 0) usage();
        MPI_Finalize();
        exit(0);
      default:
        fail("invalid command line (see mpi_bench -h)");
    }
  }
  if (optind + 1 != argc) fail("expected one collective name (see mpi_bench -h)");
  for (int i = 0; i < NUM_COLLS; ++i)
    if (strcmp(argv[optind], kCollNames[i]) == 0) o.coll = (enum Coll)i;
  if (o.coll == NUM_COLLS) fail("unknown collective '%s'", argv[optind]);
  if (o.minBytes > o.maxBytes) fail("minbytes is larger than maxbytes");
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.minBytes < o.maxBytes)
    fail("stepbytes (-i) must be positive when no stepfactor (-f) above 1 is given");
  if (o.root >= gSize) fail("root %d is out of range for %d ranks", o.root, gSize);
  return o;
}

static struct Counts countsFor(enum Coll coll, size_t count) {
  struct Counts c = {count, count, count, 0, 0};
  size_t n = (size_t)gSize;
  if (coll == ALL_GATHER) { /* the size is the gathered output */
    c.send = c.param = count / n;
    c.recv = c.send * n;
    c.sendInplaceOffset = c.send;
  } else if (coll == REDUCE_SCATTER) { /* the size is each rank's input */
    c.recv = c.param = count / n;
    c.send = c.recv * n;
    /* MPI_IN_PLACE leaves each rank's block at the start of the buffer (NCCL: at rank's block) */
    c.recvInplaceOffset = 0;
  }
  return c;
}

static double busFactor(enum Coll coll) {
  double n = gSize;
  switch (coll) {
    case ALL_REDUCE:
      return 2.0 * (n - 1) / n;
    case ALL_GATHER:
    case REDUCE_SCATTER:
      return (n - 1) / n;
    default:
      return 1.0;
  }
}

/* Page-aligned, zero-filled host memory, touched before any timing. */
static char* allocBuffer(size_t* bytes) {
  size_t b = ((*bytes ? *bytes : 1) + 4095) / 4096 * 4096;
  void* p = NULL;
  if (posix_memalign(&p, 4096, b) != 0) fail("cannot allocate %zu bytes (lower -e)", b);
  memset(p, 0, b);
  *bytes = b;
  return (char*)p;
}

static size_t inPlaceSpan(const struct Counts* c, int rank) {
  size_t a = c->sendInplaceOffset * (size_t)rank + c->send;
  size_t b = c->recvInplaceOffset * (size_t)rank + c->recv;
  return a > b ? a : b;
}

struct Bench {
  struct Options opt;
  char *send, *recv;
  size_t sendBytes, recvBytes;
  int errors;
  int bwCount;
  double bwSum;
};

struct Call {
  float *send, *recv; /* send == NULL: MPI_IN_PLACE */
  size_t count;
};

/* Successive iterations walk through the allocation as Chorus's tools do, so that small sizes
 * are not timed from a warm cache. */
static struct Call callFor(const struct Bench* b, const struct Counts* c, int inPlace, int iter) {
  size_t ts = sizeof(float);
  size_t sendNeed = inPlace ? 0 : c->send * ts;
  size_t recvNeed = (inPlace ? inPlaceSpan(c, gRank) : c->recv) * ts;
  size_t span = sendNeed > recvNeed ? sendNeed : recvNeed;
  size_t room =
      inPlace ? b->recvBytes : (b->sendBytes < b->recvBytes ? b->sendBytes : b->recvBytes);
  size_t steps = span ? room / span : 1;
  if (steps == 0) steps = 1;
  size_t shift = span * ((size_t)iter % steps);
  struct Call call = {(float*)(b->send + shift), (float*)(b->recv + shift), c->param};
  if (inPlace) call.send = NULL;
  return call;
}

static void launch(const struct Bench* b, const struct Counts* c, int inPlace, int iter) {
  struct Call k = callFor(b, c, inPlace, iter);
  int n = (int)k.count;
  if (k.count > INT32_MAX) fail("count %zu exceeds MPI's int count", k.count);
  int rc = MPI_SUCCESS;
  switch (b->opt.coll) {
    case ALL_REDUCE:
      rc = MPI_Allreduce(k.send ? (void*)k.send : MPI_IN_PLACE, k.recv, n, MPI_FLOAT, MPI_SUM,
                         MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      if (k.send)
        rc = MPI_Allgather(k.send, n, MPI_FLOAT, k.recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      else
        rc =
            MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, k.recv, n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case REDUCE_SCATTER:
      rc = MPI_Reduce_scatter_block(k.send ? (void*)k.send : MPI_IN_PLACE, k.recv, n, MPI_FLOAT,
                                    MPI_SUM, MPI_COMM_WORLD);
      break;
    case BROADCAST:
      /* MPI_Bcast has one buffer: out of place, the root sends from its send buffer and the
       * others receive into their receive buffer; nobody copies. */
      rc = MPI_Bcast(k.send && gRank == b->opt.root ? k.send : k.recv, n, MPI_FLOAT, b->opt.root,
                     MPI_COMM_WORLD);
      break;
    default:
      break;
  }
  if (rc != MPI_SUCCESS) fail("%s failed with MPI error %d", kCollNames[b->opt.coll], rc);
}

/* Input element i of rank r: small integers, so that float sums are exact in any order. */
static float inputValue(int rank, size_t i, unsigned seed) {
  return (float)((int)((i * 2654435761u + (size_t)rank * 97u + seed * 13u) % 61u) - 30);
}

/* Fills this rank's inputs; the receive region gets NaN so unwritten elements fail. */
static void initData(const struct Bench* b, const struct Counts* c, int inPlace, unsigned seed) {
  struct Call k = callFor(b, c, inPlace, 0);
  size_t recvElems = inPlace ? inPlaceSpan(c, gRank) : c->recv;
  for (size_t i = 0; i < recvElems; ++i) k.recv[i] = NAN;
  float* in = k.send ? k.send : k.recv + c->sendInplaceOffset * (size_t)gRank;
  if (inPlace && b->opt.coll == REDUCE_SCATTER) in = k.recv; /* MPI_IN_PLACE reads the buffer */
  if (b->opt.coll == BROADCAST && gRank != b->opt.root) return;
  for (size_t i = 0; i < c->send; ++i) in[i] = inputValue(gRank, i, seed);
}

static float expected(const struct Bench* b, const struct Counts* c, size_t i, unsigned seed) {
  float sum = 0;
  switch (b->opt.coll) {
    case ALL_REDUCE:
      for (int r = 0; r < gSize; ++r) sum += inputValue(r, i, seed);
      return sum;
    case REDUCE_SCATTER:
      for (int r = 0; r < gSize; ++r) sum += inputValue(r, (size_t)gRank * c->recv + i, seed);
      return sum;
    case ALL_GATHER:
      return inputValue((int)(i / c->send), i % c->send, seed);
    default:
      return inputValue(b->opt.root, i, seed);
  }
}

static long long countWrong(const struct Bench* b, const struct Counts* c, int inPlace,
                            unsigned seed) {
  struct Call k = callFor(b, c, inPlace, 0);
  const float* out = k.recv + (inPlace ? c->recvInplaceOffset * (size_t)gRank : 0);
  if (b->opt.coll == BROADCAST && gRank == b->opt.root && !inPlace) return 0; /* root: no output */
  long long wrong = 0;
  for (size_t i = 0; i < c->recv; ++i) wrong += !(out[i] == expected(b, c, i, seed));
  return wrong;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Formats v in `width` characters with as many decimals as fit. */
static const char* fit(char* buf, size_t len, double v, int width) {
  for (int prec = 2; prec >= 0; --prec) {
    snprintf(buf, len, "%*.*f", width, prec, v);
    if ((int)strlen(buf) <= width) return buf;
  }
  snprintf(buf, len, "%*.*e", width, width >= 7 ? 1 : 0, v);
  return buf;
}

static void timeOne(struct Bench* b, const struct Counts* c, int inPlace) {
  static unsigned checkRuns = 0;
  if (b->opt.check) initData(b, c, inPlace, 0);
  launch(b, c, inPlace, 0);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = now();
  for (int it = 0; it < b->opt.iters; ++it) launch(b, c, inPlace, it);
  double sec = (now() - start) / b->opt.iters;
  const MPI_Op kAverageOps[] = {MPI_SUM, MPI_SUM, MPI_MIN, MPI_MAX};
  double mine = b->opt.average == 0 && gRank != 0 ? 0.0 : sec;
  MPI_Allreduce(&mine, &sec, 1, MPI_DOUBLE, kAverageOps[b->opt.average], MPI_COMM_WORLD);
  if (b->opt.average == 1) sec /= gSize;

  long long wrong = 0;
  for (int i = 0; i < b->opt.check && wrong == 0; ++i) {
    unsigned seed = ++checkRuns;
    initData(b, c, inPlace, seed);
    launch(b, c, inPlace, 0);
    long long mineWrong = countWrong(b, c, inPlace, seed);
    MPI_Allreduce(&mineWrong, &wrong, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  }
  b->errors += wrong != 0;

  size_t big = c->send > c->recv ? c->send : c->recv;
  double bytes = (double)(big * sizeof(float));
  double algBw = sec > 0 ? bytes / 1.0e9 / sec : 0.0;
  double busBw = algBw * busFactor(b->opt.coll);
  b->bwSum += busBw;
  ++b->bwCount;
  if (gRank == 0) {
    char t[64], a[64], u[64], w[32];
    if (b->opt.check)
      snprintf(w, sizeof(w), "%lld", wrong);
    else
      snprintf(w, sizeof(w), "N/A");
    printf("  %7s  %6s  %6s  %6s", fit(t, sizeof(t), sec * 1.0e6, 7), fit(a, sizeof(a), algBw, 6),
           fit(u, sizeof(u), busBw, 6), w);
  }
}

static void printHeader(const struct Options* o) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  char* nl = strchr(version, '\n');
  if (nl) *nl = '\0';
  char host[128] = "unknown";
  gethostname(host, sizeof(host) - 1);
  if (gRank != 0) return;
  printf("# mpi_bench %s: %s\n", kCollNames[o->coll], version);
  printf(
      "# nRanks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "validation: %d\n",
      gSize, o->minBytes, o->maxBytes, o->stepFactor > 1 ? o->stepFactor : o->stepBytes,
      o->stepFactor > 1 ? "factor" : "bytes", o->warmupIters, o->iters, o->check);
  printf(
      "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
      "in-place          \n",
      "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &gRank);
  MPI_Comm_size(MPI_COMM_WORLD, &gSize);
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct Bench b;
  memset(&b, 0, sizeof(b));
  b.opt = parseOptions(argc, argv);
  const struct Options* o = &b.opt;
  int hasOp = o->coll == ALL_REDUCE || o->coll == REDUCE_SCATTER;
  int root = o->coll == BROADCAST ? o->root : -1;

  struct Counts maxC = countsFor(o->coll, o->maxBytes / sizeof(float));
  size_t sendNeed = maxC.send * sizeof(float), recvNeed = maxC.recv * sizeof(float);
  size_t spanNeed = inPlaceSpan(&maxC, gSize - 1) * sizeof(float);
  if (spanNeed > recvNeed) recvNeed = spanNeed;
  b.sendBytes = sendNeed > o->maxBytes ? sendNeed : o->maxBytes;
  b.recvBytes = recvNeed > o->maxBytes ? recvNeed : o->maxBytes;
  b.send = allocBuffer(&b.sendBytes);
  b.recv = allocBuffer(&b.recvBytes);
  printHeader(o);

  MPI_Barrier(MPI_COMM_WORLD);
  size_t warmSizes[2] = {o->maxBytes, o->minBytes};
  for (int s = 0; s < 2; ++s) {
    struct Counts c = countsFor(o->coll, warmSizes[s] / sizeof(float));
    for (int i = 0; i < o->warmupIters; ++i) launch(&b, &c, 0, i);
  }
  for (size_t bytes = o->minBytes; bytes <= o->maxBytes;) {
    struct Counts c = countsFor(o->coll, bytes / sizeof(float));
    size_t big = c.send > c.recv ? c.send : c.recv;
    if (gRank == 0)
      printf("%12zu  %12zu  %8s  %6s  %6d", big * sizeof(float), c.param, "float",
             hasOp ? "sum" : "none", root);
    timeOne(&b, &c, 0);
    if (o->inPlace) {
      timeOne(&b, &c, 1);
    } else if (gRank == 0) {
      printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    }
    if (gRank == 0) printf("\n");
    size_t next = o->stepFactor > 1 ? bytes * o->stepFactor : bytes + o->stepBytes;
    if (next <= bytes) break;
    bytes = next;
  }
  if (gRank == 0) {
    printf("# %-20s : %d %s\n", "Out of bounds values", b.errors, b.errors ? "FAILED" : "OK");
    printf("# %-20s : %g \n", "Avg bus bandwidth", b.bwCount ? b.bwSum / b.bwCount : 0.0);
  }
  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return b.errors ? 1 : 0;
}
