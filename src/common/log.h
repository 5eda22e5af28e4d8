// Subsystem-filtered logging. The level and subsystem are checked before any formatting, so a
// disabled log line costs one load and a compare. Lines carry "host:pid:tid [rank]".
#pragma once

#include <cstdint>
#include <string>

namespace chorus {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// Bit flags; CHORUS_DEBUG_SUBSYS takes their names, comma separated, "^" in front to invert.
enum LogSubsys : uint32_t {
  kSubsysInit = 1u << 0,
  kSubsysColl = 1u << 1,
  kSubsysP2p = 1u << 2,
  kSubsysShm = 1u << 3,
  kSubsysNet = 1u << 4,
  kSubsysBootstrap = 1u << 5,
  kSubsysEnv = 1u << 6,
  kSubsysTuning = 1u << 7,
  kSubsysProxy = 1u << 8,
  kSubsysGraph = 1u << 9,
  kSubsysAll = ~0u,
};

struct LogState {
  int level;  // LogLevel, or -1 before the environment was read
  uint32_t subsysMask;
};
extern LogState gLog;  // the one mutable global besides the parameter registry

void logInitOnce();
// CHORUS_DEBUG_SUBSYS and CHORUS_DEBUG as the logger reads them (exposed for the fuzz tests).
uint32_t parseLogSubsys(const std::string& spec);
int parseLogLevel(const std::string& value);
// Re-reads CHORUS_DEBUG* from the environment (tests and ncclResetDebugInit).
void logReinit();
void logWrite(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));

// The rank shown in log prefixes for the calling thread (-1: none).
void setLogRank(int rank);

// Warnings show whatever the subsystem filter says; the filter selects INFO and TRACE lines.
inline bool logEnabled(LogLevel level, uint32_t subsys) {
  if (gLog.level < 0) logInitOnce();
  return static_cast<int>(level) <= gLog.level &&
         (level == LogLevel::kWarn || (gLog.subsysMask & subsys) != 0);
}

}  // namespace chorus

#define CHORUS_LOG(level, subsys, ...)                                    \
  do {                                                                    \
    if (::chorus::logEnabled(level, subsys))                              \
      ::chorus::logWrite(level, subsys, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define LOG_WARN(subsys, ...) CHORUS_LOG(::chorus::LogLevel::kWarn, subsys, __VA_ARGS__)
#define LOG_INFO(subsys, ...) CHORUS_LOG(::chorus::LogLevel::kInfo, subsys, __VA_ARGS__)
#define LOG_TRACE(subsys, ...) CHORUS_LOG(::chorus::LogLevel::kTrace, subsys, __VA_ARGS__)
