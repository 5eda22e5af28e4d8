#include "common/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace chorus {

std::string formatString(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char small[512];
  va_list copy;
  va_copy(copy, ap);
  int n = vsnprintf(small, sizeof(small), fmt, copy);
  va_end(copy);
  std::string out;
  if (n < 0) {
    out = fmt;
  } else if (static_cast<size_t>(n) < sizeof(small)) {
    out.assign(small, static_cast<size_t>(n));
  } else {
    out.resize(static_cast<size_t>(n) + 1);
    vsnprintf(&out[0], out.size(), fmt, ap);
    out.resize(static_cast<size_t>(n));
  }
  va_end(ap);
  return out;
}

Status errnoError(int err, const std::string& what) {
  char buf[128];
  const char* text = strerror_r(err, buf, sizeof(buf));
  return Status(Code::kSystemError, what + ": " + text + " (errno " + std::to_string(err) + ")");
}

}  // namespace chorus
