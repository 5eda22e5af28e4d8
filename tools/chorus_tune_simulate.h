// chorus-tune --simulate (chorus_tune_simulate.cc).
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/algorithm.h"

struct SimulateOptions {
  int ranksPerHost = 8;
  int maxRanks = 16384;
  double coresPerHost = 0;  // 0: ranksPerHost (a core per rank); fractions allowed
  double netLinkGBps = 0;   // the network link of each host (0: the model's network figures)
  bool netDevice = false;   // that link is a net plugin's or an IB device, not TCP sockets
  bool shm = true;
  bool csv = false;
  std::vector<chorus::Collective> colls;
  std::vector<size_t> sizes;
};

// Prints, for clusters of 1, 2, 4, ... hosts of ranksPerHost ranks up to maxRanks, each
// collective's choice, predicted time and bus bandwidth per size, from the selector and the
// cost model of this process (CHORUS_TUNING_FILE applies). Returns the exit code.
int runSimulation(const SimulateOptions& options);
