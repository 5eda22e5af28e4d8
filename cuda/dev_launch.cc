#include "cuda/dev_launch.h"

#include "exec/reduce.h"

namespace chorus {
namespace dev {

// One per data type, each in its own generated file (dev_kernels_type.cu.in).
Status launchType0(const Launch&, int, int, void*);
Status launchType1(const Launch&, int, int, void*);
Status launchType2(const Launch&, int, int, void*);
Status launchType3(const Launch&, int, int, void*);
Status launchType4(const Launch&, int, int, void*);
Status launchType5(const Launch&, int, int, void*);
Status launchType6(const Launch&, int, int, void*);
Status launchType7(const Launch&, int, int, void*);
Status launchType8(const Launch&, int, int, void*);
Status launchType9(const Launch&, int, int, void*);
Status launchType10(const Launch&, int, int, void*);
Status launchType11(const Launch&, int, int, void*);

Status preloadType0(int*);
Status preloadType1(int*);
Status preloadType2(int*);
Status preloadType3(int*);
Status preloadType4(int*);
Status preloadType5(int*);
Status preloadType6(int*);
Status preloadType7(int*);
Status preloadType8(int*);
Status preloadType9(int*);
Status preloadType10(int*);
Status preloadType11(int*);

Result<int> preloadKernels() {
  using Fn = Status (*)(int*);
  static constexpr Fn kByType[] = {preloadType0, preloadType1, preloadType2,  preloadType3,
                                   preloadType4, preloadType5, preloadType6,  preloadType7,
                                   preloadType8, preloadType9, preloadType10, preloadType11};
  int minBlocks = 1 << 20;
  for (Fn f : kByType) CHORUS_TRY(f(&minBlocks));
  return minBlocks;
}

Status launchOnStream(const Launch& launch, int nblocks, int nthreads, void* cudaStream) {
  using Fn = Status (*)(const Launch&, int, int, void*);
  static constexpr Fn kByType[] = {launchType0, launchType1, launchType2,  launchType3,
                                   launchType4, launchType5, launchType6,  launchType7,
                                   launchType8, launchType9, launchType10, launchType11};
  static_assert(sizeof(kByType) / sizeof(kByType[0]) == static_cast<size_t>(DataType::kNumTypes),
                "a kernel file for every data type");
  if (launch.nworks == 0) return Status::ok();
  if (launch.nworks > kMaxLaunchWorks || nblocks < 1 || nblocks > kMaxChannels)
    return invalidArgument("launch of %d works on %d blocks", launch.nworks, nblocks);
  if (nthreads < kMinBlockThreads || nthreads > kBlockThreads || nthreads % 32 != 0)
    return invalidArgument("launch of blocks of %d threads", nthreads);
  const unsigned type = launch.works[0].type;
  if (type >= static_cast<unsigned>(DataType::kNumTypes))
    return invalidArgument("no collective kernel for data type %u", type);
  return kByType[type](launch, nblocks, nthreads, cudaStream);
}

}  // namespace dev
}  // namespace chorus
