// What one collective call costs before any data moves: a communicator of one rank on host
// memory, so every call runs the whole API path (argument checks, the communicator pin, the
// selector's cached decision, the launch) and a local copy of a few bytes, with no peer to wait
// for. This is the part of a small collective's latency that the library adds on every rank.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "micro_main.h"
#include "nccl.h"

namespace chorus::micro {
namespace {

// One rank, initialised once for the whole binary.
ncclComm_t soloComm() {
  static ncclComm_t comm = [] {
    setenv("CHORUS_HOST_COMM", "1", 0);
    ncclUniqueId id;
    ncclComm_t c = nullptr;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&c, 1, id, 0) != ncclSuccess) {
      fprintf(stderr, "micro_api: cannot create a one-rank host communicator: %s\n",
              ncclGetLastError(nullptr));
      exit(1);
    }
    return c;
  }();
  return comm;
}

void benchAllReduce(benchmark::State& state, size_t bytes) {
  ncclComm_t comm = soloComm();
  std::vector<float> in(bytes / sizeof(float) + 1, 1.0f), out(in.size());
  const size_t count = bytes / sizeof(float);
  for (auto _ : state) {
    if (ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr) !=
        ncclSuccess) {
      state.SkipWithError(ncclGetLastError(comm));
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
}

void benchBroadcast(benchmark::State& state, size_t bytes) {
  ncclComm_t comm = soloComm();
  std::vector<char> in(bytes, 1), out(bytes);
  for (auto _ : state) {
    if (ncclBroadcast(in.data(), out.data(), bytes, ncclInt8, 0, comm, nullptr) != ncclSuccess) {
      state.SkipWithError(ncclGetLastError(comm));
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
}

// The same all-reduce between ncclGroupStart and ncclGroupEnd (queued, then launched).
void benchGroupedAllReduce(benchmark::State& state, size_t bytes) {
  ncclComm_t comm = soloComm();
  std::vector<float> in(bytes / sizeof(float) + 1, 1.0f), out(in.size());
  const size_t count = bytes / sizeof(float);
  for (auto _ : state) {
    ncclGroupStart();
    ncclResult_t r =
        ncclAllReduce(in.data(), out.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    if (ncclGroupEnd() != ncclSuccess || r != ncclSuccess) {
      state.SkipWithError(ncclGetLastError(comm));
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
}

void registerAll() {
  for (size_t bytes : {size_t(8), size_t(4096)}) {
    benchmark::RegisterBenchmark(("api/allreduce/" + sizeLabel(bytes)).c_str(), benchAllReduce,
                                 bytes);
    benchmark::RegisterBenchmark(("api/broadcast/" + sizeLabel(bytes)).c_str(), benchBroadcast,
                                 bytes);
  }
  benchmark::RegisterBenchmark("api/grouped_allreduce/8B", benchGroupedAllReduce, size_t(8));
}

}  // namespace
}  // namespace chorus::micro

int main(int argc, char** argv) {
  chorus::micro::registerAll();
  return chorus::micro::runBenchmarks(argc, argv, {"--benchmark_min_time=0.2"});
}
