#include "outpost/error.h"

namespace outpost {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::config:
      return "config";
    case ErrorCode::connection:
      return "connection";
    case ErrorCode::timeout:
      return "timeout";
    case ErrorCode::in_doubt:
      return "in_doubt";
    case ErrorCode::corrupt:
      return "corrupt";
    case ErrorCode::too_large:
      return "too_large";
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::conflict:
      return "conflict";
    case ErrorCode::backend:
      return "backend";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, std::string backend, const std::string& message,
             std::string native_code)
    : std::runtime_error(message),
      code_(code),
      backend_(std::move(backend)),
      native_code_(std::move(native_code)) {}

bool Error::retryable() const noexcept {
  return code_ == ErrorCode::connection || code_ == ErrorCode::timeout ||
         code_ == ErrorCode::in_doubt;
}

}  // namespace outpost
