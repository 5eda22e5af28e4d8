#include "common/log.h"

#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "common/param.h"

namespace chorus {

LogState gLog = {-1, kSubsysAll};

namespace {

std::mutex gLogMutex;
FILE* gLogFile = nullptr;
char gHost[64] = "?";
// Set by every collective call: initial-exec, so that setting it is one store (see tGroupDepth
// in core/group.cc).
__attribute__((tls_model("initial-exec"))) thread_local int tRank = -1;

struct SubsysName {
  const char* name;
  uint32_t bit;
};
const SubsysName kSubsysNames[] = {
    {"INIT", kSubsysInit},   {"COLL", kSubsysColl},     {"P2P", kSubsysP2p},
    {"SHM", kSubsysShm},     {"NET", kSubsysNet},       {"BOOTSTRAP", kSubsysBootstrap},
    {"ENV", kSubsysEnv},     {"TUNING", kSubsysTuning}, {"PROXY", kSubsysProxy},
    {"GRAPH", kSubsysGraph}, {"ALL", kSubsysAll},
};

uint32_t parseSubsys(const std::string& spec) {
  if (spec.empty()) return kSubsysInit | kSubsysEnv;
  bool invert = spec[0] == '^';
  uint32_t mask = 0;
  size_t pos = invert ? 1 : 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string token =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    for (const SubsysName& s : kSubsysNames)
      if (strcasecmp(token.c_str(), s.name) == 0) mask |= s.bit;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return invert ? ~mask : mask;
}

int parseLevel(const std::string& v) {
  if (strcasecmp(v.c_str(), "WARN") == 0) return static_cast<int>(LogLevel::kWarn);
  if (strcasecmp(v.c_str(), "INFO") == 0) return static_cast<int>(LogLevel::kInfo);
  if (strcasecmp(v.c_str(), "TRACE") == 0) return static_cast<int>(LogLevel::kTrace);
  return static_cast<int>(LogLevel::kNone);
}

std::string expandFileName(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      char c = pattern[++i];
      if (c == 'h') {
        out += gHost;
      } else if (c == 'p') {
        out += std::to_string(getpid());
      } else {
        out += '%';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

void initLocked() {
  gethostname(gHost, sizeof(gHost) - 1);
  if (char* dot = strchr(gHost, '.')) *dot = '\0';
  if (gLogFile != nullptr && gLogFile != stderr) fclose(gLogFile);
  gLogFile = stderr;
  std::string file = paramString("DEBUG_FILE");
  if (!file.empty()) {
    FILE* f = fopen(expandFileName(file).c_str(), "a");
    if (f != nullptr) {
      setvbuf(f, nullptr, _IOLBF, 0);
      gLogFile = f;
    }
  }
  gLog.subsysMask = parseSubsys(paramString("DEBUG_SUBSYS"));
  // Publish the level last: readers check it without the lock.
  __atomic_store_n(&gLog.level, parseLevel(paramString("DEBUG")), __ATOMIC_RELEASE);
}

}  // namespace

uint32_t parseLogSubsys(const std::string& spec) {
  return parseSubsys(spec);
}

int parseLogLevel(const std::string& value) {
  return parseLevel(value);
}

void logInitOnce() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  if (gLog.level >= 0) return;
  initLocked();
}

void logReinit() {
  std::lock_guard<std::mutex> lock(gLogMutex);
  initLocked();
}

void setLogRank(int rank) {
  tRank = rank;
}

void logWrite(LogLevel level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  (void)subsys;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* levelName = level == LogLevel::kWarn   ? "WARN"
                          : level == LogLevel::kInfo ? "INFO"
                                                     : "TRACE";
  const char* base = strrchr(file, '/');
  base = base ? base + 1 : file;
  char rankText[16] = "";
  if (tRank >= 0) snprintf(rankText, sizeof(rankText), " [%d]", tRank);
  std::lock_guard<std::mutex> lock(gLogMutex);
  FILE* out = gLogFile ? gLogFile : stderr;
  if (level == LogLevel::kTrace) {
    fprintf(out, "%s:%d:%ld%s CHORUS %s %s:%d %s\n", gHost, getpid(), (long)syscall(SYS_gettid),
            rankText, levelName, base, line, msg);
  } else {
    fprintf(out, "%s:%d:%ld%s CHORUS %s %s\n", gHost, getpid(), (long)syscall(SYS_gettid), rankText,
            levelName, msg);
  }
}

}  // namespace chorus
