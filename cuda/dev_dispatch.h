// From a work's (data type, reduction kind) to the kernel instantiation for it: calls
// fn(FormatTag<F>{}, KindTag<K>{}) with the element format and kind as types. Shared by the
// device launcher and the CPU twin, so both pick kernels by one table.
#pragma once

#include "cuda/element_ops.h"
#include "exec/reduce.h"

namespace chorus {
namespace dev {

template <class F>
struct FormatTag {
  using Format = F;
};
template <RedKind K>
struct KindTag {
  static constexpr RedKind kKind = K;
};

template <class F, class Fn>
bool withKind(RedKind kind, Fn&& fn) {
  switch (kind) {
    case RedKind::kSum:
      fn(FormatTag<F>{}, KindTag<RedKind::kSum>{});
      return true;
    case RedKind::kProd:
      fn(FormatTag<F>{}, KindTag<RedKind::kProd>{});
      return true;
    case RedKind::kMax:
      fn(FormatTag<F>{}, KindTag<RedKind::kMax>{});
      return true;
    case RedKind::kMin:
      fn(FormatTag<F>{}, KindTag<RedKind::kMin>{});
      return true;
    case RedKind::kAvg:
      fn(FormatTag<F>{}, KindTag<RedKind::kAvg>{});
      return true;
    case RedKind::kPreMulSum:
      fn(FormatTag<F>{}, KindTag<RedKind::kPreMulSum>{});
      return true;
  }
  return false;
}

// The format of a data type known at compile time.
template <DataType T>
struct FormatFor;
template <>
struct FormatFor<DataType::kInt8> {
  using Type = NativeFormat<int8_t>;
};
template <>
struct FormatFor<DataType::kUint8> {
  using Type = NativeFormat<uint8_t>;
};
template <>
struct FormatFor<DataType::kInt32> {
  using Type = NativeFormat<int32_t>;
};
template <>
struct FormatFor<DataType::kUint32> {
  using Type = NativeFormat<uint32_t>;
};
template <>
struct FormatFor<DataType::kInt64> {
  using Type = NativeFormat<int64_t>;
};
template <>
struct FormatFor<DataType::kUint64> {
  using Type = NativeFormat<uint64_t>;
};
template <>
struct FormatFor<DataType::kFloat16> {
  using Type = HalfFormat;
};
template <>
struct FormatFor<DataType::kFloat32> {
  using Type = NativeFormat<float>;
};
template <>
struct FormatFor<DataType::kFloat64> {
  using Type = NativeFormat<double>;
};
template <>
struct FormatFor<DataType::kBfloat16> {
  using Type = Bf16Format;
};
template <>
struct FormatFor<DataType::kFloat8e4m3> {
  using Type = E4m3Format;
};
template <>
struct FormatFor<DataType::kFloat8e5m2> {
  using Type = E5m2Format;
};
template <DataType T>
using FormatOf = typename FormatFor<T>::Type;

// Calls fn(FormatTag<F>{}) with the format of `type`; false for a type outside the enum.
template <class Fn>
bool withFormat(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kInt8:
      return fn(FormatTag<FormatOf<DataType::kInt8>>{}), true;
    case DataType::kUint8:
      return fn(FormatTag<FormatOf<DataType::kUint8>>{}), true;
    case DataType::kInt32:
      return fn(FormatTag<FormatOf<DataType::kInt32>>{}), true;
    case DataType::kUint32:
      return fn(FormatTag<FormatOf<DataType::kUint32>>{}), true;
    case DataType::kInt64:
      return fn(FormatTag<FormatOf<DataType::kInt64>>{}), true;
    case DataType::kUint64:
      return fn(FormatTag<FormatOf<DataType::kUint64>>{}), true;
    case DataType::kFloat16:
      return fn(FormatTag<FormatOf<DataType::kFloat16>>{}), true;
    case DataType::kFloat32:
      return fn(FormatTag<FormatOf<DataType::kFloat32>>{}), true;
    case DataType::kFloat64:
      return fn(FormatTag<FormatOf<DataType::kFloat64>>{}), true;
    case DataType::kBfloat16:
      return fn(FormatTag<FormatOf<DataType::kBfloat16>>{}), true;
    case DataType::kFloat8e4m3:
      return fn(FormatTag<FormatOf<DataType::kFloat8e4m3>>{}), true;
    case DataType::kFloat8e5m2:
      return fn(FormatTag<FormatOf<DataType::kFloat8e5m2>>{}), true;
    case DataType::kNumTypes:
      break;
  }
  return false;
}

// False for a type or kind outside the enums.
template <class Fn>
bool withKernelKey(DataType type, RedKind kind, Fn&& fn) {
  bool known = false;
  const bool typed = withFormat(
      type, [&](auto format) { known = withKind<typename decltype(format)::Format>(kind, fn); });
  return typed && known;
}

}  // namespace dev
}  // namespace chorus
