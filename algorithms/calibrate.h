// Fitting the cost model (cost_model.h) to measured times: chorus-tune --calibrate measures the
// algorithms on the machine it runs on, and the figures that make the selector's own predictions
// (predictUs) closest to those measurements become the machine's tuning file.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/cost_model.h"
#include "algorithms/selector.h"

namespace chorus {

struct Measurement {
  TuningInfo info;  // the communicator's shape
  Collective coll = Collective::kAllReduce;
  Algorithm algo = Algorithm::kRing;
  int nchannels = 1;
  size_t bytes = 0;
  double us = 0;  // measured time per call
};

struct Fit {
  CostModel model;
  // |predicted / measured - 1| over the measurements, with the starting figures and the fitted.
  double medianErrorBefore = 0;
  double medianErrorAfter = 0;
  double maxErrorAfter = 0;
  int used = 0;  // measurements the model predicts (others do not apply to their shape)
};

// The figures, starting from start, that minimise the sum of |log(predicted / measured)| (robust
// to a few outliers), with a weak pull towards start so that figures no measurement depends on
// keep their value. Every figure stays within a factor 100 of start's; the probed ones
// (CostField::probed: measured directly, not through the algorithms) keep start's value.
// cache_mib stays at or below maxCacheMiB where that is positive (the caches the machine has:
// an edge past them fits noise, not a cache).
Fit fitCostModel(const std::vector<Measurement>& measurements, const CostModel& start,
                 double maxCacheMiB = 0);

// The median of predictionError over the measurements model predicts (0 when none).
double medianPredictionError(const std::vector<Measurement>& measurements, const CostModel& model);

// |predicted / measured - 1| of one measurement under model (negative: the model has no
// prediction for it).
double predictionError(const Measurement& m, const CostModel& model);

}  // namespace chorus
