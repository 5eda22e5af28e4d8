// The device reduction kernels on a GPU, bit for bit against the host kernel reduceCopy. Without
// a device the program exits 77, which meson reports as a skipped test.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cuda/device_reduce.h"
#include "reduce_cases.h"

namespace chorus {
namespace {

Status cudaCheck(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::ok();
  return Status(Code::kUnhandledCudaError, std::string(what) + ": " + cudaGetErrorString(err));
}

// A device copy of the test arena, kept across cases and grown on demand, and the stream the
// kernels run on.
class DeviceArena {
 public:
  DeviceArena() = default;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  ~DeviceArena() {
    if (mem_ != nullptr) cudaFree(mem_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status run(unsigned char* host, size_t bytes, const ReduceCopyArgs& args) {
    if (stream_ == nullptr) {
      CHORUS_TRY(cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                           "cudaStreamCreateWithFlags"));
    }
    if (bytes > capacity_) {
      if (mem_ != nullptr) CHORUS_TRY(cudaCheck(cudaFree(mem_), "cudaFree"));
      mem_ = nullptr;
      capacity_ = 0;
      void* p = nullptr;
      CHORUS_TRY(cudaCheck(cudaMalloc(&p, bytes), "cudaMalloc"));
      mem_ = static_cast<unsigned char*>(p);
      capacity_ = bytes;
    }
    // cudaMalloc returns 256-byte aligned memory, as the host arena is: offsets keep alignment.
    auto onDevice = [&](const void* p) -> unsigned char* {
      return p == nullptr ? nullptr : mem_ + (static_cast<const unsigned char*>(p) - host);
    };
    ReduceCopyArgs dev = args;
    dev.peer = onDevice(args.peer);
    dev.local = onDevice(args.local);
    dev.dst0 = onDevice(args.dst0);
    dev.dst1 = onDevice(args.dst1);
    CHORUS_TRY(cudaCheck(cudaMemcpyAsync(mem_, host, bytes, cudaMemcpyHostToDevice, stream_),
                         "cudaMemcpyAsync to device"));
    CHORUS_TRY(deviceReduceCopy(dev, stream_));
    CHORUS_TRY(cudaCheck(cudaMemcpyAsync(host, mem_, bytes, cudaMemcpyDeviceToHost, stream_),
                         "cudaMemcpyAsync to host"));
    return cudaCheck(cudaStreamSynchronize(stream_), "kernel or copy");
  }

 private:
  unsigned char* mem_ = nullptr;
  size_t capacity_ = 0;
  cudaStream_t stream_ = nullptr;
};

class DeviceReduce : public ::testing::TestWithParam<DataType> {};

TEST_P(DeviceReduce, MatchesHostKernel) {
  DeviceArena arena;
  reducecheck::checkAllCases(GetParam(),
                             [&](unsigned char* host, size_t bytes, const ReduceCopyArgs& args) {
                               return arena.run(host, bytes, args);
                             });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceReduce, ::testing::ValuesIn(reducecheck::allDataTypes()),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(dataTypeName(info.param));
                         });

TEST(DeviceReduceArgs, NothingToDoLaunchesNothing) {
  RedOp sum;
  ReduceCopyArgs args;
  args.op = &sum;
  EXPECT_TRUE(deviceReduceCopy(args, nullptr).isOk());  // no buffers at all
  int host = 0;
  args.local = &host;  // never touched: count is 0
  args.dst0 = &host;
  EXPECT_TRUE(deviceReduceCopy(args, nullptr).isOk());
}

TEST(DeviceReduceArgs, UnknownTypeIsInvalidArgument) {
  int host = 0;
  ReduceCopyArgs args;
  args.local = &host;
  args.dst0 = &host;
  args.count = 1;
  args.type = DataType::kNumTypes;
  EXPECT_EQ(deviceReduceCopy(args, nullptr).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace chorus

// Decides between running and skipping before GoogleTest starts.
int main(int argc, char** argv) {
  int devices = 0;
  chorus::Status st = chorus::deviceCount(&devices);
  if (!st.isOk()) {
    std::fprintf(stderr, "cannot count CUDA devices: %s\n", st.message().c_str());
    return 1;
  }
  if (devices == 0) {
    std::printf("no CUDA device (or no driver): skipping the device reduction tests\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
