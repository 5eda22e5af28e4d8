// Bandwidth of the device reduction kernel (deviceReduceCopy: two inputs, one output) against a
// device-to-device cudaMemcpy of the same buffers, on the current GPU. Rates count the bytes
// read plus the bytes written (copy: 2N, reduce-copy of two inputs: 3N), so the two are
// compared on memory traffic; "of copy" is reduce-copy's rate over the copy's. A plain program
// rather than a Google Benchmark binary, so that it builds on GPU machines without that
// library. Without a usable GPU it says so and exits 0.
//   device_reduce_bw [MiB ...]        sizes of each buffer (default 256 1024)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda/device_reduce.h"

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "device_reduce_bw: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// Median of `reps` timings (ms) of `iters` calls of fn, after one warm-up call.
template <class Fn>
double medianMs(cudaStream_t s, int reps, int iters, Fn fn) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  fn();
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(a, s), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) fn();
    check(cudaEventRecord(b, s), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "cudaEventElapsedTime");
    ms.push_back(static_cast<double>(t) / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("device_reduce_bw: no usable CUDA device (%s): nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "none");
    return 0;
  }
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) mib.push_back(std::strtoull(argv[i], nullptr, 10));
  if (mib.empty()) mib = {256, 1024};
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "# device_reduce_bw on %s: median of 7 timings of 10 calls each; GB/s of bytes "
      "read + written\n",
      prop.name);
  std::printf("# %10s  %12s  %22s  %8s  %22s  %8s\n", "MiB", "copy GB/s", "reduce-copy f32 GB/s",
              "of copy", "reduce-copy bf16 GB/s", "of copy");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  for (size_t m : mib) {
    const size_t bytes = m << 20;
    void *x, *y, *z;
    check(cudaMalloc(&x, bytes), "cudaMalloc");
    check(cudaMalloc(&y, bytes), "cudaMalloc");
    check(cudaMalloc(&z, bytes), "cudaMalloc");
    check(cudaMemset(x, 0, bytes), "cudaMemset");
    check(cudaMemset(y, 0, bytes), "cudaMemset");
    const double copyMs = medianMs(s, 7, 10, [&] {
      check(cudaMemcpyAsync(z, x, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    });
    double reduceMs[2];
    const chorus::DataType types[2] = {chorus::DataType::kFloat32, chorus::DataType::kBfloat16};
    for (int t = 0; t < 2; ++t) {
      chorus::RedOp op;  // sum
      chorus::ReduceCopyArgs a;
      a.peer = x;
      a.local = y;
      a.dst0 = z;
      a.count = bytes / chorus::dataTypeSize(types[t]);
      a.type = types[t];
      a.op = &op;
      reduceMs[t] = medianMs(s, 7, 10, [&] {
        chorus::Status st = chorus::deviceReduceCopy(a, s);
        if (!st.isOk()) {
          std::fprintf(stderr, "device_reduce_bw: %s\n", st.message().c_str());
          std::exit(1);
        }
      });
    }
    const double copyGBps = 2.0 * bytes / (copyMs * 1e6);
    const double f32GBps = 3.0 * bytes / (reduceMs[0] * 1e6);
    const double bf16GBps = 3.0 * bytes / (reduceMs[1] * 1e6);
    std::printf("  %10zu  %12.1f  %22.1f  %8.3f  %22.1f  %8.3f\n", m, copyGBps, f32GBps,
                f32GBps / copyGBps, bf16GBps, bf16GBps / copyGBps);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
  }
  cudaStreamDestroy(s);
  return 0;
}
