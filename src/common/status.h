// Status and Result: the internal error currency. Codes map one-to-one onto ncclResult_t so the
// API layer converts without a table; no exception ever crosses a layer boundary.
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace chorus {

enum class Code : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

// A success is one word with no message: every call returns several, so they must cost
// nothing to make, copy and drop. A failure keeps its message out of line.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message)
      : code_(code), message_(std::make_shared<const std::string>(std::move(message))) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == Code::kSuccess; }
  explicit operator bool() const { return isOk(); }
  Code code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : emptyMessage(); }

  // Adds context in front of the message, keeping the code ("bootstrap: <message>").
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message());
  }

 private:
  static const std::string& emptyMessage() {
    static const std::string empty;
    return empty;
  }

  Code code_ = Code::kSuccess;
  std::shared_ptr<const std::string> message_;  // null for a success
};

// printf-style message formatting shared by the error constructors and the logger.
std::string formatString(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define CHORUS_STATUS_FACTORY(name, code)                  \
  template <class... Args>                                 \
  inline Status name(const char* fmt, Args... args) {      \
    return Status(Code::code, formatString(fmt, args...)); \
  }                                                        \
  inline Status name(const char* msg) {                    \
    return Status(Code::code, msg);                        \
  }

CHORUS_STATUS_FACTORY(invalidArgument, kInvalidArgument)
CHORUS_STATUS_FACTORY(invalidUsage, kInvalidUsage)
CHORUS_STATUS_FACTORY(systemError, kSystemError)
CHORUS_STATUS_FACTORY(internalError, kInternalError)
CHORUS_STATUS_FACTORY(remoteError, kRemoteError)
#undef CHORUS_STATUS_FACTORY

// Work handed over to run later (non-blocking communicators): ncclInProgress, not an error.
inline Status inProgress() {
  return Status(Code::kInProgress, "in progress");
}

// A system error carrying strerror(err) after the message.
Status errnoError(int err, const std::string& what);

// Either a value or the Status explaining why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool isOk() const { return status_.isOk(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T&& take() { return std::move(value_); }

 private:
  Status status_;
  T value_{};
};

}  // namespace chorus

// Propagates a failed Status to the caller.
#define CHORUS_TRY(expr)                                       \
  do {                                                         \
    ::chorus::Status chorus_try_status_ = (expr);              \
    if (!chorus_try_status_.isOk()) return chorus_try_status_; \
  } while (0)

// Assigns the value of a Result expression, or returns its Status.
#define CHORUS_ASSIGN_OR_RETURN(lhs, expr)                 \
  auto CHORUS_CONCAT_(chorus_res_, __LINE__) = (expr);     \
  if (!CHORUS_CONCAT_(chorus_res_, __LINE__).isOk())       \
    return CHORUS_CONCAT_(chorus_res_, __LINE__).status(); \
  lhs = CHORUS_CONCAT_(chorus_res_, __LINE__).take()
#define CHORUS_CONCAT_INNER_(a, b) a##b
#define CHORUS_CONCAT_(a, b) CHORUS_CONCAT_INNER_(a, b)
