// Host reduction kernels against a reference written here on its own terms: number formats
// decoded with ldexp and rounded with nearbyint on doubles, arithmetic done in double (rounded
// to float after each step where the type computes in float) or in wrapping 64-bit integers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "exec/reduce.h"
#include "exec/reduce_variants.h"

namespace chorus {
namespace {

template <class To, class From>
To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// ---- Reference number formats ----

struct Format {
  int expBits;
  int mantBits;
  int bias;
  bool ieee;  // all-ones exponent means inf/NaN; otherwise (e4m3) only the all-ones code is NaN

  uint32_t mantMask() const { return (1u << mantBits) - 1; }
  uint32_t expMax() const { return (1u << expBits) - 1; }
  uint32_t signBit() const { return 1u << (expBits + mantBits); }
  uint32_t codeCount() const { return 2 * signBit(); }
  uint32_t maxFiniteCode() const {
    return ieee ? ((expMax() - 1) << mantBits) | mantMask()
                : (expMax() << mantBits) | (mantMask() - 1);
  }
};

constexpr Format kHalf{5, 10, 15, true};
constexpr Format kBf16{8, 7, 127, true};
constexpr Format kE4m3{4, 3, 7, false};
constexpr Format kE5m2{5, 2, 15, true};

double refDecode(const Format& f, uint32_t code) {
  uint32_t e = (code >> f.mantBits) & f.expMax();
  uint32_t m = code & f.mantMask();
  double v;
  if (f.ieee && e == f.expMax()) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
  } else if (!f.ieee && e == f.expMax() && m == f.mantMask()) {
    v = std::nan("");
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mantBits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1u << f.mantBits)),
                   static_cast<int>(e) - f.bias - f.mantBits);
  }
  return (code & f.signBit()) ? -v : v;
}

// Round to nearest even. Overflow gives infinity, or the largest finite value for e4m3.
uint32_t refEncode(const Format& f, double v) {
  uint32_t sign = std::signbit(v) ? f.signBit() : 0;
  if (std::isnan(v)) return sign | (f.ieee ? (f.expMax() << f.mantBits) | 1u : 0x7fu);
  uint32_t overflowCode = f.ieee ? f.expMax() << f.mantBits : f.maxFiniteCode();
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | overflowCode;
  // The binade's exponent; subnormals share the smallest normal exponent's spacing.
  int e = a == 0 ? 1 - f.bias : std::max(1 - f.bias, std::ilogb(a));
  double quantum = std::ldexp(1.0, e - f.mantBits);
  double q = std::nearbyint(a / quantum);
  if (q * quantum > refDecode(f, f.maxFiniteCode())) return sign | overflowCode;
  // A quotient that rounded up to the next binade lands on that binade's first code.
  return sign | ((static_cast<uint32_t>(e + f.bias) << f.mantBits) + static_cast<uint32_t>(q) -
                 (1u << f.mantBits));
}

struct FormatCase {
  const char* name;
  Format fmt;
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);
};

const FormatCase kFormats[] = {
    {"half", kHalf, [](uint32_t c) { return halfToFloat(static_cast<uint16_t>(c)); },
     [](float f) -> uint32_t { return floatToHalf(f); }},
    {"bfloat16", kBf16, [](uint32_t c) { return bfloat16ToFloat(static_cast<uint16_t>(c)); },
     [](float f) -> uint32_t { return floatToBfloat16(f); }},
    {"f8e4m3", kE4m3, [](uint32_t c) { return fp8e4m3ToFloat(static_cast<uint8_t>(c)); },
     [](float f) -> uint32_t { return floatToFp8e4m3(f); }},
    {"f8e5m2", kE5m2, [](uint32_t c) { return fp8e5m2ToFloat(static_cast<uint8_t>(c)); },
     [](float f) -> uint32_t { return floatToFp8e5m2(f); }},
};

bool isNanCode(const Format& f, uint32_t c) {
  return std::isnan(refDecode(f, c));
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- Scalar conversions ----

TEST(ReduceConvert, DecodesEveryCode) {
  for (const FormatCase& fc : kFormats) {
    for (uint32_t c = 0; c < fc.fmt.codeCount(); ++c) {
      double want = refDecode(fc.fmt, c);
      float got = fc.decode(c);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << fc.name << " code " << hex(c);
      } else {
        ASSERT_EQ(static_cast<double>(got), want) << fc.name << " code " << hex(c);
        ASSERT_EQ(std::signbit(got), std::signbit(want)) << fc.name << " code " << hex(c);
      }
    }
  }
}

TEST(ReduceConvert, EveryValueRoundTrips) {
  for (const FormatCase& fc : kFormats) {
    for (uint32_t c = 0; c < fc.fmt.codeCount(); ++c) {
      if (isNanCode(fc.fmt, c)) continue;
      float f = static_cast<float>(refDecode(fc.fmt, c));
      ASSERT_EQ(fc.encode(f), c) << fc.name << " value " << f;
    }
  }
}

TEST(ReduceConvert, NanStaysNan) {
  const uint32_t nanBits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
  for (const FormatCase& fc : kFormats) {
    for (uint32_t bits : nanBits) {
      uint32_t code = fc.encode(bitCast<float>(bits));
      EXPECT_TRUE(isNanCode(fc.fmt, code))
          << fc.name << " from " << hex(bits) << " gave " << hex(code);
      EXPECT_EQ((code & fc.fmt.signBit()) != 0, (bits >> 31) != 0) << fc.name;
    }
  }
}

// Between two neighbouring codes the midpoint goes to the even code, anything off it to the
// nearer code; the same holds below zero.
TEST(ReduceConvert, MidpointsTieToEven) {
  for (const FormatCase& fc : kFormats) {
    for (uint32_t c = 0; c < fc.fmt.maxFiniteCode(); ++c) {
      double mid = (refDecode(fc.fmt, c) + refDecode(fc.fmt, c + 1)) / 2;
      float f = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(f), mid) << fc.name;
      uint32_t even = (c & 1) ? c + 1 : c;
      ASSERT_EQ(fc.encode(f), even) << fc.name << " midpoint " << mid;
      ASSERT_EQ(fc.encode(-f), even | fc.fmt.signBit()) << fc.name << " midpoint " << -mid;
      ASSERT_EQ(fc.encode(std::nextafter(f, 0.0f)), c) << fc.name << " below " << mid;
      ASSERT_EQ(fc.encode(std::nextafter(f, HUGE_VALF)), c + 1) << fc.name << " above " << mid;
    }
  }
}

TEST(ReduceConvert, OverflowAndSaturation) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bffu);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00u);  // the tie goes to the even side: infinity
  EXPECT_EQ(floatToHalf(-1e30f), 0xfc00u);
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(floatToBfloat16(-inf), 0xff80u);
  // e4m3 has no infinity: everything past 448 saturates, infinity included.
  for (float v : {448.0f, 449.0f, 464.0f, 479.0f, 480.0f, 1e9f, inf}) {
    EXPECT_EQ(floatToFp8e4m3(v), 0x7eu) << v;
    EXPECT_EQ(floatToFp8e4m3(-v), 0xfeu) << -v;
  }
  EXPECT_EQ(floatToFp8e5m2(61439.0f), 0x7bu);
  EXPECT_EQ(floatToFp8e5m2(61440.0f), 0x7cu);
  EXPECT_EQ(floatToFp8e5m2(-inf), 0xfcu);
}

TEST(ReduceConvert, SubnormalsAndUnderflow) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (const FormatCase& fc : kFormats) {
    if (fc.fmt.expBits == 8) continue;  // bfloat16 shares float's range; covered by the sweeps
    double minSub = refDecode(fc.fmt, 1);
    EXPECT_EQ(fc.encode(static_cast<float>(minSub / 2)), 0u) << fc.name;  // tie to even zero
    EXPECT_EQ(fc.encode(std::nextafter(static_cast<float>(minSub / 2), 1.0f)), 1u) << fc.name;
    EXPECT_EQ(fc.encode(-tiny), fc.fmt.signBit()) << fc.name;
    EXPECT_EQ(fc.encode(tiny), 0u) << fc.name;
  }
  EXPECT_EQ(floatToBfloat16(tiny), 0u);
  EXPECT_EQ(bfloat16ToFloat(0x0001), std::ldexp(1.0f, -133));
}

TEST(ReduceConvert, RandomFloatsMatchReference) {
  std::mt19937_64 rng(7);
  for (const FormatCase& fc : kFormats) {
    for (int i = 0; i < (1 << 20); ++i) {
      float f;
      if (i & 1) {
        f = bitCast<float>(static_cast<uint32_t>(rng()));
      } else {  // concentrated on the format's own range
        int e = static_cast<int>(rng() % (2 * fc.fmt.bias + 8)) - fc.fmt.bias - fc.fmt.mantBits;
        double m = static_cast<double>(rng() >> 11) * 0x1p-53 + 1.0;
        f = static_cast<float>((rng() & 1 ? -1 : 1) * std::ldexp(m, e));
      }
      uint32_t want = refEncode(fc.fmt, f);
      uint32_t got = fc.encode(f);
      if (isNanCode(fc.fmt, want)) {
        ASSERT_TRUE(isNanCode(fc.fmt, got)) << fc.name << " " << f;
      } else {
        ASSERT_EQ(got, want) << fc.name << " " << f;
      }
    }
  }
}

TEST(ReduceTypes, NamesAndSizes) {
  const char* names[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                         "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int t = 0; t < static_cast<int>(DataType::kNumTypes); ++t) {
    EXPECT_STREQ(dataTypeName(static_cast<DataType>(t)), names[t]);
    EXPECT_EQ(dataTypeSize(static_cast<DataType>(t)), sizes[t]);
  }
}

// ---- Reference reduction ----

enum class Kind { kSigned, kUnsigned, kFloat, kDouble, kNarrow };

struct TypeInfo {
  size_t size;
  Kind kind;
  const Format* fmt;  // narrow floating types only

  bool integer() const { return kind == Kind::kSigned || kind == Kind::kUnsigned; }
};

// Indexed by DataType.
const TypeInfo kTypes[] = {
    {1, Kind::kSigned, nullptr},   {1, Kind::kUnsigned, nullptr}, {4, Kind::kSigned, nullptr},
    {4, Kind::kUnsigned, nullptr}, {8, Kind::kSigned, nullptr},   {8, Kind::kUnsigned, nullptr},
    {2, Kind::kNarrow, &kHalf},    {4, Kind::kFloat, nullptr},    {8, Kind::kDouble, nullptr},
    {2, Kind::kNarrow, &kBf16},    {1, Kind::kNarrow, &kE4m3},    {1, Kind::kNarrow, &kE5m2},
};

uint64_t loadBits(const unsigned char* p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little-endian host
  return v;
}

int64_t asSigned(uint64_t bits, size_t size) {
  unsigned shift = static_cast<unsigned>(64 - 8 * size);
  return static_cast<int64_t>(bits << shift) >> shift;
}

uint64_t truncBits(uint64_t v, size_t size) {
  return size == 8 ? v : v & ((uint64_t{1} << (8 * size)) - 1);
}

double toReal(const TypeInfo& t, uint64_t bits) {
  if (t.kind == Kind::kNarrow) return refDecode(*t.fmt, static_cast<uint32_t>(bits));
  return t.kind == Kind::kFloat ? bitCast<float>(static_cast<uint32_t>(bits))
                                : bitCast<double>(bits);
}

uint64_t fromReal(const TypeInfo& t, double v) {
  if (t.kind == Kind::kNarrow) return refEncode(*t.fmt, v);
  return t.kind == Kind::kFloat ? bitCast<uint32_t>(static_cast<float>(v)) : bitCast<uint64_t>(v);
}

struct Case {
  DataType type;
  RedOp op;
  bool finalize;
  bool hasPeer;
  bool hasLocal;

  bool avgFinal() const { return op.kind == RedKind::kAvg && finalize; }
};

// Integers: exact arithmetic modulo 2^64, then truncated to the element width.
uint64_t refInteger(const Case& c, const TypeInfo& t, uint64_t p, uint64_t l) {
  bool isSigned = t.kind == Kind::kSigned;
  auto less = [&](uint64_t a, uint64_t b) {
    return isSigned ? asSigned(a, t.size) < asSigned(b, t.size) : a < b;
  };
  uint64_t s = loadBits(c.op.scalar, t.size);
  if (isSigned) {  // sign-extend so the 64-bit product and sum agree modulo 2^width
    p = static_cast<uint64_t>(asSigned(p, t.size));
    l = static_cast<uint64_t>(asSigned(l, t.size));
    s = static_cast<uint64_t>(asSigned(s, t.size));
  }
  uint64_t o = c.op.kind == RedKind::kPreMulSum ? l * s : l;
  uint64_t r;
  if (c.hasPeer && c.hasLocal) {
    switch (c.op.kind) {
      case RedKind::kProd:
        r = p * o;
        break;
      case RedKind::kMax:
      case RedKind::kMin:  // the larger, or the smaller: o when it wins the comparison
        r = (c.op.kind == RedKind::kMax ? less(truncBits(p, t.size), truncBits(o, t.size))
                                        : less(truncBits(o, t.size), truncBits(p, t.size)))
                ? o
                : p;
        break;
      default:
        r = p + o;
    }
  } else {
    r = c.hasPeer ? p : o;
  }
  r = truncBits(r, t.size);
  if (c.avgFinal()) {
    r = isSigned ? static_cast<uint64_t>(asSigned(r, t.size) / c.op.nranks)
                 : r / static_cast<uint64_t>(c.op.nranks);
  }
  return truncBits(r, t.size);
}

// Floating types compute in float (double for double) and round once per operation. A double
// operation on float operands rounded to float gives the correctly rounded float result
// (53 >= 2 * 24 + 2), so double arithmetic followed by a cast is float arithmetic.
double refFloating(const Case& c, const TypeInfo& t, double p, double l) {
  auto step = [&](double x) {
    volatile double kept = t.kind == Kind::kDouble ? x : static_cast<double>(static_cast<float>(x));
    return static_cast<double>(kept);  // volatile: no fused multiply-add across steps
  };
  double s = toReal(t, loadBits(c.op.scalar, t.size));
  double o = c.op.kind == RedKind::kPreMulSum ? step(l * s) : l;
  double r;
  if (c.hasPeer && c.hasLocal) {
    bool nan = std::isnan(p) || std::isnan(o);
    switch (c.op.kind) {
      case RedKind::kProd:
        r = step(p * o);
        break;
      case RedKind::kMax:
        r = nan ? p + o : std::max(p, o);
        break;
      case RedKind::kMin:
        r = nan ? p + o : std::min(p, o);
        break;
      default:
        r = step(p + o);
    }
  } else {
    r = c.hasPeer ? p : o;
  }
  if (c.avgFinal()) r = step(r / c.op.nranks);
  return r;
}

// ---- The reduceCopy matrix ----

// A buffer with guard bytes around the data; the data starts 64-byte aligned or one element
// past that.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, size_t elemSize, bool unaligned) : bytes_(bytes) {
    storage_.assign(bytes + elemSize + 3 * kGuard, kFill);
    uintptr_t base = reinterpret_cast<uintptr_t>(storage_.data()) + kGuard;
    base = (base + 63) & ~uintptr_t{63};
    data_ = reinterpret_cast<unsigned char*>(base) + (unaligned ? elemSize : 0);
  }
  unsigned char* data() { return data_; }
  bool guardsIntact() const {
    for (size_t i = 0; i < storage_.size(); ++i) {
      const unsigned char* p = storage_.data() + i;
      if ((p < data_ || p >= data_ + bytes_) && *p != kFill) return false;
    }
    return true;
  }

 private:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kFill = 0xa5;
  size_t bytes_;
  std::vector<unsigned char> storage_;
  unsigned char* data_;
};

uint64_t randomOperand(const TypeInfo& t, std::mt19937_64& rng) {
  uint64_t bits = rng();
  unsigned pick = static_cast<unsigned>(bits >> 56);
  if (t.integer() || pick < 32) {
    return truncBits(rng(), t.size);  // any bit pattern: NaN, inf, subnormals too
  }
  if (pick < 40) return fromReal(t, (pick & 1) ? -0.0 : 0.0);
  double v = std::ldexp(static_cast<double>(rng() % 2001) - 1000.0, -static_cast<int>(pick % 9));
  return fromReal(t, v);
}

enum class Alias { kNone, kDst0IsLocal, kDst0IsPeer };

// Runs one configuration; returns an empty string or what went wrong first.
std::string runCase(void (*variant)(const ReduceCopyArgs&), const Case& c, bool dst1, Alias alias,
                    size_t count, bool unaligned, std::mt19937_64& rng) {
  TypeInfo t = kTypes[static_cast<int>(c.type)];
  size_t bytes = count * t.size;
  GuardedBuffer peer(bytes, t.size, unaligned), local(bytes, t.size, unaligned);
  GuardedBuffer out0(bytes, t.size, unaligned), out1(bytes, t.size, unaligned);
  std::vector<uint64_t> p(count), l(count);
  for (size_t i = 0; i < count; ++i) {
    p[i] = randomOperand(t, rng);
    l[i] = randomOperand(t, rng);
    std::memcpy(peer.data() + i * t.size, &p[i], t.size);
    std::memcpy(local.data() + i * t.size, &l[i], t.size);
  }
  unsigned char* dst0 = alias == Alias::kDst0IsLocal  ? local.data()
                        : alias == Alias::kDst0IsPeer ? peer.data()
                                                      : out0.data();
  ReduceCopyArgs args{c.hasPeer ? peer.data() : nullptr,
                      c.hasLocal ? local.data() : nullptr,
                      dst0,
                      dst1 ? out1.data() : nullptr,
                      count,
                      c.type,
                      &c.op,
                      c.finalize};
  variant(args);

  bool zeroSignFree = c.op.kind == RedKind::kMax || c.op.kind == RedKind::kMin;
  for (size_t i = 0; i < count; ++i) {
    uint64_t want, got = loadBits(dst0 + i * t.size, t.size);
    bool ok;
    if (t.integer()) {
      want = refInteger(c, t, p[i], l[i]);
      ok = got == want;
    } else {
      double r = refFloating(c, t, toReal(t, p[i]), toReal(t, l[i]));
      want = fromReal(t, r);
      double g = toReal(t, got);
      ok = std::isnan(r) ? std::isnan(g) : got == want || (zeroSignFree && r == 0 && g == 0);
    }
    if (!ok) {
      return "element " + std::to_string(i) + ": got " + hex(got) + ", want " + hex(want) +
             " (peer " + hex(p[i]) + ", local " + hex(l[i]) + ")";
    }
    if (dst1 && std::memcmp(out1.data() + i * t.size, dst0 + i * t.size, t.size) != 0) {
      return "dst1 differs from dst0 at element " + std::to_string(i);
    }
    // A source that is not also dst0 stays as it was.
    if (alias != Alias::kDst0IsPeer && std::memcmp(peer.data() + i * t.size, &p[i], t.size)) {
      return "peer modified at element " + std::to_string(i);
    }
    if (alias != Alias::kDst0IsLocal && std::memcmp(local.data() + i * t.size, &l[i], t.size)) {
      return "local modified at element " + std::to_string(i);
    }
  }
  if (!peer.guardsIntact() || !local.guardsIntact() || !out0.guardsIntact() ||
      !out1.guardsIntact()) {
    return "wrote outside the buffers";
  }
  return "";
}

struct Variant {
  const char* name;
  void (*run)(const ReduceCopyArgs&);
  bool (*available)();
};

const Variant kVariants[] = {
    {"portable", reduceCopyPortable, [] { return true; }},
    {"avx2", reduceCopyAvx2, reduceCopyAvx2Supported},
    {"dispatch", reduceCopy, [] { return true; }},
};

RedOp makeOp(RedKind kind, const TypeInfo& t, int nranks) {
  RedOp op;
  op.kind = kind;
  op.nranks = nranks;
  uint64_t s = t.integer() ? truncBits(~uint64_t{2}, t.size) : fromReal(t, 0.3);
  std::memcpy(op.scalar, &s, t.size);  // -3 for integers, 0.3 rounded for floating types
  return op;
}

class ReduceCopyMatrix : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ReduceCopyMatrix, MatchesReference) {
  const Variant& v = kVariants[std::get<0>(GetParam())];
  if (!v.available()) GTEST_SKIP() << v.name << " is not supported on this CPU";
  DataType type = static_cast<DataType>(std::get<1>(GetParam()));
  TypeInfo t = kTypes[static_cast<int>(type)];
  std::mt19937_64 rng(1234 + std::get<1>(GetParam()));
  const RedKind kinds[] = {RedKind::kSum, RedKind::kProd, RedKind::kMax,      RedKind::kMin,
                           RedKind::kAvg, RedKind::kAvg,  RedKind::kPreMulSum};
  const size_t counts[] = {0, 1, 7, 1000, 4097};
  int failures = 0;
  for (int k = 0; k < 7; ++k) {
    Case c{type, makeOp(kinds[k], t, 3), k == 5, true, true};
    for (int sources = 0; sources < 3; ++sources) {
      c.hasPeer = sources != 2;
      c.hasLocal = sources != 1;
      for (Alias alias : {Alias::kNone, Alias::kDst0IsLocal, Alias::kDst0IsPeer}) {
        if ((alias == Alias::kDst0IsLocal && !c.hasLocal) ||
            (alias == Alias::kDst0IsPeer && !c.hasPeer)) {
          continue;
        }
        for (bool dst1 : {false, true}) {
          for (size_t count : counts) {
            for (bool unaligned : {false, true}) {
              std::string err = runCase(v.run, c, dst1, alias, count, unaligned, rng);
              if (err.empty()) continue;
              ADD_FAILURE() << v.name << " " << dataTypeName(type) << " kind "
                            << static_cast<int>(c.op.kind) << (c.finalize ? " finalize" : "")
                            << " peer=" << c.hasPeer << " local=" << c.hasLocal << " dst1=" << dst1
                            << " alias=" << static_cast<int>(alias) << " count=" << count
                            << " unaligned=" << unaligned << ": " << err;
              if (++failures >= 10) return;
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, ReduceCopyMatrix,
    ::testing::Combine(::testing::Range(0, 3),
                       ::testing::Range(0, static_cast<int>(DataType::kNumTypes))),
    [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
      return std::string(kVariants[std::get<0>(info.param)].name) + "_" +
             dataTypeName(static_cast<DataType>(std::get<1>(info.param)));
    });

// ---- Named behaviours ----

template <class T>
std::vector<T> reduceTwo(DataType type, RedKind kind, const std::vector<T>& peer,
                         const std::vector<T>& local, int nranks = 1, bool finalize = false) {
  std::vector<T> out(peer.size());
  RedOp op{kind, {}, nranks};
  reduceCopy({peer.data(), local.data(), out.data(), nullptr, out.size(), type, &op, finalize});
  return out;
}

TEST(ReduceCopy, MaxMinPropagateNan) {
  const float nan = std::nanf("");
  for (RedKind kind : {RedKind::kMax, RedKind::kMin}) {
    auto f = reduceTwo<float>(DataType::kFloat32, kind, {nan, 1, nan, -5}, {1, nan, nan, 2});
    EXPECT_TRUE(std::isnan(f[0]) && std::isnan(f[1]) && std::isnan(f[2])) << int(kind);
    EXPECT_EQ(f[3], kind == RedKind::kMax ? 2.0f : -5.0f);
    auto d = reduceTwo<double>(DataType::kFloat64, kind, {std::nan(""), 3}, {3, std::nan("")});
    EXPECT_TRUE(std::isnan(d[0]) && std::isnan(d[1])) << int(kind);
    auto h = reduceTwo<uint16_t>(DataType::kFloat16, kind, {0x7e00, 0x3c00}, {0x3c00, 0xfe00});
    EXPECT_TRUE(std::isnan(halfToFloat(h[0])) && std::isnan(halfToFloat(h[1]))) << int(kind);
    auto b = reduceTwo<uint16_t>(DataType::kBfloat16, kind, {0x7fc0, 0x3f80}, {0x3f80, 0x7fc0});
    EXPECT_TRUE(std::isnan(bfloat16ToFloat(b[0])) && std::isnan(bfloat16ToFloat(b[1])));
    auto e4 = reduceTwo<uint8_t>(DataType::kFloat8e4m3, kind, {0x7f, 0x38}, {0x38, 0xff});
    EXPECT_TRUE(std::isnan(fp8e4m3ToFloat(e4[0])) && std::isnan(fp8e4m3ToFloat(e4[1])));
    auto e5 = reduceTwo<uint8_t>(DataType::kFloat8e5m2, kind, {0x7e, 0x3c}, {0x3c, 0x7f});
    EXPECT_TRUE(std::isnan(fp8e5m2ToFloat(e5[0])) && std::isnan(fp8e5m2ToFloat(e5[1])));
  }
}

TEST(ReduceCopy, IntegerSumsWrap) {
  auto s8 = reduceTwo<int8_t>(DataType::kInt8, RedKind::kSum, {127, -128, 100}, {1, -1, 100});
  EXPECT_EQ(s8, (std::vector<int8_t>{-128, 127, -56}));
  auto u8 = reduceTwo<uint8_t>(DataType::kUint8, RedKind::kSum, {255, 200, 16}, {1, 100, 16});
  EXPECT_EQ(u8, (std::vector<uint8_t>{0, 44, 32}));
  auto p8 = reduceTwo<uint8_t>(DataType::kUint8, RedKind::kProd, {16, 255}, {16, 255});
  EXPECT_EQ(p8, (std::vector<uint8_t>{0, 1}));
  const int32_t imax = std::numeric_limits<int32_t>::max();
  auto s32 = reduceTwo<int32_t>(DataType::kInt32, RedKind::kSum, {imax}, {1});
  EXPECT_EQ(s32[0], std::numeric_limits<int32_t>::min());
  const int64_t lmin = std::numeric_limits<int64_t>::min();
  auto s64 = reduceTwo<int64_t>(DataType::kInt64, RedKind::kSum, {lmin}, {-1});
  EXPECT_EQ(s64[0], std::numeric_limits<int64_t>::max());
}

TEST(ReduceCopy, IntegerAvgTruncatesTowardZero) {
  auto a32 = reduceTwo<int32_t>(DataType::kInt32, RedKind::kAvg, {-7, 7, -1}, {-2, 2, 0}, 2, true);
  EXPECT_EQ(a32, (std::vector<int32_t>{-4, 4, 0}));
  auto a8 = reduceTwo<int8_t>(DataType::kInt8, RedKind::kAvg, {-7, -100}, {-2, -100}, 4, true);
  EXPECT_EQ(a8, (std::vector<int8_t>{-2, 14}));  // -200 wraps to 56 before the division
  auto a64 = reduceTwo<int64_t>(DataType::kInt64, RedKind::kAvg, {-9}, {0}, 4, true);
  EXPECT_EQ(a64[0], -2);
  auto u8 = reduceTwo<uint8_t>(DataType::kUint8, RedKind::kAvg, {250}, {5}, 300, true);
  EXPECT_EQ(u8[0], 0);
  auto notFinal = reduceTwo<int32_t>(DataType::kInt32, RedKind::kAvg, {-7}, {-2}, 2, false);
  EXPECT_EQ(notFinal[0], -9);
}

}  // namespace
}  // namespace chorus
