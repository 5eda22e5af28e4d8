// The algorithm selector: predicts the time of every applicable (algorithm, channel count) for
// one collective call from the cost model (cost_model.h) and picks the fastest the user allows.
// Every rank computes the same decision from the same data, so no agreement is needed.
#pragma once

#include <cstddef>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/cost_model.h"
#include "common/status.h"

namespace chorus {

constexpr int kMaxChannels = 16;

// What the selector knows about a communicator (the same on every rank).
struct TuningInfo {
  int nranks = 1;
  int nnodes = 1;               // distinct hosts
  int localRanks = 1;           // most ranks on one host
  double coresPerRank = 1.0;    // fewest CPU cores per rank on any host (below 1: oversubscribed)
  bool shm = true;              // ranks on one host talk through shared memory
  bool directPossible = false;  // every rank on one host with shared memory
  size_t directChunkBytes = 256 * 1024;  // staging bytes per rank of the direct algorithms
  double netLinkGBps = 0;  // slowest network link between hosts when known (else the model's)
  // The network is a net device (an NCCL net plugin, or Chorus's IB network), not Chorus's
  // sockets: the device moves the bytes the communicator's proxy posts, so a channel costs one
  // core's reduce-copy into registered memory, not the kernel's TCP work, and netLinkGBps (the
  // devices' reported speed) is what caps the channels together.
  bool netDevice = false;
  // Net devices: each host's devices together, which the ranks of a host share when they all
  // cross at once (the hierarchical algorithm); netLinkGBps is then one rank's (0: the same).
  double netHostGBps = 0;
  // Ranks on every host when all hosts have the same number; the hierarchical algorithm
  // applies when this is at least 2 and there are several hosts (0: uneven, or not offered).
  int hierRanksPerHost = 0;
  AlgorithmMask allowed;           // CHORUS_ALGO
  int minChannels = 1;             // CHORUS_MIN_CHANNELS
  int maxChannels = kMaxChannels;  // CHORUS_MAX_CHANNELS
};

struct Prediction {
  Algorithm algo = Algorithm::kRing;
  int nchannels = 1;
  double us = 0;
  bool allowed = true;
};

struct Decision {
  Algorithm algo = Algorithm::kRing;
  int nchannels = 1;
  double us = 0;
  bool overrideIgnored = false;  // the user's list names nothing that applies here
  int nalternatives = 0;
  Prediction alternatives[static_cast<int>(Algorithm::kCount)];
};

// Predicted microseconds of one call moving `bytes` (the nccl-tests "size": the buffer of
// all-reduce, broadcast and reduce, the gathered output of all-gather, the scattered input of
// reduce-scatter) with algo over nchannels; negative when algo does not apply.
double predictUs(const TuningInfo& info, Collective coll, Algorithm algo, int nchannels,
                 size_t bytes, const CostModel& model = costModel());

// What the phases of the hierarchical algorithm run on: the ranks of one host, and one rank of
// every host (each host's ranks sharing its link). Their own selections price the phases.
TuningInfo hierLocalInfo(const TuningInfo& info);
TuningInfo hierCrossInfo(const TuningInfo& info, const CostModel& model = costModel());

// The fastest allowed algorithm and channel count. When the user's list allows nothing that
// applies to this collective, the fastest applicable one is used and overrideIgnored is set.
Decision selectAlgorithm(const TuningInfo& info, Collective coll, size_t bytes,
                         const CostModel& model = costModel());

// CHORUS_MIN_CHANNELS / CHORUS_MAX_CHANNELS (NCCL_ aliases), each in [1, kMaxChannels] and
// min <= max; anything else is an error naming the variable.
Status channelBounds(int* minChannels, int* maxChannels);

// One line for logs and chorus-tune: "ring/2 12.3 us, tree 20.1 us, oneshot (excluded) 3.2 us".
std::string describeAlternatives(const Decision& d);

}  // namespace chorus
