// Data types, deterministic inputs and exact references for the perf tools' -c check.
#ifndef CHORUS_PERF_VERIFY_H_
#define CHORUS_PERF_VERIFY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common.h"
#include "nccl.h"

namespace chorus::perf {

enum class Kind { kSigned, kUnsigned, kFloat };

struct TypeInfo {
  const char* name;  // as nccl-tests prints it
  ncclDataType_t type;
  size_t size;
  Kind kind;
  int expBits, mantBits;  // floating formats only
  bool ieee;              // all-ones exponent is inf/NaN (false for e4m3: NaN is S.1111.111)

  bool isFloat() const { return kind == Kind::kFloat; }
  // Every integer of magnitude <= exactBound() is exactly representable and in range.
  int64_t exactBound() const;
  // The largest k (capped at 30) such that +-2^k is exactly representable.
  int maxPow2() const;
  double roundoff() const;      // relative error of one rounding to nearest: 2^-(mantBits+1)
  double minSubnormal() const;  // smallest positive value
};

// Every type, in nccl-tests' order (the order -d all runs them).
extern const TypeInfo kTypes[];
extern const int kNumTypes;
// The type named `name` (canonical or an alias such as fp16, bf16, char); nullptr if none.
const TypeInfo* findType(const std::string& name);

enum PerfOp { kSum, kProd, kMax, kMin, kAvg, kMulSum, kNumPerfOps };
extern const char* const kOpNames[kNumPerfOps];

// Round-to-nearest-even codec for small binary floating formats (half, bfloat16, fp8).
uint64_t encodeFloat(double x, int expBits, int mantBits, bool ieee);
double decodeFloat(uint64_t bits, int expBits, int mantBits, bool ieee);

// Stores v, which must be exactly representable in t, as element i of buf.
void storeElement(const TypeInfo& t, void* buf, size_t i, int64_t v);

// Input element `index` of `rank`: an integer that every rank can compute for every other
// rank. Values are chosen per (type, op, nranks) so that every reduction order gives the exact
// result: sums stay within exactBound (so every partial sum is exact), products are +-2^k with
// 2^k representable, max/min compare representable values. Only a floating avg rounds; its
// inputs are non-zero on a few ranks per element only, few enough that the rounding bound stays
// below half the contribution of one rank, so a lost contribution is still caught.
class Inputs {
 public:
  Inputs(const TypeInfo& t, PerfOp op, int nranks, uint64_t seed);
  int64_t value(int rank, size_t index) const;
  // The PreMulSum factor of `rank` for mulsum (1 otherwise).
  int64_t scalar(int rank) const { return op_ == kMulSum ? rank % 2 + 1 : 1; }

 private:
  uint64_t perIndex(size_t index, uint64_t range) const;

  const TypeInfo& type_;
  PerfOp op_;
  uint64_t nranks_;
  uint64_t seed_;
  bool signed_;          // inputs may be negative
  int64_t span_;         // sum-like inputs lie in [-span_, span_] (or [0, span_])
  int64_t sparseRanks_;  // span_ == 0: at most this many ranks contribute +-1 per element
  bool floatAvg_;        // avg of a floating type: values in [1, span_] on contributors_ ranks
  uint64_t contributors_;
  int pow2_;  // prod: at most this many factors of 2 per element
};

// Compares received elements with the reference computed from every rank's inputs: exactly
// (with the type's wraparound) for integers, exactly for floats except avg. With m non-zero
// inputs, a floating avg may round m times premultiplying (plus m for the rounded 1/n), m-1
// times adding and once converting: it is allowed (3m+2) roundoffs of sum(|input|)/nranks plus
// m+1 smallest subnormals for results below the normal range.
class Checker {
 public:
  Checker(const TypeInfo& t, PerfOp op, const Inputs& in, int nranks)
      : t_(t), op_(op), in_(in), nranks_(nranks) {}
  bool matches(const void* buf, size_t i, const Source& src) const;

 private:
  bool matchesInt(uint64_t got, const Source& src) const;
  bool matchesFloat(double got, const Source& src) const;
  uint64_t mask() const;
  int64_t widen(uint64_t bits) const;
  bool less(int64_t a, int64_t b) const;

  const TypeInfo& t_;
  PerfOp op_;
  const Inputs& in_;
  int nranks_;
};

}  // namespace chorus::perf

#endif  // CHORUS_PERF_VERIFY_H_
