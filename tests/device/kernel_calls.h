// Collective calls run by the emulated kernels on every rank of a clique at once, each rank's
// result checked against the independent reference of the multi-rank tests (the device tests
// of cuda/dev_kernel.h's code on the CPU).
#pragma once

#include <vector>

#include "cuda/dev_emulator.h"
#include "cuda/dev_plan.h"
#include "multirank/reference.h"

namespace chorus {
namespace dev {

namespace ref = chorus_test::ref;

struct Buffers {
  std::vector<unsigned char> send, recv;
};

// What rank `rank` should hold after the collective, element by element.
double expectedAt(Coll coll, int nranks, int rank, int root, size_t count, size_t i,
                  ncclDataType_t type, ref::Op op);

struct Call {
  Coll coll;
  ncclDataType_t type;
  ref::Op op;
  size_t count;
  Proto proto;
  int nchannels;
  int root = 0;
  bool inPlace = false;
  bool deviceScalar = false;
  Algo algo = Algo::kRing;
};

size_t sendElems(const Call& c, int nranks);
size_t recvElems(const Call& c, int nranks);

// Fills rank's buffers and describes the call as a work.
Work prepare(const Call& c, int nranks, int rank, Buffers* b, unsigned char* scalar);

// Runs calls[] as consecutive launches (or as one launch when fused) on every rank at once and
// checks each rank's results after all of them.
void runCalls(int nranks, const std::vector<Call>& calls, bool fused, int threadsPerBlock,
              const EmuGeometry& g = EmuGeometry(), int* placedLinks = nullptr);

}  // namespace dev
}  // namespace chorus
