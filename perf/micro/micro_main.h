// Pieces shared by the micro-benchmark binaries: a main whose default run is short (any flag
// given on the command line overrides the defaults), the throughput and latency counters, and
// size labels.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus::micro {

// Overrides Google Benchmark's binary (GiB/s) rate so that the console shows GB/s, the unit of
// the perf tools; the JSON output carries plain bytes per second either way.
inline void setBytesPerSecond(benchmark::State& state, double bytesPerIteration) {
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytesPerIteration * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// For ping-pong loops (one round trip per iteration): half the measured time per iteration,
// printed with its unit (e.g. "one_way=1.52us"); the JSON output holds seconds.
inline void setOneWayLatency(benchmark::State& state) {
  state.counters["one_way"] = benchmark::Counter(
      2.0 * static_cast<double>(state.iterations()),
      benchmark::Counter::Flags(benchmark::Counter::kIsRate | benchmark::Counter::kInvert));
}

// "8B", "4KiB", "64MiB".
inline std::string sizeLabel(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0)
    return std::to_string(bytes >> 20) + "MiB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KiB";
  return std::to_string(bytes) + "B";
}

// Runs the registered benchmarks. `defaults` go in front of the user's arguments: Google
// Benchmark reads flags in order, so the same flag given on the command line wins.
inline int runBenchmarks(int argc, char** argv, std::vector<std::string> defaults) {
  std::vector<char*> args;
  args.push_back(argv[0]);
  for (std::string& flag : defaults) args.push_back(&flag[0]);
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace chorus::micro
