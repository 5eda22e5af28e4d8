#include "algorithms/calibrate.h"

#include <algorithm>
#include <cmath>

namespace chorus {

namespace {

constexpr double kPull = 1e-3;  // weight of |log(figure / start)| against the data

double objective(const std::vector<Measurement>& ms, const CostModel& m, const CostModel& start) {
  double sum = 0;
  for (const Measurement& x : ms) {
    const double p = predictUs(x.info, x.coll, x.algo, x.nchannels, x.bytes, m);
    if (p <= 0 || x.us <= 0) continue;
    sum += std::fabs(std::log(p / x.us));  // absolute, not squared: a few outliers (a
                                           // scheduling hiccup) do not drag the fit
  }
  for (const CostField& f : costFields()) {
    sum += kPull * std::fabs(std::log(m.*(f.member) / start.*(f.member)));
  }
  return sum;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

double predictionError(const Measurement& m, const CostModel& model) {
  const double p = predictUs(m.info, m.coll, m.algo, m.nchannels, m.bytes, model);
  if (p <= 0 || m.us <= 0) return -1;
  return std::fabs(p / m.us - 1);
}

double medianPredictionError(const std::vector<Measurement>& measurements, const CostModel& model) {
  std::vector<double> errors;
  for (const Measurement& m : measurements) {
    const double e = predictionError(m, model);
    if (e >= 0) errors.push_back(e);
  }
  return median(errors);
}

Fit fitCostModel(const std::vector<Measurement>& measurements, const CostModel& start,
                 double maxCacheMiB) {
  Fit fit;
  fit.model = start;
  if (maxCacheMiB > 0 && fit.model.cacheMiB > maxCacheMiB) fit.model.cacheMiB = maxCacheMiB;
  // A start outside a figure's bounds begins at the bound: the fit never leaves them, and the
  // file it writes is one readTuningFile takes.
  for (const CostField& f : costFields()) fit.model.*(f.member) = f.clamp(fit.model.*(f.member));
  double best = objective(measurements, fit.model, start);
  // Coordinate descent in log space: each figure in turn is scaled up or down while that helps,
  // with steps that shrink once no figure moves.
  for (double step : {2.0, 1.25, 1.05, 1.01}) {
    for (int pass = 0; pass < 200; ++pass) {
      bool moved = false;
      for (const CostField& f : costFields()) {
        if (f.probed) continue;  // measured, not fitted
        for (double factor : {step, 1 / step}) {
          CostModel trial = fit.model;
          trial.*(f.member) *= factor;
          const double ratio = trial.*(f.member) / start.*(f.member);
          if (ratio > 100 || ratio < 0.01) continue;
          if (!f.within(trial.*(f.member))) continue;
          if (maxCacheMiB > 0 && trial.cacheMiB > maxCacheMiB) continue;
          const double o = objective(measurements, trial, start);
          if (o < best - 1e-12) {
            best = o;
            fit.model = trial;
            moved = true;
            break;
          }
        }
      }
      if (!moved) break;
    }
  }
  std::vector<double> before, after;
  for (const Measurement& m : measurements) {
    const double b = predictionError(m, start);
    const double a = predictionError(m, fit.model);
    if (b < 0 || a < 0) continue;
    before.push_back(b);
    after.push_back(a);
  }
  fit.used = static_cast<int>(after.size());
  fit.medianErrorBefore = median(before);
  fit.medianErrorAfter = median(after);
  fit.maxErrorAfter = after.empty() ? 0 : *std::max_element(after.begin(), after.end());
  return fit;
}

}  // namespace chorus
