// Status and Result: how every layer below the front ends reports failure. Front ends translate a
// Status into their runtime's error type (OrtStatus, ggml_status).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace npuflow {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad model or bad input: the user's to fix
  kUnsupported,      // outside a device's contract: the caller falls back to host
  kResourceExhausted,
  kDeviceFailure,  // the device accepted the call and then failed it
  kInternal,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status unsupported(std::string m) {
  return {StatusCode::kUnsupported, std::move(m)};
}
inline Status internal_error(std::string m) {
  return {StatusCode::kInternal, std::move(m)};
}

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {}  // NOLINT

  bool is_ok() const { return std::holds_alternative<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& value() const& { return std::get<T>(state_); }
  Status status() const { return is_ok() ? Status::ok() : std::get<Status>(state_); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace npuflow

#define NPUFLOW_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    ::npuflow::Status npuflow_status_ = (expr);           \
    if (!npuflow_status_.is_ok()) return npuflow_status_; \
  } while (0)
