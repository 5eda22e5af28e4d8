// The device reduction kernels' own code run on the CPU (deviceReduceCopyOnHost), bit for bit
// against the host kernel reduceCopy: the formats, the step chosen for each case and the loop
// bounds of the packed and element paths, checked where there is no GPU.
#include <gtest/gtest.h>

#include <string>

#include "cuda/device_reduce.h"
#include "reduce_cases.h"

namespace chorus {
namespace {

class DeviceReduceOnHost : public ::testing::TestWithParam<DataType> {};

TEST_P(DeviceReduceOnHost, MatchesHostKernel) {
  reducecheck::checkAllCases(GetParam(), [](unsigned char*, size_t, const ReduceCopyArgs& args) {
    return deviceReduceCopyOnHost(args);
  });
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DeviceReduceOnHost,
                         ::testing::ValuesIn(reducecheck::allDataTypes()),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(dataTypeName(info.param));
                         });

TEST(DeviceReduceOnHostArgs, UnknownTypeIsInvalidArgument) {
  int host = 0;
  ReduceCopyArgs args;
  args.local = &host;
  args.dst0 = &host;
  args.count = 1;
  args.type = DataType::kNumTypes;
  EXPECT_EQ(deviceReduceCopyOnHost(args).code(), Code::kInvalidArgument);
}

TEST(DeviceCount, SucceedsWithOrWithoutADriver) {
  int count = -1;
  Status st = deviceCount(&count);
  ASSERT_TRUE(st.isOk()) << st.message();
  EXPECT_GE(count, 0);
  EXPECT_EQ(deviceCount(nullptr).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace chorus
