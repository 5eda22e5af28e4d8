#include "reduce_cases.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace chorus {
namespace reducecheck {
namespace {

constexpr size_t kArenaAlign = 256;
constexpr int kMaxFailingCases = 10;
constexpr size_t kCounts[] = {0, 1, 7, 1000, 65537};

// The reduction as the caller states it; `op == false` passes no RedOp at all (reduces as Sum).
struct OpChoice {
  const char* name;
  bool op;
  RedKind kind;
  bool finalize;
};

constexpr OpChoice kOps[] = {
    {"no-op", false, RedKind::kSum, false},
    {"sum", true, RedKind::kSum, false},
    {"sum+finalize", true, RedKind::kSum, true},
    {"prod", true, RedKind::kProd, false},
    {"max", true, RedKind::kMax, false},
    {"min", true, RedKind::kMin, false},
    {"avg", true, RedKind::kAvg, false},
    {"avg+finalize", true, RedKind::kAvg, true},
    {"premulsum", true, RedKind::kPreMulSum, false},
    {"premulsum+finalize", true, RedKind::kPreMulSum, true},
};

enum class Operands { kBoth, kPeerOnly, kLocalOnly };
constexpr Operands kOperands[] = {Operands::kBoth, Operands::kPeerOnly, Operands::kLocalOnly};

const char* operandsName(Operands o) {
  switch (o) {
    case Operands::kBoth:
      return "peer+local";
    case Operands::kPeerOnly:
      return "peer";
    case Operands::kLocalOnly:
      return "local";
  }
  return "?";
}

// Where the buffers sit: each in its own 256-byte aligned region, shifted by one element to
// break 16-byte alignment (all of them, or one), or dst0 on top of a source (in place).
enum class Layout { kAligned, kAllShifted, kOneShifted, kInPlace };
constexpr Layout kLayouts[] = {Layout::kAligned, Layout::kAllShifted, Layout::kOneShifted,
                               Layout::kInPlace};

const char* layoutName(Layout l) {
  switch (l) {
    case Layout::kAligned:
      return "aligned";
    case Layout::kAllShifted:
      return "all-shifted";
    case Layout::kOneShifted:
      return "one-shifted";
    case Layout::kInPlace:
      return "in-place";
  }
  return "?";
}

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using ArenaPtr = std::unique_ptr<unsigned char[], FreeDeleter>;

ArenaPtr allocArena(size_t bytes) {
  return ArenaPtr(static_cast<unsigned char*>(std::aligned_alloc(kArenaAlign, bytes)));
}

// ---- Inputs ----

bool isFloating(DataType t) {
  switch (t) {
    case DataType::kFloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kBfloat16:
    case DataType::kFloat8e4m3:
    case DataType::kFloat8e5m2:
      return true;
    default:
      return false;
  }
}

bool isNanElement(DataType t, const unsigned char* p) {
  uint16_t h;
  switch (t) {
    case DataType::kFloat16:
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7c00u;
    case DataType::kBfloat16:
      std::memcpy(&h, p, 2);
      return (h & 0x7fffu) > 0x7f80u;
    case DataType::kFloat8e4m3:
      return (p[0] & 0x7fu) == 0x7fu;
    case DataType::kFloat8e5m2:
      return (p[0] & 0x7fu) > 0x7cu;
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return std::isnan(f);
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return std::isnan(d);
    }
    default:
      return false;
  }
}

// Values a test should meet now and then: NaNs (quiet, signalling, negative), infinities, the
// largest finite values, the smallest subnormal and signed zeros.
const std::vector<uint64_t>& specialCodes(DataType t) {
  static const std::vector<uint64_t> kHalf = {0x7c00, 0xfc00, 0x7e00, 0x7d01, 0xfe55,
                                              0x7bff, 0xfbff, 0x0001, 0x8000};
  static const std::vector<uint64_t> kBf16 = {0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc5,
                                              0x7f7f, 0xff7f, 0x0001, 0x8000};
  static const std::vector<uint64_t> kE4m3 = {0x7f, 0xff, 0x7e, 0xfe, 0x01, 0x80, 0x77};
  static const std::vector<uint64_t> kE5m2 = {0x7c, 0xfc, 0x7e, 0x7d, 0xff, 0x7b, 0xfb, 0x01, 0x80};
  static const std::vector<uint64_t> kF32 = {0x7f800000, 0xff800000, 0x7fc00000, 0x7f800123,
                                             0xffc04567, 0x7f7fffff, 0xff7fffff, 0x00000001,
                                             0x80000000, 0x00800000};
  static const std::vector<uint64_t> kF64 = {
      0x7ff0000000000000, 0xfff0000000000000, 0x7ff8000000000000,
      0x7ff0000000000abc, 0xfff8000012345678, 0x7fefffffffffffff,
      0xffefffffffffffff, 0x0000000000000001, 0x8000000000000000};
  static const std::vector<uint64_t> kNone;
  switch (t) {
    case DataType::kFloat16:
      return kHalf;
    case DataType::kBfloat16:
      return kBf16;
    case DataType::kFloat8e4m3:
      return kE4m3;
    case DataType::kFloat8e5m2:
      return kE5m2;
    case DataType::kFloat32:
      return kF32;
    case DataType::kFloat64:
      return kF64;
    default:
      return kNone;
  }
}

// A value of moderate size as the type encodes it (integers: random bits).
uint64_t encodeValue(DataType t, double v) {
  switch (t) {
    case DataType::kFloat16:
      return floatToHalf(static_cast<float>(v));
    case DataType::kBfloat16:
      return floatToBfloat16(static_cast<float>(v));
    case DataType::kFloat8e4m3:
      return floatToFp8e4m3(static_cast<float>(v));
    case DataType::kFloat8e5m2:
      return floatToFp8e5m2(static_cast<float>(v));
    case DataType::kFloat32: {
      float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    case DataType::kFloat64: {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      return u;
    }
    default:
      return 0;
  }
}

// Random bits with the all-ones exponent avoided, so the value is finite.
uint64_t finiteBits(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::kFloat16:
      bits &= 0xffff;
      return (bits & 0x7c00) == 0x7c00 ? bits ^ 0x4000 : bits;
    case DataType::kBfloat16:
      bits &= 0xffff;
      return (bits & 0x7f80) == 0x7f80 ? bits ^ 0x4000 : bits;
    case DataType::kFloat8e4m3:
      bits &= 0xff;
      return (bits & 0x7f) == 0x7f ? bits ^ 0x40 : bits;
    case DataType::kFloat8e5m2:
      bits &= 0xff;
      return (bits & 0x7c) == 0x7c ? bits ^ 0x40 : bits;
    case DataType::kFloat32:
      bits &= 0xffffffff;
      return (bits & 0x7f800000) == 0x7f800000 ? bits ^ 0x40000000 : bits;
    case DataType::kFloat64:
      return (bits & 0x7ff0000000000000) == 0x7ff0000000000000 ? bits ^ 0x4000000000000000 : bits;
    default:
      return bits;
  }
}

class InputGen {
 public:
  InputGen(DataType type, uint64_t seed) : type_(type), rng_(seed) {}

  uint64_t element() {
    if (!isFloating(type_)) return rng_();
    uint32_t pick = static_cast<uint32_t>(rng_() % 1000);
    const std::vector<uint64_t>& specials = specialCodes(type_);
    if (pick < 15) return specials[rng_() % specials.size()];
    if (pick < 400) return finiteBits(type_, rng_());
    if (pick < 420 && (type_ == DataType::kFloat32 || type_ == DataType::kFloat64)) {
      // Near the top of the range, where sums and products overflow.
      double top = type_ == DataType::kFloat32 ? std::numeric_limits<float>::max()
                                               : std::numeric_limits<double>::max();
      return encodeValue(type_, (rng_() % 2 ? -1 : 1) * top * (0.3 + 0.7 * unit()));
    }
    return encodeValue(type_, std::ldexp(unit() * 2 - 1, static_cast<int>(rng_() % 17) - 6));
  }

  // PreMulSum's scalar: random bits for integers, a moderate value otherwise.
  uint64_t scalar() {
    if (!isFloating(type_)) return rng_();
    return encodeValue(type_, unit() * 8 - 4);
  }

  int nranks() {
    static const int kChoices[] = {1, 2, 3, 5, 7, 8, 100, 1000};
    return kChoices[rng_() % (sizeof kChoices / sizeof kChoices[0])];
  }

  uint64_t next() { return rng_(); }

 private:
  double unit() { return static_cast<double>(rng_() >> 11) * 0x1p-53; }

  DataType type_;
  std::mt19937_64 rng_;
};

// ---- One case ----

struct Case {
  DataType type;
  OpChoice op;
  Operands operands;
  bool dst1;
  size_t count;
  Layout layout;
  int nranks;
  size_t shifted;  // the buffer kOneShifted moves, by its index among the present ones
  bool everyCode;  // inputs walk every code of a narrow float type instead of random values

  std::string describe() const {
    std::ostringstream s;
    s << dataTypeName(type) << " op=" << op.name << " operands=" << operandsName(operands)
      << " dst1=" << (dst1 ? "yes" : "no") << " count=" << count << " layout=" << layoutName(layout)
      << " nranks=" << nranks << (everyCode ? " inputs=every-code" : "");
    return s.str();
  }

  // Whether some arithmetic produces the result. Then a NaN may come out with any payload:
  // neither IEEE 754 nor the host spec fixes which NaN an addition or product returns, and
  // CPUs and GPUs differ. Max, min and copies pick a value and must keep it bit for bit.
  bool computes() const {
    if (op.kind == RedKind::kMax || op.kind == RedKind::kMin) return false;
    if (operands == Operands::kBoth) return true;
    if (op.kind == RedKind::kPreMulSum) return operands == Operands::kLocalOnly;
    return op.kind == RedKind::kAvg && op.finalize;
  }
};

// Buffer offsets in the arena; -1 for an absent buffer.
struct Offsets {
  ptrdiff_t peer = -1, local = -1, dst0 = -1, dst1 = -1;
};

Offsets placeBuffers(const Case& c, size_t region, size_t elem) {
  Offsets o;
  if (c.operands != Operands::kLocalOnly) o.peer = 0;
  if (c.operands != Operands::kPeerOnly) o.local = static_cast<ptrdiff_t>(region);
  o.dst0 = static_cast<ptrdiff_t>(2 * region);
  if (c.dst1) o.dst1 = static_cast<ptrdiff_t>(3 * region);
  ptrdiff_t* all[] = {&o.peer, &o.local, &o.dst0, &o.dst1};
  size_t present = 0;
  for (ptrdiff_t* p : all) {
    if (*p < 0) continue;
    bool shift = c.layout == Layout::kAllShifted ||
                 (c.layout == Layout::kOneShifted && present == c.shifted);
    if (shift) *p += static_cast<ptrdiff_t>(elem);
    ++present;
  }
  if (c.layout == Layout::kInPlace) o.dst0 = o.local >= 0 ? o.local : o.peer;
  return o;
}

ReduceCopyArgs bindArgs(const Case& c, const Offsets& o, unsigned char* base, const RedOp* op) {
  auto at = [base](ptrdiff_t off) { return off < 0 ? nullptr : base + off; };
  ReduceCopyArgs a;
  a.peer = at(o.peer);
  a.local = at(o.local);
  a.dst0 = at(o.dst0);
  a.dst1 = at(o.dst1);
  a.count = c.count;
  a.type = c.type;
  a.op = op;
  a.finalize = c.op.finalize;
  return a;
}

void writeElements(unsigned char* dst, size_t count, size_t elem, InputGen& gen) {
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = gen.element();
    std::memcpy(dst + i * elem, &v, elem);  // little-endian: the low bytes
  }
}

// Every code of a 1- or 2-byte type, once each: for 1-byte types the peer walks the codes slowly
// and the local input quickly, so that together they form every pair.
void writeEveryCode(unsigned char* dst, size_t count, size_t elem, bool slow) {
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = elem == 1 && slow ? i >> 8 : i;
    std::memcpy(dst + i * elem, &v, elem);
  }
}

// Compares the arenas; returns an empty string when they agree, else where they first differ.
std::string compareArenas(const Case& c, const Offsets& o, const unsigned char* want,
                          const unsigned char* got, size_t bytes, size_t elem) {
  if (std::memcmp(want, got, bytes) == 0) return {};
  const std::pair<const char*, ptrdiff_t> dsts[] = {{"dst0", o.dst0}, {"dst1", o.dst1}};
  for (size_t b = 0; b < bytes; ++b) {
    if (want[b] == got[b]) continue;
    const char* name = nullptr;
    size_t index = 0;
    size_t start = b;
    for (const auto& [dstName, off] : dsts) {
      if (off < 0) continue;
      size_t first = static_cast<size_t>(off);
      if (b >= first && b < first + c.count * elem) {
        name = dstName;
        index = (b - first) / elem;
        start = first + index * elem;
        break;
      }
    }
    std::ostringstream s;
    if (name == nullptr) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "byte %zu outside the outputs: want %02x got %02x", b, want[b],
                    got[b]);
      s << buf;
      return s.str();
    }
    if (c.computes() && isNanElement(c.type, want + start) && isNanElement(c.type, got + start)) {
      b = start + elem - 1;  // both NaN: they agree
      continue;
    }
    s << name << "[" << index << "], bytes want/got:";
    for (size_t k = 0; k < elem; ++k) {
      char buf[16];
      std::snprintf(buf, sizeof buf, " %02x/%02x", want[start + k], got[start + k]);
      s << buf;
    }
    return s.str();
  }
  return {};
}

// Runs one case; returns false once the type has failed often enough to stop.
bool runCase(const Case& c, InputGen& gen, const ArenaRunner& run, int& failing) {
  const size_t elem = dataTypeSize(c.type);
  size_t region = ((c.count + 2) * elem + 64 + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  size_t bytes = 4 * region;
  ArenaPtr arena = allocArena(bytes);
  ArenaPtr want = allocArena(bytes);
  if (!arena || !want) {
    ADD_FAILURE() << c.describe() << ": out of memory for " << bytes << " bytes";
    return false;
  }
  std::memset(arena.get(), 0xa5, bytes);
  Offsets o = placeBuffers(c, region, elem);
  // Sources only: in place, dst0 starts out as the input it sits on.
  if (o.peer >= 0) {
    if (c.everyCode) {
      writeEveryCode(arena.get() + o.peer, c.count, elem, true);
    } else {
      writeElements(arena.get() + o.peer, c.count, elem, gen);
    }
  }
  if (o.local >= 0) {
    if (c.everyCode && (elem == 1 || o.peer < 0)) {
      writeEveryCode(arena.get() + o.local, c.count, elem, false);
    } else {
      writeElements(arena.get() + o.local, c.count, elem, gen);
    }
  }
  std::memcpy(want.get(), arena.get(), bytes);

  RedOp redOp;
  redOp.kind = c.op.kind;
  redOp.nranks = c.nranks;
  uint64_t scalar = gen.scalar();
  std::memcpy(redOp.scalar, &scalar, elem);
  const RedOp* opPtr = c.op.op ? &redOp : nullptr;

  reduceCopy(bindArgs(c, o, want.get(), opPtr));
  Status st = run(arena.get(), bytes, bindArgs(c, o, arena.get(), opPtr));
  if (!st.isOk()) {
    ADD_FAILURE() << c.describe() << ": runner failed: " << st.message();
    return false;
  }
  std::string diff = compareArenas(c, o, want.get(), arena.get(), bytes, elem);
  if (diff.empty()) return true;
  ADD_FAILURE() << c.describe() << ": differs from reduceCopy at " << diff;
  if (++failing < kMaxFailingCases) return true;
  ADD_FAILURE() << "stopping " << dataTypeName(c.type) << " after " << failing << " failing cases";
  return false;
}

}  // namespace

std::vector<DataType> allDataTypes() {
  std::vector<DataType> types;
  for (int t = 0; t < static_cast<int>(DataType::kNumTypes); ++t) {
    types.push_back(static_cast<DataType>(t));
  }
  return types;
}

void checkAllCases(DataType type, const ArenaRunner& run) {
  InputGen gen(type, 0x5eed0000u + static_cast<uint64_t>(type));
  int failing = 0;
  size_t rotation = 0;
  for (const OpChoice& op : kOps) {
    for (Operands operands : kOperands) {
      for (bool dst1 : {false, true}) {
        for (size_t count : kCounts) {
          for (Layout layout : kLayouts) {
            Case c{type, op, operands, dst1, count, layout, gen.nranks(), 0, false};
            size_t present = (operands == Operands::kBoth ? 2 : 1) + 1 + (dst1 ? 1 : 0);
            c.shifted = rotation++ % present;
            if (!runCase(c, gen, run, failing)) return;
          }
        }
      }
    }
  }
  // Narrow floats: every code through every reduction (every pair of codes for fp8).
  size_t elem = dataTypeSize(type);
  if (!isFloating(type) || elem > 2) return;
  for (const OpChoice& op : kOps) {
    for (Operands operands : kOperands) {
      Case c{type, op, operands, false, 65536, Layout::kAligned, gen.nranks(), 0, true};
      if (!runCase(c, gen, run, failing)) return;
    }
  }
}

}  // namespace reducecheck
}  // namespace chorus
