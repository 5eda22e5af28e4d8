#include "verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "element codecs assume little endian");

namespace chorus::perf {

const TypeInfo kTypes[] = {
    {"int8", ncclInt8, 1, Kind::kSigned, 0, 0, false},
    {"uint8", ncclUint8, 1, Kind::kUnsigned, 0, 0, false},
    {"int32", ncclInt32, 4, Kind::kSigned, 0, 0, false},
    {"uint32", ncclUint32, 4, Kind::kUnsigned, 0, 0, false},
    {"int64", ncclInt64, 8, Kind::kSigned, 0, 0, false},
    {"uint64", ncclUint64, 8, Kind::kUnsigned, 0, 0, false},
    {"half", ncclFloat16, 2, Kind::kFloat, 5, 10, true},
    {"float", ncclFloat32, 4, Kind::kFloat, 8, 23, true},
    {"double", ncclFloat64, 8, Kind::kFloat, 11, 52, true},
    {"bfloat16", ncclBfloat16, 2, Kind::kFloat, 8, 7, true},
    {"f8e4m3", ncclFloat8e4m3, 1, Kind::kFloat, 4, 3, false},
    {"f8e5m2", ncclFloat8e5m2, 1, Kind::kFloat, 5, 2, true},
};
const int kNumTypes = sizeof(kTypes) / sizeof(kTypes[0]);

const char* const kOpNames[kNumPerfOps] = {"sum", "prod", "max", "min", "avg", "mulsum"};

const TypeInfo* findType(const std::string& name) {
  static const char* const kAliases[][2] = {
      {"char", "int8"},       {"int", "int32"},         {"float16", "half"},
      {"fp16", "half"},       {"float32", "float"},     {"fp32", "float"},
      {"float64", "double"},  {"fp64", "double"},       {"bf16", "bfloat16"},
      {"fp8_e4m3", "f8e4m3"}, {"float8e4m3", "f8e4m3"}, {"e4m3", "f8e4m3"},
      {"fp8_e5m2", "f8e5m2"}, {"float8e5m2", "f8e5m2"}, {"e5m2", "f8e5m2"}};
  std::string canonical = name;
  for (const auto& alias : kAliases)
    if (canonical == alias[0]) canonical = alias[1];
  for (int i = 0; i < kNumTypes; ++i)
    if (canonical == kTypes[i].name) return &kTypes[i];
  return nullptr;
}

int64_t TypeInfo::exactBound() const {
  if (isFloat()) return int64_t{1} << (mantBits + 1);
  if (size == 8) return INT64_MAX;
  int bits = 8 * static_cast<int>(size) - (kind == Kind::kSigned ? 1 : 0);
  return (int64_t{1} << bits) - 1;
}

int TypeInfo::maxPow2() const {
  int bias = (1 << (expBits - 1)) - 1;
  int k = isFloat() ? (1 << expBits) - 1 - bias - (ieee ? 1 : 0)
                    : 8 * static_cast<int>(size) - (kind == Kind::kSigned ? 2 : 1);
  return std::min(k, 30);
}

double TypeInfo::roundoff() const {
  return std::ldexp(1.0, -mantBits - 1);
}

double TypeInfo::minSubnormal() const {
  return std::ldexp(1.0, 2 - (1 << (expBits - 1)) - mantBits);
}

uint64_t encodeFloat(double x, int expBits, int mantBits, bool ieee) {
  const int bias = (1 << (expBits - 1)) - 1;
  const uint64_t maxField = (uint64_t{1} << expBits) - 1;
  const uint64_t mantMask = (uint64_t{1} << mantBits) - 1;
  const uint64_t sign = std::signbit(x) ? uint64_t{1} << (expBits + mantBits) : 0;
  if (std::isnan(x)) return sign | (maxField << mantBits) | mantMask;
  if (std::isinf(x)) return sign | (maxField << mantBits) | (ieee ? 0 : mantMask);
  double a = std::fabs(x);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  e = std::max(e - 1, 1 - bias);  // below the normal range the exponent stays at its minimum
  double q = std::nearbyint(std::ldexp(a, mantBits - e));
  if (q >= std::ldexp(1.0, mantBits + 1)) {  // rounding carried into the next binade
    q /= 2;
    ++e;
  }
  uint64_t qi = static_cast<uint64_t>(q);
  uint64_t field = (qi >> mantBits) ? static_cast<uint64_t>(e + bias) : 0;
  bool overflow = ieee ? field >= maxField
                       : field > maxField || (field == maxField && (qi & mantMask) == mantMask);
  if (overflow) return sign | (maxField << mantBits) | (ieee ? 0 : mantMask);  // inf or NaN
  return sign | (field << mantBits) | (qi & mantMask);
}

double decodeFloat(uint64_t bits, int expBits, int mantBits, bool ieee) {
  const int bias = (1 << (expBits - 1)) - 1, maxField = (1 << expBits) - 1;
  const uint64_t mantMask = (uint64_t{1} << mantBits) - 1;
  uint64_t mant = bits & mantMask;
  int field = static_cast<int>((bits >> mantBits) & static_cast<uint64_t>(maxField));
  bool negative = (bits >> (expBits + mantBits)) & 1;
  double v;
  if (field == maxField && (ieee || mant == mantMask))
    v = ieee && mant == 0 ? INFINITY : NAN;
  else if (field == 0)
    v = std::ldexp(static_cast<double>(mant), 1 - bias - mantBits);
  else
    v = std::ldexp(static_cast<double>(mant | (mantMask + 1)), field - bias - mantBits);
  return negative ? -v : v;
}

void storeElement(const TypeInfo& t, void* buf, size_t i, int64_t v) {
  char* p = static_cast<char*>(buf) + i * t.size;
  if (!t.isFloat()) {
    uint64_t u = static_cast<uint64_t>(v);  // two's complement truncation to the type's width
    std::memcpy(p, &u, t.size);
  } else if (t.type == ncclFloat32) {
    float f = static_cast<float>(v);
    std::memcpy(p, &f, sizeof(f));
  } else if (t.type == ncclFloat64) {
    double d = static_cast<double>(v);
    std::memcpy(p, &d, sizeof(d));
  } else {
    uint64_t bits = encodeFloat(static_cast<double>(v), t.expBits, t.mantBits, t.ieee);
    std::memcpy(p, &bits, t.size);
  }
}

namespace {

uint64_t loadBits(const TypeInfo& t, const void* buf, size_t i) {
  uint64_t u = 0;
  std::memcpy(&u, static_cast<const char*>(buf) + i * t.size, t.size);
  return u;
}

double loadFloat(const TypeInfo& t, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + i * t.size;
  if (t.type == ncclFloat32) {
    float f;
    std::memcpy(&f, p, sizeof(f));
    return f;
  }
  if (t.type == ncclFloat64) {
    double d;
    std::memcpy(&d, p, sizeof(d));
    return d;
  }
  return decodeFloat(loadBits(t, buf, i), t.expBits, t.mantBits, t.ieee);
}

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

Inputs::Inputs(const TypeInfo& t, PerfOp op, int nranks, uint64_t seed)
    : type_(t),
      op_(op),
      nranks_(static_cast<uint64_t>(nranks)),
      seed_(mix64(seed * 0x100000001b3ull + static_cast<uint64_t>(op))) {
  // avg stays non-negative: integer avg then truncates the same way in every convention.
  signed_ = t.kind != Kind::kUnsigned && op != kAvg;
  int64_t budget = t.exactBound() / (op == kMulSum ? 2 : 1);  // 2: the largest premultiplier
  span_ = std::min<int64_t>(31, budget / nranks);
  sparseRanks_ = std::min<int64_t>(budget, nranks);
  pow2_ = std::min(t.maxPow2(), nranks);
  floatAvg_ = t.isFloat() && op == kAvg;
  contributors_ = 1;
  if (floatAvg_) {
    // The most contributors (up to 8) whose rounding bound, (3m+2) roundoffs of m*span/n, stays
    // below half of the 1/n that one contributor adds; fp8 e5m2 gets m = span = 1 regardless.
    span_ = 1;
    for (int m = std::min(nranks, 8); m >= 1; --m) {
      double span = std::floor(1.0 / (2.0 * (3 * m + 2) * m * t.roundoff()));
      if (span >= 1) {
        contributors_ = static_cast<uint64_t>(m);
        span_ = static_cast<int64_t>(std::min(span, 31.0));
        break;
      }
    }
  }
}

// A per-element count in [0, range], the same on every rank.
uint64_t Inputs::perIndex(size_t index, uint64_t range) const {
  return mix64(seed_ + index) % (range + 1);
}

int64_t Inputs::value(int rank, size_t index) const {
  uint64_t r = static_cast<uint64_t>(rank);
  uint64_t h = mix64(seed_ ^ mix64(index * 0x2545f4914f6cdd1dull + r));
  // Which ranks get the "large" value at this index: a window rotating with the index.
  uint64_t slot = (r + index) % nranks_;
  switch (op_) {
    case kMax:
    case kMin: {
      if (!type_.isFloat()) return static_cast<int64_t>(h);  // full range: signedness matters
      int64_t b = type_.exactBound();
      return static_cast<int64_t>(h % static_cast<uint64_t>(2 * b + 1)) - b;
    }
    case kProd: {
      int64_t v = slot < perIndex(index, static_cast<uint64_t>(pow2_)) ? 2 : 1;
      return signed_ && (h & 7) == 0 ? -v : v;
    }
    default: {
      if (floatAvg_) return slot < contributors_ ? 1 + static_cast<int64_t>(h % span_) : 0;
      if (span_ >= 1) {
        uint64_t s = static_cast<uint64_t>(span_);
        return signed_ ? static_cast<int64_t>(h % (2 * s + 1)) - span_
                       : static_cast<int64_t>(h % (s + 1));
      }
      int64_t v = slot < perIndex(index, static_cast<uint64_t>(sparseRanks_)) ? 1 : 0;
      return signed_ && (h & 1) ? -v : v;
    }
  }
}

bool Checker::matches(const void* buf, size_t i, const Source& src) const {
  if (src.kind == Source::kUnchecked) return true;
  return t_.isFloat() ? matchesFloat(loadFloat(t_, buf, i), src)
                      : matchesInt(loadBits(t_, buf, i), src);
}

uint64_t Checker::mask() const {
  return t_.size == 8 ? ~uint64_t{0} : (uint64_t{1} << 8 * t_.size) - 1;
}

// The element's value as its type sees it, widened to 64 bits.
int64_t Checker::widen(uint64_t bits) const {
  int shift = 64 - 8 * static_cast<int>(t_.size);
  if (t_.kind == Kind::kSigned) return static_cast<int64_t>(bits << shift) >> shift;
  return static_cast<int64_t>(bits & mask());
}

bool Checker::less(int64_t a, int64_t b) const {
  if (t_.kind == Kind::kUnsigned) return static_cast<uint64_t>(a) < static_cast<uint64_t>(b);
  return a < b;
}

bool Checker::matchesInt(uint64_t got, const Source& src) const {
  uint64_t want;
  if (src.kind == Source::kCopy) {
    want = static_cast<uint64_t>(in_.value(src.rank, src.index));
  } else {
    // 64-bit wrapping arithmetic agrees with the type's own wraparound in the low bits.
    int64_t acc = 0;
    for (int r = 0; r < nranks_; ++r) {
      int64_t v = in_.value(r, src.index);
      uint64_t u = static_cast<uint64_t>(v);
      switch (op_) {
        case kProd:
          acc = r == 0 ? v : static_cast<int64_t>(static_cast<uint64_t>(acc) * u);
          break;
        case kMax:
          if (r == 0 || less(acc, widen(u))) acc = widen(u);
          break;
        case kMin:
          if (r == 0 || less(widen(u), acc)) acc = widen(u);
          break;
        case kMulSum:
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) + u * in_.scalar(r));
          break;
        default:
          acc = static_cast<int64_t>(static_cast<uint64_t>(acc) + u);
          break;
      }
    }
    // avg inputs are non-negative and their sum fits the type: truncation is unambiguous.
    want = static_cast<uint64_t>(op_ == kAvg ? acc / nranks_ : acc);
  }
  return ((got ^ want) & mask()) == 0;
}

bool Checker::matchesFloat(double got, const Source& src) const {
  double want = 0, tol = 0;
  if (src.kind == Source::kCopy) {
    want = static_cast<double>(in_.value(src.rank, src.index));
  } else {
    double magnitude = 0;
    int nonZero = 0;
    for (int r = 0; r < nranks_; ++r) {
      double v = static_cast<double>(in_.value(r, src.index));
      magnitude += std::fabs(v);
      nonZero += v != 0;
      switch (op_) {
        case kProd:
          want = r == 0 ? v : want * v;
          break;
        case kMax:
          want = r == 0 ? v : std::max(want, v);
          break;
        case kMin:
          want = r == 0 ? v : std::min(want, v);
          break;
        case kMulSum:
          want += static_cast<double>(in_.scalar(r)) * v;
          break;
        default:
          want += v;
          break;
      }
    }
    if (op_ == kAvg) {
      want /= nranks_;
      tol = (3 * nonZero + 2) * t_.roundoff() * (magnitude / nranks_) +
            (nonZero + 1) * t_.minSubnormal();
    }
  }
  return std::fabs(got - want) <= tol;
}

}  // namespace chorus::perf
