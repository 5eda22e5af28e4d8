#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chorus.h"
#include "chorus_config.h"
#include "buffers.h"
#include "options.h"
#include "verify.h"

#if CHORUS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

// The two Chorus calls the harness makes are weak references, so that the tools linked against
// libnccl.so.2 (the *_perf_nccl builds) also run with NVIDIA's NCCL found first on the library
// path: the same measurement code then times either library.
#pragma weak chorusCommMemType
#pragma weak chorusGetVersionString

namespace chorus::perf {
namespace {
std::string gProgram = "perf";
std::atomic<bool> gDeviceSelected{false};  // selectDevice made a GPU current (any thread)
}  // namespace

void fail(const char* fmt, ...) {
  std::fprintf(stderr, "%s: ", gProgram.c_str());
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
  std::exit(1);
}

namespace {

// ---- ranks and rendezvous ---------------------------------------------------------------------

struct RankEnv {
  int rank = 0, nranks = 1, localRank = 0;
  int group = 0;  // the thread of its process (nccl-tests' "Group")
};

bool envInt(const char* name, long lo, long hi, int* out) {
  const char* s = std::getenv(name);
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi)
    fail("environment variable %s='%s' is not an integer in [%ld, %ld]", name, s, lo, hi);
  *out = static_cast<int>(v);
  return true;
}

RankEnv detectRanks() {
  static const char* const kSchemes[][4] = {
      {"chorusrun", "CHORUS_RANK", "CHORUS_NRANKS", "CHORUS_LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"}};
  RankEnv env;
  for (const auto& s : kSchemes) {
    bool hasRank = envInt(s[1], 0, INT32_MAX, &env.rank);
    bool hasSize = envInt(s[2], 1, INT32_MAX, &env.nranks);
    if (!hasRank && !hasSize) continue;
    if (!hasRank || !hasSize)
      fail("%s launch detected but only one of %s and %s is set", s[0], s[1], s[2]);
    if (env.rank >= env.nranks) fail("%s=%d is not below %s=%d", s[1], env.rank, s[2], env.nranks);
    envInt(s[3], 0, INT32_MAX, &env.localRank);
    return env;
  }
  return env;
}

// The library derives the unique id from CHORUS_COMM_ID/NCCL_COMM_ID, identically on all ranks.
void setupRendezvous(const RankEnv& env) {
  if (env.nranks == 1 || std::getenv("CHORUS_COMM_ID") || std::getenv("NCCL_COMM_ID")) return;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr && *addr && port && *port) {
    int p = 0;
    envInt("MASTER_PORT", 1, 65534, &p);
    // MASTER_PORT itself usually belongs to torch's TCPStore, so rendezvous one port above it.
    std::string host = addr;
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
    setenv("NCCL_COMM_ID", (host + ":" + std::to_string(p + 1)).c_str(), 1);
    return;
  }
  fail(
      "rank %d of %d: no rendezvous address. Set NCCL_COMM_ID=<host>:<port> (the same on every "
      "rank, host reachable from all ranks), or MASTER_ADDR and MASTER_PORT (port+1 is used), "
      "or launch with chorusrun -n N",
      env.rank, env.nranks);
}

// ---- the benchmark ----------------------------------------------------------------------------

#if CHORUS_HAVE_CUDA
// Makes GPU <local rank> modulo the visible GPUs current, as nccl-tests does, since a device
// communicator binds to the current device. Skipped when host communicators are asked for, so
// that no CUDA context is created for nothing.
void selectDevice(const RankEnv& env) {
  const char* host = std::getenv("CHORUS_HOST_COMM");
  if (host != nullptr && std::strcmp(host, "1") == 0) return;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // no usable GPU: the library falls back to host communicators
    return;
  }
  cudaError_t e = cudaSetDevice(env.localRank % count);
  if (e != cudaSuccess)
    fail("rank %d: cudaSetDevice(%d) failed: %s", env.rank, env.localRank % count,
         cudaGetErrorString(e));
  gDeviceSelected = true;
}
#endif

// Formats v in exactly `width` characters with as many decimals as fit (as nccl-tests does).
std::string fitNumber(double v, int width) {
  char buf[64];
  for (int prec = 2; prec >= 0; --prec) {
    std::snprintf(buf, sizeof(buf), "%*.*f", width, prec, v);
    if (static_cast<int>(std::strlen(buf)) <= width) return buf;
  }
  std::snprintf(buf, sizeof(buf), "%*.*e", width, width >= 7 ? 1 : 0, v);
  return buf;
}

// One test: a data type, an operation and a root, at every size of the sweep.
struct Test {
  const TypeInfo* type;
  PerfOp op;
  ncclRedOp_t ncclOp;
  int root;  // -1 for collectives without a root
};

class Bench {
 public:
  // id: the unique id every rank of the process shares, or null for one from the environment.
  Bench(const Collective& coll, const Options& opt, const RankEnv& env, const ncclUniqueId* id)
      : coll_(coll),
        opt_(opt),
        rank_(env.rank),
        nranks_(env.nranks),
        group_(env.group),
        sharedId_(id) {}

  ~Bench() {
    send_.reset();
    recv_.reset();
    if (comm_ != nullptr) ncclCommDestroy(comm_);
#if CHORUS_HAVE_CUDA
    scratch_.reset();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
#endif
  }

  int run() {
    ncclUniqueId id;
    if (sharedId_ != nullptr)
      id = *sharedId_;
    else
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    ncclComm_t comm = nullptr;
    ncclResult_t initResult = ncclCommInitRank(&comm, nranks_, id, rank_);
    if (initResult == ncclSuccess) comm_ = comm;
    check(initResult, "ncclCommInitRank");
    chorusMemType_t memType = chorusMemHost;
    if (chorusCommMemType != nullptr) {
      check(chorusCommMemType(comm_, &memType), "chorusCommMemType");
    } else if (gDeviceSelected) {
      memType = chorusMemDevice;  // another NCCL: its communicators always take device buffers
    }
    if (memType == chorusMemDevice) {
#if CHORUS_HAVE_CUDA
      device_ = true;
      if (!opt_.streamNull) checkCuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
#else
      ncclCommAbort(comm_);
      comm_ = nullptr;
      fail(
          "rank %d: the communicator takes device buffers, and device buffers need a CUDA build "
          "of the perf tools; set CHORUS_HOST_COMM=1 to benchmark host memory",
          rank_);
#endif
    }
    scratch_ = makeBuffer(kRankLine * static_cast<size_t>(nranks_), 0);
    printHeader();
    allocate();
    for (const TypeInfo* t : opt_.types) {
      for (PerfOp op : coll_.hasOp ? opt_.ops : std::vector<PerfOp>{kSum}) {
        int first = coll_.hasRoot ? std::max(opt_.root, 0) : -1;
        int last = !coll_.hasRoot ? -1 : opt_.root < 0 ? nranks_ - 1 : opt_.root;
        for (int root = first; root <= last; ++root) runTest(*t, op, root);
      }
    }
    if (rank_ == 0) {
      std::printf("# %-20s : %d %s\n", "Out of bounds values", errors_, errors_ ? "FAILED" : "OK");
      std::printf("# %-20s : %g \n", "Avg bus bandwidth", bwCount_ ? bwSum_ / bwCount_ : 0.0);
      std::printf("#\n# Collective test concluded: %s\n", gProgram.c_str());
    }
    send_.reset();  // deregistered before the communicator goes
    recv_.reset();
    check(ncclCommDestroy(comm_), "ncclCommDestroy");
    comm_ = nullptr;
    return errors_ ? 1 : 0;
  }

 private:
  static constexpr size_t kRankLine = 256;

  void check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess) return;
    std::fprintf(stderr, "%s: rank %d: %s failed: %s (%s)%s%s\n", gProgram.c_str(), rank_, what,
                 ncclGetErrorString(r), ncclGetLastError(comm_), context_.empty() ? "" : " during ",
                 context_.c_str());
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::exit(1);
  }

#if CHORUS_HAVE_CUDA
  void checkCuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    std::fprintf(stderr, "%s: rank %d: %s failed: %s%s%s\n", gProgram.c_str(), rank_, what,
                 cudaGetErrorString(e), context_.empty() ? "" : " during ", context_.c_str());
    if (comm_ != nullptr) ncclCommAbort(comm_);
    comm_ = nullptr;
    std::exit(1);
  }
#endif

  // Device memory on device communicators, host memory (registered as -R asks) otherwise.
  std::unique_ptr<Buffer> makeBuffer(size_t bytes, int registration) {
#if CHORUS_HAVE_CUDA
    if (device_) return std::make_unique<DeviceBuffer>(bytes);
#endif
    return std::make_unique<HostBuffer>(bytes, registration, comm_);
  }

  cudaStream_t stream() const {
#if CHORUS_HAVE_CUDA
    return stream_;
#else
    return nullptr;
#endif
  }

  // Waits for the work queued on device communicators; host calls have completed already.
  void waitForDevice() {
#if CHORUS_HAVE_CUDA
    if (!device_) return;
    checkCuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
#endif
  }

  // Host-side access to `buf`, of which `at` is a part: plain memory operations on host memory;
  // on device memory, copies through the stream, complete when these return.
  void upload(const Buffer& buf, void* at, const void* src, size_t n) {
    if (!buf.onDevice()) {
      std::memcpy(at, src, n);
      return;
    }
#if CHORUS_HAVE_CUDA
    checkCuda(cudaMemcpyAsync(at, src, n, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    waitForDevice();
#endif
  }

  void download(const Buffer& buf, void* dst, const void* at, size_t n) {
    if (!buf.onDevice()) {
      std::memcpy(dst, at, n);
      return;
    }
#if CHORUS_HAVE_CUDA
    checkCuda(cudaMemcpyAsync(dst, at, n, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    waitForDevice();
#endif
  }

  void fill(const Buffer& buf, void* at, int byte, size_t n) {
    if (!buf.onDevice()) {
      std::memset(at, byte, n);
      return;
    }
#if CHORUS_HAVE_CUDA
    checkCuda(cudaMemsetAsync(at, byte, n, stream_), "cudaMemsetAsync");
    waitForDevice();
#endif
  }

  // "device N [0xBUS] name" of a device communicator's GPU, "device -1 [host memory]" otherwise.
  std::string describeDevice() {
    char text[128] = "device -1 [host memory]";
#if CHORUS_HAVE_CUDA
    if (device_) {
      int dev = -1;
      check(ncclCommCuDevice(comm_, &dev), "ncclCommCuDevice");
      cudaDeviceProp prop{};
      checkCuda(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
      std::snprintf(text, sizeof(text), "device %2d [0x%02x] %.80s", dev, prop.pciBusID, prop.name);
    }
#endif
    return text;
  }

  void printHeader() {
    int version = 0;
    check(ncclGetVersion(&version), "ncclGetVersion");
    if (rank_ == 0) {
      std::printf("# nccl-tests-compatible: %s%s nccl-headers=%d nccl-library=%d\n",
                  chorusGetVersionString != nullptr ? "chorus " : "library not Chorus",
                  chorusGetVersionString != nullptr ? chorusGetVersionString() : "",
                  NCCL_VERSION_CODE, version);
      std::printf("# Collective test starting: %s\n", gProgram.c_str());
      std::printf(
          "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
          "iters: %d agg iters: %d validation: %d graph: 0\n",
          opt_.nthreads, opt_.ngpus, opt_.minBytes, opt_.maxBytes,
          opt_.stepFactor > 1 ? opt_.stepFactor : opt_.stepBytes,
          opt_.stepFactor > 1 ? "factor" : "bytes", opt_.warmupIters, opt_.iters, opt_.aggIters,
          opt_.check);
      if (opt_.blocking)
        std::printf("# Blocking Enabled: %s\n",
                    device_ ? "wait for completion after each iteration"
                            : "host collectives complete before the call returns");
      if (device_) {
        int dev = -1;
        check(ncclCommCuDevice(comm_, &dev), "ncclCommCuDevice");
        std::printf("# Device buffers on GPU %d%s\n", dev, opt_.streamNull ? ", NULL stream" : "");
        if (opt_.registration > 0)
          std::printf("# -R %d ignored: registration applies to host buffers only\n",
                      opt_.registration);
      }
      std::printf("#\n# Using devices\n");
    }
    // Rank 0 prints every rank's line, gathered over the communicator under test.
    char host[128] = "unknown";
    gethostname(host, sizeof(host) - 1);
    if (char* dot = std::strchr(host, '.')) *dot = '\0';
    std::vector<char> lines(kRankLine * nranks_);
    char* mine = scratch_->data() + kRankLine * rank_;
    std::snprintf(lines.data() + kRankLine * rank_, kRankLine,
                  "#  Rank %2d Group %2d Pid %6d on %10s %s\n", rank_, group_,
                  static_cast<int>(getpid()), host, describeDevice().c_str());
    upload(*scratch_, mine, lines.data() + kRankLine * rank_, kRankLine);
    check(ncclAllGather(mine, scratch_->data(), kRankLine, ncclUint8, comm_, stream()),
          "ncclAllGather (rank lines)");
    download(*scratch_, lines.data(), scratch_->data(), lines.size());
    if (rank_ == 0)
      for (int r = 0; r < nranks_; ++r)
        std::printf("%.*s", int(kRankLine), lines.data() + kRankLine * r);
    if (rank_ == 0) {
      const char* time = opt_.reportCpuTime ? "cputime" : "time";
      std::printf(
          "#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
          "in-place          \n",
          "", "", "", "", "");
      std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "size",
                  "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time, "algbw",
                  "busbw", "#wrong");
      std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s \n", "(B)",
                  "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                  "(GB/s)", "");
    }
  }

  // Elements an in-place call of this rank spans in the receive buffer.
  size_t inPlaceSpan(const CollCounts& c, int rank) const {
    return std::max(c.sendInplaceOffset * rank + c.sendCount,
                    c.recvInplaceOffset * rank + c.recvCount);
  }

  void allocate() {
    size_t sendBytes = 0, recvBytes = 0;
    for (const TypeInfo* t : opt_.types) {
      CollCounts c = coll_.counts(opt_.maxBytes / t->size, nranks_);
      sendBytes = std::max(sendBytes, c.sendCount * t->size);
      recvBytes =
          std::max({recvBytes, c.recvCount * t->size, inPlaceSpan(c, nranks_ - 1) * t->size});
    }
    send_ = makeBuffer(std::max(sendBytes, opt_.maxBytes), opt_.registration);
    recv_ = makeBuffer(std::max(recvBytes, opt_.maxBytes), opt_.registration);
    // Device buffers: inputs are built, and outputs checked, in host memory.
    if (device_) staging_ = std::make_unique<HostBuffer>(std::max(send_->bytes(), recv_->bytes()));
  }

  // The buffers of call `iter`: successive calls walk through the allocation, as nccl-tests
  // does, so that small sizes are not timed from a warm cache.
  CallArgs callArgs(const Test& test, const CollCounts& c, bool inPlace, int iter) const {
    size_t ts = test.type->size;
    size_t sendNeed = inPlace ? 0 : c.sendCount * ts;
    size_t recvNeed = (inPlace ? inPlaceSpan(c, rank_) : c.recvCount) * ts;
    size_t span = std::max(sendNeed, recvNeed);
    size_t room = inPlace ? recv_->bytes() : std::min(send_->bytes(), recv_->bytes());
    size_t steps = span ? std::max<size_t>(room / span, 1) : 1;
    size_t shift = span * (static_cast<size_t>(iter) % steps);
    char* base = recv_->data() + shift;
    CallArgs a{send_->data() + shift,
               base,
               c.paramCount,
               test.type->type,
               test.ncclOp,
               test.root,
               rank_,
               nranks_,
               comm_,
               stream()};
    if (inPlace) {
      a.sendbuff = base + c.sendInplaceOffset * rank_ * ts;
      a.recvbuff = base + c.recvInplaceOffset * rank_ * ts;
    }
    return a;
  }

  void launch(const Test& test, const CollCounts& c, bool inPlace, int iter) {
    check(coll_.run(callArgs(test, c, inPlace, iter)), coll_.name);
  }

  // All-reduces one value of `type` through the scratch buffer; on device communicators it
  // returns once the result is back (so a barrier also waits for the work queued before it).
  template <typename T>
  T allReduceValue(T v, ncclDataType_t type, ncclRedOp_t op, const char* what) {
    upload(*scratch_, scratch_->data(), &v, sizeof(v));
    check(ncclAllReduce(scratch_->data(), scratch_->data(), 1, type, op, comm_, stream()), what);
    download(*scratch_, &v, scratch_->data(), sizeof(v));
    return v;
  }

  void barrier() {
    allReduceValue<int32_t>(0, ncclInt32, ncclSum, "ncclAllReduce (barrier)");
  }

  double reduceDouble(double v, ncclRedOp_t op) {
    return allReduceValue(v, ncclFloat64, op, "ncclAllReduce (timing)");
  }

  int64_t sumInt64(int64_t v) {
    return allReduceValue(v, ncclInt64, ncclSum, "ncclAllReduce (error count)");
  }

  // Inputs into the send buffer (in place: into the receive buffer at the send offset), and a
  // recognisable pattern over the rest of the receive buffer, so unwritten elements fail.
  // Device buffers: the inputs are built in the staging buffer and copied over.
  void initData(const Test& test, const CollCounts& c, bool inPlace, uint64_t seed) {
    CallArgs a = callArgs(test, c, inPlace, 0);
    size_t ts = test.type->size;
    fill(*recv_, recv_->data(), 0xa5, (inPlace ? inPlaceSpan(c, rank_) : c.recvCount) * ts);
    Inputs in(*test.type, test.op, nranks_, seed);
    const Buffer& sendBuffer = inPlace ? *recv_ : *send_;
    void* send = const_cast<void*>(a.sendbuff);
    void* build = sendBuffer.onDevice() ? staging_->data() : send;
    for (size_t i = 0; i < c.sendCount; ++i) storeElement(*test.type, build, i, in.value(rank_, i));
    if (build != send) upload(sendBuffer, send, build, c.sendCount * ts);
  }

  int64_t countWrong(const Test& test, const CollCounts& c, bool inPlace, uint64_t seed) {
    CallArgs a = callArgs(test, c, inPlace, 0);
    Inputs in(*test.type, test.op, nranks_, seed);
    Checker checker(*test.type, test.op, in, nranks_);
    const void* out = a.recvbuff;
    if (recv_->onDevice()) {
      download(*recv_, staging_->data(), a.recvbuff, c.recvCount * test.type->size);
      out = staging_->data();
    }
    int64_t wrong = 0;
    for (size_t i = 0; i < c.recvCount; ++i)
      wrong += !checker.matches(out, i, coll_.source(i, rank_, test.root, nranks_, c));
    return wrong;
  }

  void runTest(const TypeInfo& t, PerfOp op, int root) {
    Test test{&t, op, static_cast<ncclRedOp_t>(op), root};
    if (op == kMulSum) {
      alignas(8) unsigned char scalar[8] = {};
      storeElement(t, scalar, 0, Inputs(t, op, nranks_, 0).scalar(rank_));
      check(ncclRedOpCreatePreMulSum(&test.ncclOp, scalar, t.type, ncclScalarHostImmediate, comm_),
            "ncclRedOpCreatePreMulSum");
    }
    const char* opName = coll_.hasOp ? kOpNames[op] : "none";
    context_ = std::string(coll_.name) + " " + t.name + " " + opName + " warmup";
    barrier();
    for (size_t bytes : {opt_.maxBytes, opt_.minBytes}) {
      CollCounts c = coll_.counts(bytes / t.size, nranks_);
      for (int i = 0; i < opt_.warmupIters; ++i) launch(test, c, false, i);
    }
    waitForDevice();
    for (int cycle = 0; opt_.runCycles == 0 || cycle < opt_.runCycles; ++cycle) {
      for (size_t bytes = opt_.minBytes; bytes <= opt_.maxBytes;) {
        CollCounts c = coll_.counts(bytes / t.size, nranks_);
        if (rank_ == 0)
          std::printf("%12zu  %12zu  %8s  %6s  %6d", std::max(c.sendCount, c.recvCount) * t.size,
                      c.paramCount, t.name, opName, root);
        for (bool inPlace : {false, true}) {
          context_ = std::string(coll_.name) + " " + t.name + " " + opName + " root " +
                     std::to_string(root) + " count " + std::to_string(c.paramCount) +
                     (inPlace ? " in-place" : " out-of-place");
          timeOne(test, c, inPlace);
        }
        if (rank_ == 0) std::printf("\n");
        if (!nextSize(&bytes)) break;
      }
    }
    context_.clear();
    if (op == kMulSum) check(ncclRedOpDestroy(test.ncclOp, comm_), "ncclRedOpDestroy");
  }

  // Advances to the next size of the sweep; false when the sweep cannot advance.
  bool nextSize(size_t* bytes) const {
    size_t b = *bytes, step = opt_.stepBytes, factor = opt_.stepFactor;
    if (factor > 1 ? b > SIZE_MAX / factor : b > SIZE_MAX - step) return false;
    size_t next = factor > 1 ? std::max<size_t>(b * factor, 1) : b + step;
    if (next == b) return false;
    *bytes = next;
    return true;
  }

  void timeOne(const Test& test, const CollCounts& c, bool inPlace) {
    using Clock = std::chrono::steady_clock;
    if (opt_.check) initData(test, c, inPlace, 0);
    launch(test, c, inPlace, 0);
    barrier();
    Clock::time_point start = Clock::now();
    for (int iter = 0; iter < opt_.iters; ++iter) {
      if (opt_.aggIters > 1) check(ncclGroupStart(), "ncclGroupStart");
      for (int a = 0; a < opt_.aggIters; ++a) launch(test, c, inPlace, iter * opt_.aggIters + a);
      if (opt_.aggIters > 1) check(ncclGroupEnd(), "ncclGroupEnd");
      if (opt_.blocking) waitForDevice();
    }
    waitForDevice();
    double sec = std::chrono::duration<double>(Clock::now() - start).count() /
                 (static_cast<double>(opt_.iters) * opt_.aggIters);
    static const ncclRedOp_t kAverageOps[] = {ncclSum, ncclSum, ncclMin, ncclMax};
    sec = reduceDouble(opt_.average == 0 && rank_ != 0 ? 0.0 : sec, kAverageOps[opt_.average]);
    if (opt_.average == 1) sec /= nranks_;

    int64_t wrong = 0;
    for (int i = 0; i < opt_.check && wrong == 0; ++i) {
      uint64_t seed = ++checkRuns_;
      initData(test, c, inPlace, seed);
      launch(test, c, inPlace, 0);
      wrong = sumInt64(countWrong(test, c, inPlace, seed));
    }
    errors_ += wrong != 0;

    double bytes = static_cast<double>(std::max(c.sendCount, c.recvCount) * test.type->size);
    double algBw = sec > 0 ? bytes / 1.0e9 / sec : 0.0;
    double busBw = algBw * coll_.busFactor(nranks_);
    bwSum_ += busBw;
    ++bwCount_;
    if (rank_ == 0) {
      std::string wrongStr = opt_.check ? std::to_string(wrong) : "N/A";
      std::printf("  %7s  %6s  %6s  %6s", fitNumber(sec * 1.0e6, 7).c_str(),
                  fitNumber(algBw, 6).c_str(), fitNumber(busBw, 6).c_str(), wrongStr.c_str());
    }
  }

  const Collective& coll_;
  const Options& opt_;
  int rank_, nranks_;
  int group_;
  const ncclUniqueId* sharedId_;
  ncclComm_t comm_ = nullptr;
  bool device_ = false;  // the communicator takes device buffers
#if CHORUS_HAVE_CUDA
  cudaStream_t stream_ = nullptr;  // stays NULL with -y 1
#endif
  std::unique_ptr<Buffer> send_, recv_, scratch_;
  std::unique_ptr<HostBuffer> staging_;  // device buffers' inputs and outputs on the host
  std::string context_;                  // what the failing call was doing, for error messages
  uint64_t checkRuns_ = 0;
  int errors_ = 0, bwCount_ = 0;
  double bwSum_ = 0;
};

}  // namespace

int perfMain(int argc, char** argv, const Collective& coll) {
  gProgram = std::string(coll.name) + "_perf";
  setlinebuf(stdout);
  Options opt = parseOptions(argc, argv, coll);
  const RankEnv process = detectRanks();
  const int perProcess = opt.nthreads * opt.ngpus;
  if (static_cast<long>(process.nranks) * perProcess > INT32_MAX)
    fail("%d processes x %d ranks each are too many ranks", process.nranks, perProcess);
  const int nranks = process.nranks * perProcess;
  if (coll.hasRoot && opt.root >= nranks)
    fail("root %d is out of range for %d ranks", opt.root, nranks);
  // The ranks of this process: process rank p holds ranks p*perProcess ... (p+1)*perProcess-1,
  // local ranks (the GPU choice) numbered alike.
  std::vector<RankEnv> ranks(static_cast<size_t>(perProcess));
  for (int i = 0; i < perProcess; ++i) {
    RankEnv& e = ranks[static_cast<size_t>(i)];
    e.rank = process.rank * perProcess + i;
    e.nranks = nranks;
    e.localRank = process.localRank * perProcess + i;
    e.group = i / opt.ngpus;
  }
  // One process: its own unique id, shared by its ranks; several: the environment's.
  ncclUniqueId id;
  const ncclUniqueId* shared = nullptr;
  if (process.nranks == 1 && nranks > 1 && !std::getenv("CHORUS_COMM_ID") &&
      !std::getenv("NCCL_COMM_ID")) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      fail("ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r), ncclGetLastError(nullptr));
    shared = &id;
  } else {
    setupRendezvous(RankEnv{process.rank, nranks, process.localRank, 0});
  }
  auto runRank = [&](const RankEnv& e) {
#if CHORUS_HAVE_CUDA
    selectDevice(e);  // per thread: the current device is the calling thread's
#endif
    return Bench(coll, opt, e, shared).run();
  };
  if (perProcess == 1) return runRank(ranks[0]);
  std::vector<int> results(static_cast<size_t>(perProcess), 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < perProcess; ++i)
    threads.emplace_back(
        [&, i] { results[static_cast<size_t>(i)] = runRank(ranks[static_cast<size_t>(i)]); });
  for (std::thread& t : threads) t.join();
  return *std::max_element(results.begin(), results.end());
}

}  // namespace chorus::perf
