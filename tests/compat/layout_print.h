// Prints the ABI-relevant facts of whichever nccl.h was included before this header: struct
// sizes and field offsets, enum values, macro values and types, initializer contents and the
// type of every function. compare_layout.sh diffs the output for NVIDIA's header and ours.
// Every line is "<key> <value>" so that known differences can be excluded by key.
#ifndef CHORUS_TESTS_COMPAT_LAYOUT_PRINT_H_
#define CHORUS_TESTS_COMPAT_LAYOUT_PRINT_H_

#include <cstddef>
#include <cstdio>
#include <string>
#include <type_traits>

namespace layout {

// Spells a type the same way whatever typedefs a header uses. A type without a spelling is a
// compile error, so a new type in a signature cannot go unnoticed.
template <class T>
struct TypeName;

#define LAYOUT_TYPE_NAME(type, text)          \
  template <>                                 \
  struct TypeName<type> {                     \
    static std::string get() { return text; } \
  };

LAYOUT_TYPE_NAME(void, "void")
LAYOUT_TYPE_NAME(char, "char")
LAYOUT_TYPE_NAME(int, "int")
LAYOUT_TYPE_NAME(unsigned int, "unsigned int")
LAYOUT_TYPE_NAME(long, "long")
LAYOUT_TYPE_NAME(unsigned long, "unsigned long")
LAYOUT_TYPE_NAME(long long, "long long")
LAYOUT_TYPE_NAME(unsigned long long, "unsigned long long")
LAYOUT_TYPE_NAME(float, "float")
LAYOUT_TYPE_NAME(double, "double")
LAYOUT_TYPE_NAME(std::nullptr_t, "nullptr_t")
LAYOUT_TYPE_NAME(ncclResult_t, "ncclResult_t")
LAYOUT_TYPE_NAME(ncclRedOp_t, "ncclRedOp_t")
LAYOUT_TYPE_NAME(ncclRedOp_dummy_t, "ncclRedOp_dummy_t")
LAYOUT_TYPE_NAME(ncclDataType_t, "ncclDataType_t")
LAYOUT_TYPE_NAME(ncclScalarResidence_t, "ncclScalarResidence_t")
LAYOUT_TYPE_NAME(ncclUniqueId, "ncclUniqueId")
LAYOUT_TYPE_NAME(ncclConfig_t, "ncclConfig_t")
LAYOUT_TYPE_NAME(ncclSimInfo_t, "ncclSimInfo_t")
LAYOUT_TYPE_NAME(struct ncclComm, "struct ncclComm")
LAYOUT_TYPE_NAME(struct ncclWindow_vidmem, "struct ncclWindow_vidmem")
LAYOUT_TYPE_NAME(struct CUstream_st, "struct CUstream_st")
#undef LAYOUT_TYPE_NAME

template <class T>
struct TypeName<const T> {
  static std::string get() { return "const " + TypeName<T>::get(); }
};
template <class T>
struct TypeName<T*> {
  static std::string get() { return TypeName<T>::get() + "*"; }
};
template <class T, std::size_t N>
struct TypeName<T[N]> {
  static std::string get() { return TypeName<T>::get() + "[" + std::to_string(N) + "]"; }
};
template <class R, class... Args>
struct TypeName<R(Args...)> {
  static std::string get() {
    std::string text = TypeName<R>::get() + "(";
    const std::string params[] = {TypeName<Args>::get()..., ""};
    for (std::size_t i = 0; i < sizeof...(Args); ++i) text += (i ? ", " : "") + params[i];
    return text + ")";
  }
};

inline void line(const char* key, const std::string& value) {
  std::printf("%s %s\n", key, value.c_str());
}
inline void line(const char* key, long long value) {
  std::printf("%s %lld\n", key, value);
}

template <class T>
void pointerValue(const char* key, const T* p) {
  line(key, p ? "non-null" : "null");
}

// Types whose exact tag names user code may forward-declare.
static_assert(std::is_same<struct ncclConfig_v22800, ncclConfig_t>::value, "ncclConfig_t tag");
static_assert(std::is_same<struct ncclSimInfo_v22200, ncclSimInfo_t>::value, "ncclSimInfo_t tag");
static_assert(std::is_same<ncclComm_t, struct ncclComm*>::value, "ncclComm_t");
static_assert(std::is_same<ncclWindow_t, struct ncclWindow_vidmem*>::value, "ncclWindow_t");
static_assert(std::is_same<cudaStream_t, struct CUstream_st*>::value, "cudaStream_t");

#define LAYOUT_FIELD(T, f)                                               \
  do {                                                                   \
    line(#T "." #f ".offset", static_cast<long long>(offsetof(T, f)));   \
    line(#T "." #f ".size", static_cast<long long>(sizeof(((T*)0)->f))); \
    line(#T "." #f ".type", TypeName<decltype(((T*)0)->f)>::get());      \
  } while (0)

#define LAYOUT_STRUCT(T)                                     \
  do {                                                       \
    line("sizeof " #T, static_cast<long long>(sizeof(T)));   \
    line("alignof " #T, static_cast<long long>(alignof(T))); \
  } while (0)

inline void printStructs() {
  LAYOUT_STRUCT(ncclUniqueId);
  LAYOUT_FIELD(ncclUniqueId, internal);

  LAYOUT_STRUCT(ncclConfig_t);
  LAYOUT_FIELD(ncclConfig_t, size);
  LAYOUT_FIELD(ncclConfig_t, magic);
  LAYOUT_FIELD(ncclConfig_t, version);
  LAYOUT_FIELD(ncclConfig_t, blocking);
  LAYOUT_FIELD(ncclConfig_t, cgaClusterSize);
  LAYOUT_FIELD(ncclConfig_t, minCTAs);
  LAYOUT_FIELD(ncclConfig_t, maxCTAs);
  LAYOUT_FIELD(ncclConfig_t, netName);
  LAYOUT_FIELD(ncclConfig_t, splitShare);
  LAYOUT_FIELD(ncclConfig_t, trafficClass);
  LAYOUT_FIELD(ncclConfig_t, commName);
  LAYOUT_FIELD(ncclConfig_t, collnetEnable);
  LAYOUT_FIELD(ncclConfig_t, CTAPolicy);
  LAYOUT_FIELD(ncclConfig_t, shrinkShare);
  LAYOUT_FIELD(ncclConfig_t, nvlsCTAs);
  LAYOUT_FIELD(ncclConfig_t, nChannelsPerNetPeer);
  LAYOUT_FIELD(ncclConfig_t, nvlinkCentricSched);

  LAYOUT_STRUCT(ncclSimInfo_t);
  LAYOUT_FIELD(ncclSimInfo_t, size);
  LAYOUT_FIELD(ncclSimInfo_t, magic);
  LAYOUT_FIELD(ncclSimInfo_t, version);
  LAYOUT_FIELD(ncclSimInfo_t, estimatedTime);
}

// Field by field, so that the version field can be excluded on its own.
inline void printInitializers() {
  const ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  line("init ncclConfig_t.size", static_cast<long long>(config.size));
  line("init ncclConfig_t.magic", static_cast<long long>(config.magic));
  line("init ncclConfig_t.version", static_cast<long long>(config.version));
  line("init ncclConfig_t.blocking", config.blocking);
  line("init ncclConfig_t.cgaClusterSize", config.cgaClusterSize);
  line("init ncclConfig_t.minCTAs", config.minCTAs);
  line("init ncclConfig_t.maxCTAs", config.maxCTAs);
  pointerValue("init ncclConfig_t.netName", config.netName);
  line("init ncclConfig_t.splitShare", config.splitShare);
  line("init ncclConfig_t.trafficClass", config.trafficClass);
  pointerValue("init ncclConfig_t.commName", config.commName);
  line("init ncclConfig_t.collnetEnable", config.collnetEnable);
  line("init ncclConfig_t.CTAPolicy", config.CTAPolicy);
  line("init ncclConfig_t.shrinkShare", config.shrinkShare);
  line("init ncclConfig_t.nvlsCTAs", config.nvlsCTAs);
  line("init ncclConfig_t.nChannelsPerNetPeer", config.nChannelsPerNetPeer);
  line("init ncclConfig_t.nvlinkCentricSched", config.nvlinkCentricSched);

  const ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  line("init ncclSimInfo_t.size", static_cast<long long>(sim.size));
  line("init ncclSimInfo_t.magic", static_cast<long long>(sim.magic));
  line("init ncclSimInfo_t.version", static_cast<long long>(sim.version));
  std::printf("init ncclSimInfo_t.estimatedTime %a\n", static_cast<double>(sim.estimatedTime));
}

#define LAYOUT_ENUM(v) line("enum " #v, static_cast<long long>(v))

inline void printEnums() {
  line("sizeof ncclResult_t", static_cast<long long>(sizeof(ncclResult_t)));
  LAYOUT_ENUM(ncclSuccess);
  LAYOUT_ENUM(ncclUnhandledCudaError);
  LAYOUT_ENUM(ncclSystemError);
  LAYOUT_ENUM(ncclInternalError);
  LAYOUT_ENUM(ncclInvalidArgument);
  LAYOUT_ENUM(ncclInvalidUsage);
  LAYOUT_ENUM(ncclRemoteError);
  LAYOUT_ENUM(ncclInProgress);
  LAYOUT_ENUM(ncclNumResults);

  line("sizeof ncclRedOp_dummy_t", static_cast<long long>(sizeof(ncclRedOp_dummy_t)));
  line("sizeof ncclRedOp_t", static_cast<long long>(sizeof(ncclRedOp_t)));
  LAYOUT_ENUM(ncclNumOps_dummy);
  LAYOUT_ENUM(ncclSum);
  LAYOUT_ENUM(ncclProd);
  LAYOUT_ENUM(ncclMax);
  LAYOUT_ENUM(ncclMin);
  LAYOUT_ENUM(ncclAvg);
  LAYOUT_ENUM(ncclNumOps);
  LAYOUT_ENUM(ncclMaxRedOp);

  line("sizeof ncclDataType_t", static_cast<long long>(sizeof(ncclDataType_t)));
  LAYOUT_ENUM(ncclInt8);
  LAYOUT_ENUM(ncclChar);
  LAYOUT_ENUM(ncclUint8);
  LAYOUT_ENUM(ncclInt32);
  LAYOUT_ENUM(ncclInt);
  LAYOUT_ENUM(ncclUint32);
  LAYOUT_ENUM(ncclInt64);
  LAYOUT_ENUM(ncclUint64);
  LAYOUT_ENUM(ncclFloat16);
  LAYOUT_ENUM(ncclHalf);
  LAYOUT_ENUM(ncclFloat32);
  LAYOUT_ENUM(ncclFloat);
  LAYOUT_ENUM(ncclFloat64);
  LAYOUT_ENUM(ncclDouble);
  LAYOUT_ENUM(ncclBfloat16);
  LAYOUT_ENUM(ncclFloat8e4m3);
  LAYOUT_ENUM(ncclFloat8e5m2);
  LAYOUT_ENUM(ncclNumTypes);

  line("sizeof ncclScalarResidence_t", static_cast<long long>(sizeof(ncclScalarResidence_t)));
  LAYOUT_ENUM(ncclScalarDevice);
  LAYOUT_ENUM(ncclScalarHostImmediate);
}

// Value and type of each macro; the type matters where a macro initialises a field.
#define LAYOUT_MACRO(m)                                      \
  do {                                                       \
    line("macro " #m, static_cast<long long>(m));            \
    line("macro " #m ".type", TypeName<decltype(m)>::get()); \
  } while (0)

inline void printMacros() {
  LAYOUT_MACRO(NCCL_MAJOR);
  LAYOUT_MACRO(NCCL_MINOR);
  LAYOUT_MACRO(NCCL_PATCH);
  line("macro NCCL_SUFFIX", "\"" NCCL_SUFFIX "\"");
  LAYOUT_MACRO(NCCL_VERSION_CODE);
  // The two codings of NCCL_VERSION on either side of 2.9, and the levels in question.
  LAYOUT_MACRO(NCCL_VERSION(1, 9, 9));
  LAYOUT_MACRO(NCCL_VERSION(2, 8, 4));
  LAYOUT_MACRO(NCCL_VERSION(2, 9, 0));
  LAYOUT_MACRO(NCCL_VERSION(2, 27, 7));
  LAYOUT_MACRO(NCCL_VERSION(2, 28, 9));
  LAYOUT_MACRO(NCCL_VERSION(3, 0, 1));
  LAYOUT_MACRO(NCCL_UNIQUE_ID_BYTES);
  LAYOUT_MACRO(NCCL_CONFIG_UNDEF_INT);
  line("macro NCCL_CONFIG_UNDEF_PTR.type", TypeName<decltype(NCCL_CONFIG_UNDEF_PTR)>::get());
  pointerValue("macro NCCL_CONFIG_UNDEF_PTR", static_cast<const void*>(NCCL_CONFIG_UNDEF_PTR));
  line("macro NCCL_COMM_NULL.type", TypeName<decltype(NCCL_COMM_NULL)>::get());
  pointerValue("macro NCCL_COMM_NULL", static_cast<const void*>(NCCL_COMM_NULL));
  LAYOUT_MACRO(NCCL_SPLIT_NOCOLOR);
  std::printf("macro NCCL_UNDEF_FLOAT %a\n", static_cast<double>(NCCL_UNDEF_FLOAT));
  line("macro NCCL_UNDEF_FLOAT.type", TypeName<decltype(NCCL_UNDEF_FLOAT)>::get());
  LAYOUT_MACRO(NCCL_WIN_DEFAULT);
  LAYOUT_MACRO(NCCL_WIN_COLL_SYMMETRIC);
  LAYOUT_MACRO(NCCL_WIN_REQUIRED_ALIGNMENT);
  LAYOUT_MACRO(NCCL_CTA_POLICY_DEFAULT);
  LAYOUT_MACRO(NCCL_CTA_POLICY_EFFICIENCY);
  LAYOUT_MACRO(NCCL_CTA_POLICY_ZERO);
  LAYOUT_MACRO(NCCL_SHRINK_DEFAULT);
  LAYOUT_MACRO(NCCL_SHRINK_ABORT);
  LAYOUT_MACRO(NCCL_REVOKE_DEFAULT);
}

// Every entry point of the 2.28 API, each with its pnccl twin.
#define LAYOUT_FUNCTION(name)                                             \
  do {                                                                    \
    line("function nccl" #name, TypeName<decltype(nccl##name)>::get());   \
    line("function pnccl" #name, TypeName<decltype(pnccl##name)>::get()); \
  } while (0)

inline void printFunctions() {
  LAYOUT_FUNCTION(MemAlloc);
  LAYOUT_FUNCTION(MemFree);
  LAYOUT_FUNCTION(GetVersion);
  LAYOUT_FUNCTION(GetUniqueId);
  LAYOUT_FUNCTION(CommInitRankConfig);
  LAYOUT_FUNCTION(CommInitRank);
  LAYOUT_FUNCTION(CommInitAll);
  LAYOUT_FUNCTION(CommInitRankScalable);
  LAYOUT_FUNCTION(CommFinalize);
  LAYOUT_FUNCTION(CommDestroy);
  LAYOUT_FUNCTION(CommAbort);
  LAYOUT_FUNCTION(CommRevoke);
  LAYOUT_FUNCTION(CommSplit);
  LAYOUT_FUNCTION(CommShrink);
  LAYOUT_FUNCTION(GetErrorString);
  LAYOUT_FUNCTION(GetLastError);
  // Naming a deprecated function in decltype counts as a use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  LAYOUT_FUNCTION(ResetDebugInit);
#pragma GCC diagnostic pop
  LAYOUT_FUNCTION(CommGetAsyncError);
  LAYOUT_FUNCTION(CommCount);
  LAYOUT_FUNCTION(CommCuDevice);
  LAYOUT_FUNCTION(CommUserRank);
  LAYOUT_FUNCTION(CommRegister);
  LAYOUT_FUNCTION(CommDeregister);
  LAYOUT_FUNCTION(CommWindowRegister);
  LAYOUT_FUNCTION(CommWindowDeregister);
  LAYOUT_FUNCTION(RedOpCreatePreMulSum);
  LAYOUT_FUNCTION(RedOpDestroy);
  LAYOUT_FUNCTION(Reduce);
  LAYOUT_FUNCTION(Bcast);
  LAYOUT_FUNCTION(Broadcast);
  LAYOUT_FUNCTION(AllReduce);
  LAYOUT_FUNCTION(ReduceScatter);
  LAYOUT_FUNCTION(AllGather);
  LAYOUT_FUNCTION(AlltoAll);
  LAYOUT_FUNCTION(Gather);
  LAYOUT_FUNCTION(Scatter);
  LAYOUT_FUNCTION(Send);
  LAYOUT_FUNCTION(Recv);
  LAYOUT_FUNCTION(GroupStart);
  LAYOUT_FUNCTION(GroupEnd);
  LAYOUT_FUNCTION(GroupSimulateEnd);
}

inline int printAll() {
  printStructs();
  printInitializers();
  printEnums();
  printMacros();
  printFunctions();
  return std::fflush(stdout) == 0 ? 0 : 1;
}

}  // namespace layout

#endif  // CHORUS_TESTS_COMPAT_LAYOUT_PRINT_H_
