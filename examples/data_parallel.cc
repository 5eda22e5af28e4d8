// Synchronous data parallelism against the C API (nccl.h plus chorus.h), on host memory: the C++
// counterpart of data_parallel.py.
//
//   chorusrun -n 4 ./example_data_parallel [--small] [--steps N] [--batch B] [--lr X]
//                                           [--compress bf16|fp8]
//
// Every rank holds the whole model, a two-layer perceptron (tanh hidden layer, linear output)
// in double precision, and computes the gradient of the loss summed over its shard of each
// global batch. One ncclAllReduce (sum) per step adds up the gradients of all shards in a single
// flat buffer; every rank divides by the global batch size and takes the same SGD step.
//
// Rendezvous: chorusrun sets NCCL_COMM_ID (host:port) for all ranks; with it set,
// ncclGetUniqueId returns the same id on every rank, derived from that address, so no rank
// needs to send its id to the others. chorusCommInitRankHost makes a host-memory communicator.
//
// Self-check: rank 0 also trains the model in one process on the full batches and compares the
// loss of every step and the final parameters (relative difference at most 1e-9); every rank
// checks that all ranks hold bit-identical parameters. The exit status is 1 on every rank when
// a check fails.
//
// --compress bf16|fp8 sends the gradients compressed (chorusCommSetCompression: lower precision
// on the wire, error feedback per buffer). The result is then no longer the exact sum: rank 0
// checks instead that the final loss over all samples is within kCompressedLossTolerance
// (relative) of the single-process run's, and prints the bytes sent against uncompressed.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "chorus.h"
#include "nccl.h"

namespace {

void fail(const char* what, ncclResult_t r, ncclComm_t comm) {
  std::fprintf(stderr, "%s failed: %s (%s)\n", what, ncclGetErrorString(r), ncclGetLastError(comm));
  std::exit(2);
}

#define NCCL_CHECK(call, comm)                    \
  do {                                            \
    ncclResult_t r_ = (call);                     \
    if (r_ != ncclSuccess) fail(#call, r_, comm); \
  } while (0)

struct Options {
  int steps = 200;
  int batch = 256;
  int features = 32;
  int hidden = 64;
  int samples = 4096;
  double lr = 0.2;
  unsigned seed = 1234;
  chorusCompression_t compress = chorusCompressNone;
};

// How far the final loss of a compressed run may be from the exact run's (relative).
constexpr double kCompressedLossTolerance = 1e-3;

Options parseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--small") {
      o.steps = 40;
      o.batch = 48;
      o.features = 8;
      o.hidden = 16;
      o.samples = 480;
    } else if (a == "--steps") {
      o.steps = std::atoi(value());
    } else if (a == "--batch") {
      o.batch = std::atoi(value());
    } else if (a == "--lr") {
      o.lr = std::atof(value());
    } else if (a == "--compress") {
      const std::string v = value();
      if (v != "bf16" && v != "fp8" && v != "none") {
        std::fprintf(stderr, "--compress takes bf16, fp8 or none, not %s\n", v.c_str());
        std::exit(2);
      }
      o.compress = v == "bf16"  ? chorusCompressBf16
                   : v == "fp8" ? chorusCompressFp8
                                : chorusCompressNone;
    } else {
      bool help = a == "-h" || a == "--help";
      std::fprintf(help ? stdout : stderr,
                   "usage: chorusrun -n N %s [--small] [--steps N] [--batch B] [--lr X] "
                   "[--compress bf16|fp8]\n",
                   argv[0]);
      std::exit(help ? 0 : 2);
    }
  }
  if (o.steps < 1 || o.batch < 1 || o.batch > o.samples) {
    std::fprintf(stderr, "need --steps >= 1 and 1 <= --batch <= %d\n", o.samples);
    std::exit(2);
  }
  return o;
}

// x -> tanh(x W1 + b1) . w2 + b2, all parameters in one flat vector (one all-reduce per step).
class Mlp {
 public:
  Mlp(int features, int hidden, unsigned seed) : f_(features), h_(hidden) {
    params.assign(static_cast<size_t>(f_ * h_ + h_ + h_ + 1), 0.0);
    grad.assign(params.size(), 0.0);
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> w1(0.0, 1.0 / std::sqrt(f_));
    std::normal_distribution<double> w2(0.0, 1.0 / std::sqrt(h_));
    for (int i = 0; i < f_ * h_; ++i) params[W1(i)] = w1(rng);
    for (int j = 0; j < h_; ++j) params[W2(j)] = w2(rng);
  }

  // Sum over the given rows of 0.5 (y - t)^2; the gradient of that sum goes into grad.
  double lossAndGradSum(const std::vector<double>& x, const std::vector<double>& t, const int* rows,
                        size_t n) {
    std::fill(grad.begin(), grad.end(), 0.0);
    std::vector<double> h(h_);
    double loss = 0.0;
    for (size_t r = 0; r < n; ++r) {
      const double* xi = &x[static_cast<size_t>(rows[r]) * f_];
      double y = params[B2()];
      for (int j = 0; j < h_; ++j) {
        double z = params[B1(j)];
        for (int k = 0; k < f_; ++k) z += xi[k] * params[W1(k * h_ + j)];
        h[j] = std::tanh(z);
        y += h[j] * params[W2(j)];
      }
      double err = y - t[rows[r]];
      loss += 0.5 * err * err;
      grad[B2()] += err;
      for (int j = 0; j < h_; ++j) {
        grad[W2(j)] += err * h[j];
        double dz = err * params[W2(j)] * (1.0 - h[j] * h[j]);
        grad[B1(j)] += dz;
        for (int k = 0; k < f_; ++k) grad[W1(k * h_ + j)] += xi[k] * dz;
      }
    }
    return loss;
  }

  void step(double scale) {
    for (size_t i = 0; i < params.size(); ++i) params[i] -= scale * grad[i];
  }

  std::vector<double> params, grad;

 private:
  size_t W1(int i) const { return static_cast<size_t>(i); }
  size_t B1(int j) const { return static_cast<size_t>(f_ * h_ + j); }
  size_t W2(int j) const { return static_cast<size_t>(f_ * h_ + h_ + j); }
  size_t B2() const { return static_cast<size_t>(f_ * h_ + 2 * h_); }
  int f_, h_;
};

struct Data {
  std::vector<double> x, t;
};

// The same data set on every rank: t = sin(x . w) + noise.
Data makeData(const Options& o) {
  Data d;
  std::mt19937_64 rng(o.seed + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  d.x.resize(static_cast<size_t>(o.samples) * o.features);
  for (double& v : d.x) v = normal(rng);
  std::vector<double> w(o.features);
  for (double& v : w) v = normal(rng) / std::sqrt(o.features);
  d.t.resize(o.samples);
  for (int i = 0; i < o.samples; ++i) {
    double z = 0;
    for (int k = 0; k < o.features; ++k) z += d.x[static_cast<size_t>(i) * o.features + k] * w[k];
    d.t[i] = std::sin(z) + 0.05 * normal(rng);
  }
  return d;
}

// Each step's global batch: consecutive slices of a shuffled order, reshuffled every epoch.
std::vector<std::vector<int>> makeBatches(const Options& o) {
  std::mt19937_64 rng(o.seed + 2);
  std::vector<int> order(o.samples);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int>> batches;
  int at = 0;
  for (int s = 0; s < o.steps; ++s) {
    if (at + o.batch > o.samples) {
      std::shuffle(order.begin(), order.end(), rng);
      at = 0;
    }
    batches.emplace_back(order.begin() + at, order.begin() + at + o.batch);
    at += o.batch;
  }
  return batches;
}

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parseOptions(argc, argv);
  const int rank = envInt("CHORUS_RANK", 0);
  const int nranks = envInt("CHORUS_NRANKS", 1);
  if (nranks > 1 && std::getenv("NCCL_COMM_ID") == nullptr &&
      std::getenv("CHORUS_COMM_ID") == nullptr) {
    std::fprintf(stderr, "no NCCL_COMM_ID: launch with chorusrun -n N %s\n", argv[0]);
    return 2;
  }
  if (o.batch < nranks) {
    std::fprintf(stderr, "--batch %d must be at least the %d ranks\n", o.batch, nranks);
    return 2;
  }

  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
  ncclComm_t comm = nullptr;
  NCCL_CHECK(chorusCommInitRankHost(&comm, nranks, id, rank, nullptr), nullptr);

  const Data data = makeData(o);
  const auto batches = makeBatches(o);
  Mlp model(o.features, o.hidden, o.seed);
  std::vector<double> losses;
  if (rank == 0)
    std::printf(
        "data parallel (C API): %d ranks, MLP %d-%d-1 (%zu parameters), global batch %d, "
        "%d steps\n",
        nranks, o.features, o.hidden, model.params.size(), o.batch, o.steps);

  // Compression covers the training's sum all-reduces; the checks below run exact.
  NCCL_CHECK(chorusCommSetCompression(comm, o.compress), comm);
  auto start = std::chrono::steady_clock::now();
  for (const std::vector<int>& batch : batches) {
    // This rank's shard: rows [lo, hi) of the batch, shards differing by at most one row.
    size_t n = batch.size();
    size_t lo = n * rank / nranks, hi = n * (rank + 1) / nranks;
    double loss = model.lossAndGradSum(data.x, data.t, batch.data() + lo, hi - lo);
    NCCL_CHECK(ncclAllReduce(model.grad.data(), model.grad.data(), model.grad.size(), ncclDouble,
                             ncclSum, comm, nullptr),
               comm);
    NCCL_CHECK(ncclAllReduce(&loss, &loss, 1, ncclDouble, ncclSum, comm, nullptr), comm);
    model.step(o.lr / static_cast<double>(n));
    losses.push_back(loss / static_cast<double>(n));
  }
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool compressed = o.compress != chorusCompressNone;
  unsigned long long rawBytes = 0, wireBytes = 0;
  NCCL_CHECK(chorusCommCompressionStats(comm, &rawBytes, &wireBytes), comm);
  NCCL_CHECK(chorusCommSetCompression(comm, chorusCompressNone), comm);
  if (rank == 0 && compressed)
    std::printf("compressed all-reduce: rank 0 sent %llu bytes for %llu uncompressed (%.2fx)\n",
                wireBytes, rawBytes, wireBytes > 0 ? double(rawBytes) / double(wireBytes) : 0.0);
  if (rank == 0) {
    int every = std::max(1, o.steps / 8);
    for (int s = 0; s < o.steps; ++s)
      if (s % every == 0 || s == o.steps - 1) std::printf("  step %4d  loss %.6f\n", s, losses[s]);
    std::printf("trained in %.2f s\n", took);
  }

  int failures = 0;
  // Identical parameters everywhere: element-wise max and min over the ranks agree exactly.
  std::vector<double> hi(model.params.size()), lo(model.params.size());
  NCCL_CHECK(
      ncclAllReduce(model.params.data(), hi.data(), hi.size(), ncclDouble, ncclMax, comm, nullptr),
      comm);
  NCCL_CHECK(
      ncclAllReduce(model.params.data(), lo.data(), lo.size(), ncclDouble, ncclMin, comm, nullptr),
      comm);
  if (std::memcmp(hi.data(), lo.data(), hi.size() * sizeof(double)) != 0) {
    std::fprintf(stderr, "FAILED: rank %d: the ranks' parameters differ\n", rank);
    ++failures;
  }

  if (rank == 0) {
    Mlp ref(o.features, o.hidden, o.seed);
    double lossErr = 0, paramErr = 0, paramScale = 0;
    for (int s = 0; s < o.steps; ++s) {
      const std::vector<int>& batch = batches[s];
      double loss = ref.lossAndGradSum(data.x, data.t, batch.data(), batch.size()) / batch.size();
      ref.step(o.lr / static_cast<double>(batch.size()));
      lossErr = std::max(lossErr, std::fabs(losses[s] - loss) / std::fabs(loss));
    }
    for (size_t i = 0; i < ref.params.size(); ++i) {
      paramErr = std::max(paramErr, std::fabs(model.params[i] - ref.params[i]));
      paramScale = std::max(paramScale, std::fabs(ref.params[i]));
    }
    paramErr /= paramScale;
    std::printf("single-process reference: max relative difference: losses %.2e, parameters %.2e\n",
                lossErr, paramErr);
    if (!compressed && !(lossErr <= 1e-9)) {
      std::fprintf(stderr, "FAILED: the loss curve differs from the single-process run\n");
      ++failures;
    }
    if (!compressed && !(paramErr <= 1e-9)) {
      std::fprintf(stderr, "FAILED: the final parameters differ from the single-process run\n");
      ++failures;
    }
    // Training did something: the loss over the whole data set fell by half at least.
    std::vector<int> all(o.samples);
    std::iota(all.begin(), all.end(), 0);
    Mlp init(o.features, o.hidden, o.seed);
    double before = init.lossAndGradSum(data.x, data.t, all.data(), all.size()) / o.samples;
    double after = model.lossAndGradSum(data.x, data.t, all.data(), all.size()) / o.samples;
    std::printf("loss over all %d samples: %.6f before, %.6f after\n", o.samples, before, after);
    if (!(after < 0.5 * before)) {
      std::fprintf(stderr, "FAILED: the loss did not fall (%.4f -> %.4f)\n", before, after);
      ++failures;
    }
    if (compressed) {
      const double exact = ref.lossAndGradSum(data.x, data.t, all.data(), all.size()) / o.samples;
      const double rel = std::fabs(after - exact) / exact;
      std::printf(
          "final loss %.6f against %.6f uncompressed: relative difference %.2e (at most %g)\n",
          after, exact, rel, kCompressedLossTolerance);
      if (!(rel <= kCompressedLossTolerance)) {
        std::fprintf(stderr,
                     "FAILED: the compressed run's final loss is too far from the exact run's\n");
        ++failures;
      }
    }
  }

  NCCL_CHECK(ncclAllReduce(&failures, &failures, 1, ncclInt32, ncclMax, comm, nullptr), comm);
  NCCL_CHECK(ncclCommDestroy(comm), nullptr);
  if (failures != 0) return 1;
  if (rank == 0)
    std::printf(compressed ? "OK: %d ranks trained the same parameters, as well as one process\n"
                           : "OK: %d ranks trained the same parameters as one process\n",
                nranks);
  return 0;
}
