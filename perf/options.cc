#include "options.h"

#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "buffers.h"

namespace chorus::perf {
namespace {

void usage(const Collective& coll) {
  std::printf(
      "usage: %s [options]\n"
      "  -b,--minbytes <size>        smallest size, with K/M/G suffix (default 32M)\n"
      "  -e,--maxbytes <size>        largest size (default 32M)\n"
      "  -i,--stepbytes <size>       additive step between sizes (default 1M)\n"
      "  -f,--stepfactor <n>         multiplicative step between sizes (overrides -i when > 1)\n"
      "  -n,--iters <n>              timed iterations (default 20)\n"
      "  -w,--warmup_iters <n>       untimed warmup iterations (default 5)\n"
      "  -m,--agg_iters <n>          calls aggregated in one group per iteration (default 1)\n"
      "  -N,--run_cycles <n>         repeat the size sweep n times, 0 = forever (default 1)\n"
      "  -c,--check <n>              validated runs per size, 0 = none (default 1)\n"
      "  -o,--op <op>                sum|prod|max|min|avg|mulsum|all (default sum)\n"
      "  -d,--datatype <type>        int8|uint8|int32|uint32|int64|uint64|half|float|double|\n"
      "                              bfloat16|f8e4m3|f8e5m2|all (default float)\n"
      "  -r,--root <rank|all>        root of rooted collectives (default 0)\n"
      "  -a,--average <0..3>         time reported across ranks: 0 rank 0, 1 avg, 2 min, 3 max\n"
      "  -z,--blocking <0/1>         wait for each call (device buffers); host collectives\n"
      "                              always complete in the call\n"
      "  -C,--report_cputime <0/1>   label the time column cputime (same clock on host)\n"
      "  -R,--local_register <0..2>  host buffers from ncclMemAlloc, registered: 1\n"
      "                              ncclCommRegister, 2 ncclCommWindowRegister symmetric\n"
      "                              windows (read in place by ranks on one host); 0 (default)\n"
      "                              plain memory; ignored for device buffers\n"
      "  -t,--nthreads <n>           threads per process (default 1)\n"
      "  -g,--ngpus <n>              ranks (GPUs) per thread (default 1); the process runs\n"
      "                              nthreads x ngpus ranks, each on a thread of its own\n"
      "  -p,--parallel_init <0/1>  -G,--cudagraph 0\n"
      "  -y,--stream_null <0/1>      device buffers: run on the NULL stream\n"
      "  -h,--help\n"
      "Device communicators (a CUDA build on a GPU, see CHORUS_HOST_COMM) get cudaMalloc'd\n"
      "buffers and a stream per rank, on GPU <local rank> modulo the GPUs visible (a process's\n"
      "ranks count as local ranks one after another).\n"
      "Ranks come from CHORUS_RANK/CHORUS_NRANKS (chorusrun), Open MPI, MPICH, Slurm or\n"
      "torchrun variables; the rendezvous from NCCL_COMM_ID/CHORUS_COMM_ID or MASTER_ADDR and\n"
      "MASTER_PORT (the tool uses MASTER_PORT+1).\n",
      (std::string(coll.name) + "_perf").c_str());
}

long parseInt(const char* s, const char* what, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s, &end, 0);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
    fail("invalid %s '%s': expected an integer in [%ld, %ld]", what, s, lo, hi);
  return v;
}

// A byte count with an optional binary K/M/G/T suffix, as nccl-tests accepts ("1.5M" too).
size_t parseSize(const char* s, const char* what) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const char* suffix =
      end != s && *end != '\0' && end[1] == '\0' ? std::strchr("kmgt", *end | 32) : nullptr;
  if (suffix != nullptr && *suffix != '\0') {
    v = std::ldexp(v, 10 * static_cast<int>(suffix - "kmgt" + 1));
    ++end;
  }
  if (end == s || *end != '\0' || !(v >= 0) || v > 1e18)
    fail("invalid %s '%s': expected a byte count such as 8, 64K, 1M or 2G", what, s);
  return static_cast<size_t>(v);
}

// The integer options: flag, long name, field, accepted range.
struct IntOption {
  int flag;
  const char* name;
  int Options::*field;
  long lo, hi;
};
const IntOption kIntOptions[] = {
    {'n', "iters", &Options::iters, 1, INT32_MAX},
    {'w', "warmup_iters", &Options::warmupIters, 0, INT32_MAX},
    {'m', "agg_iters", &Options::aggIters, 1, 1 << 20},
    {'N', "run_cycles", &Options::runCycles, 0, INT32_MAX},
    {'c', "check", &Options::check, 0, 1 << 20},
    {'a', "average", &Options::average, 0, 3},
    {'z', "blocking", &Options::blocking, 0, 3},
    {'p', "parallel_init", &Options::parallelInit, 0, 1},
    {'y', "stream_null", &Options::streamNull, 0, 1},
    {'C', "report_cputime", &Options::reportCpuTime, 0, 1},
    {'R', "local_register", &Options::registration, 0, 2},
};

}  // namespace

Options parseOptions(int argc, char** argv, const Collective& coll) {
  std::vector<option> longOpts = {{"nthreads", required_argument, nullptr, 't'},
                                  {"ngpus", required_argument, nullptr, 'g'},
                                  {"minbytes", required_argument, nullptr, 'b'},
                                  {"maxbytes", required_argument, nullptr, 'e'},
                                  {"stepbytes", required_argument, nullptr, 'i'},
                                  {"stepfactor", required_argument, nullptr, 'f'},
                                  {"op", required_argument, nullptr, 'o'},
                                  {"datatype", required_argument, nullptr, 'd'},
                                  {"root", required_argument, nullptr, 'r'},
                                  {"cudagraph", required_argument, nullptr, 'G'},
                                  {"help", no_argument, nullptr, 'h'}};
  std::string shortOpts = "t:g:b:e:i:f:o:d:r:G:h";
  for (const IntOption& io : kIntOptions) {
    longOpts.push_back({io.name, required_argument, nullptr, io.flag});
    shortOpts += {static_cast<char>(io.flag), ':'};
  }
  longOpts.push_back({nullptr, 0, nullptr, 0});
  Options o;
  for (int c; (c = getopt_long(argc, argv, shortOpts.c_str(), longOpts.data(), nullptr)) != -1;) {
    const IntOption* io = nullptr;
    for (const IntOption& candidate : kIntOptions)
      if (candidate.flag == c) io = &candidate;
    if (io != nullptr) {
      std::string what = std::string(io->name) + " (-" + static_cast<char>(c) + ")";
      o.*io->field = static_cast<int>(parseInt(optarg, what.c_str(), io->lo, io->hi));
      continue;
    }
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
        o.stepFactor = parseInt(optarg, "stepfactor (-f)", 1, 1 << 20);
        break;
      case 't':
        o.nthreads = static_cast<int>(parseInt(optarg, "nthreads (-t)", 1, 1024));
        break;
      case 'g':
        o.ngpus = static_cast<int>(parseInt(optarg, "ngpus (-g)", 1, 1024));
        break;
      case 'G':
        if (parseInt(optarg, "cudagraph (-G)", 0, INT32_MAX) != 0)
          fail("-G %s: the perf tools do not capture CUDA graphs; use -G 0", optarg);
        break;
      case 'o':
        o.ops.clear();
        for (int i = 0; i < kNumPerfOps; ++i)
          if (std::strcmp(optarg, "all") == 0 || std::strcmp(optarg, kOpNames[i]) == 0)
            o.ops.push_back(static_cast<PerfOp>(i));
        if (o.ops.empty())
          fail("invalid op '%s': expected sum, prod, max, min, avg, mulsum or all", optarg);
        break;
      case 'd':
        o.types.clear();
        for (int i = 0; i < kNumTypes; ++i)
          if (std::strcmp(optarg, "all") == 0) o.types.push_back(&kTypes[i]);
        if (o.types.empty() && findType(optarg) != nullptr) o.types.push_back(findType(optarg));
        if (o.types.empty())
          fail(
              "invalid datatype '%s': expected int8, uint8, int32, uint32, int64, uint64, half, "
              "float, double, bfloat16, f8e4m3, f8e5m2 or all",
              optarg);
        break;
      case 'r':
        o.root =
            std::strcmp(optarg, "all") == 0 ? -1 : parseInt(optarg, "root (-r)", -1, INT32_MAX);
        break;
      case 'h':
        usage(coll);
        std::exit(0);
      default:
        fail("invalid command line (see %s_perf -h)", coll.name);
    }
  }
  if (optind < argc) fail("unexpected argument '%s' (see %s_perf -h)", argv[optind], coll.name);
  if (o.minBytes > o.maxBytes)
    fail("minbytes (%zu) is larger than maxbytes (%zu)", o.minBytes, o.maxBytes);
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.minBytes < o.maxBytes)
    fail("stepbytes (-i) must be positive when no stepfactor (-f) above 1 is given");
  return o;
}

}  // namespace chorus::perf
