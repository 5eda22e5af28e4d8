// Exact reference data for reduction tests: small integer inputs whose partial sums and
// products stay exactly representable in every type (also fp8), so every rank can compute the
// expected result of any reduction order independently of the library; helpers that hold a
// PreMulSum operator, count the wrong elements of a result and check a reduce-scatter.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.h"

namespace chorus_test {
namespace ref {

enum Op { kSum, kProd, kMax, kMin, kAvg, kPreMulSum, kNumTestOps };
inline const char* const kOpNames[] = {"sum", "prod", "max", "min", "avg", "premulsum"};

inline bool isUnsigned(ncclDataType_t t) {
  return t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
}

// Element i of rank's input: small integers whose partial sums/products stay exact in the type.
inline double inputValue(int rank, size_t i, ncclDataType_t type, Op op) {
  auto k = static_cast<int64_t>(i);
  switch (op) {
    case kProd: {
      int64_t m = (rank + k) % 3;
      if (isUnsigned(type)) return m == 0 ? 2 : 1;
      return m == 0 ? 2 : (m == 1 ? 1 : -1);
    }
    case kMax:
    case kMin: {
      int64_t v = (rank * 5 + k * 11) % 17;
      return isUnsigned(type) ? v : v - 8;
    }
    default: {
      if (type == ncclFloat8e5m2) return static_cast<double>((rank * 7 + k * 3) % 3 - 1);
      int64_t v = (rank * 7 + k * 3) % 5;
      return isUnsigned(type) ? v : v - 2;
    }
  }
}

// The reduction over ranks [0, nranks) of element i; PreMulSum uses the scalar 2.
inline double expectedValue(int nranks, size_t i, ncclDataType_t type, Op op) {
  double acc = inputValue(0, i, type, op);
  if (op == kPreMulSum) acc *= 2;
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(r, i, type, op);
    switch (op) {
      case kProd:
        acc *= v;
        break;
      case kMax:
        acc = std::max(acc, v);
        break;
      case kMin:
        acc = std::min(acc, v);
        break;
      case kPreMulSum:
        acc += 2 * v;
        break;
      default:
        acc += v;
    }
  }
  if (op == kAvg) {
    if (chorus_test::isFloatType(type)) return acc / nranks;
    return std::trunc(acc / nranks);
  }
  return chorus_test::wrapToType(acc, type);
}

// Avg of floats is one division rounded to the type; everything else must be exact.
inline double tolerance(ncclDataType_t type, Op op, double expected) {
  if (op != kAvg || !chorus_test::isFloatType(type)) return 0;
  double eps = type == ncclFloat64      ? 1e-15
               : type == ncclFloat32    ? 1e-7
               : type == ncclFloat16    ? 1e-3
               : type == ncclBfloat16   ? 8e-3
               : type == ncclFloat8e4m3 ? 0.07
                                        : 0.13;
  return eps * std::fabs(expected) + 1e-30;
}

// Holds a PreMulSum operator for the duration of one call.
struct ScopedOp {
  ScopedOp(Op op, ncclDataType_t type, ncclComm_t comm) : comm(comm) {
    value = static_cast<ncclRedOp_t>(op);
    if (op != kPreMulSum) return;
    alignas(8) unsigned char scalar[8] = {};
    chorus_test::storeExact(scalar, 0, type, 2.0);
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&value, scalar, type, ncclScalarHostImmediate, comm),
              ncclSuccess);
    created = true;
  }
  ~ScopedOp() {
    if (created) ncclRedOpDestroy(value, comm);
  }
  ncclComm_t comm;
  ncclRedOp_t value;
  bool created = false;
};

inline size_t countWrong(const void* got, size_t count, size_t firstIndex, int nranks,
                         ncclDataType_t type, Op op, const std::string& what) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) {
    double want = expectedValue(nranks, firstIndex + i, type, op);
    double v = chorus_test::loadValue(got, i, type);
    if (!(std::fabs(v - want) <= tolerance(type, op, want)) && wrong++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << v << ", expected " << want;
  }
  return wrong;
}

// Reduce-scatter of reference inputs on this rank, checked against the reference.
inline void checkReduceScatter(int rank, int n, ncclComm_t comm, ncclDataType_t type, Op op,
                               size_t count, bool inPlace) {
  size_t es = chorus_test::typeSize(type);
  std::vector<unsigned char> send(count * n * es + 8), recv(count * es + 8);
  for (size_t j = 0; j < count * n; ++j)
    chorus_test::storeExact(send.data(), j, type, inputValue(rank, j, type, op));
  unsigned char* out = inPlace ? send.data() + rank * count * es : recv.data();
  ScopedOp redop(op, type, comm);
  ASSERT_EQ(ncclReduceScatter(send.data(), out, count, type, redop.value, comm, nullptr),
            ncclSuccess)
      << ncclGetLastError(comm);
  std::string what = "rank " + std::to_string(rank) + " reduce-scatter " +
                     chorus_test::typeName(type) + " " + kOpNames[op] + " count " +
                     std::to_string(count) + (inPlace ? " in-place" : "");
  EXPECT_EQ(countWrong(out, count, rank * count, n, type, op, what), 0u);
}

}  // namespace ref
}  // namespace chorus_test
