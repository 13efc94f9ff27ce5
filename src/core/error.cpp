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

namespace {

// what() is a C string: a NUL inside a message (a decoded URL parameter, a value from a server)
// would cut it off there, hiding what is wrong. It is shown as \x00 instead.
std::string without_nul(const std::string& message) {
  if (message.find('\0') == std::string::npos) return message;
  std::string out;
  out.reserve(message.size() + 8);
  for (char c : message) {
    if (c == '\0')
      out += "\\x00";
    else
      out += c;
  }
  return out;
}

}  // namespace

Error::Error(ErrorCode code, std::string backend, const std::string& message,
             std::string native_code)
    : std::runtime_error(without_nul(message)),
      code_(code),
      backend_(std::move(backend)),
      native_code_(std::move(native_code)) {}

bool Error::retryable() const noexcept {
  return code_ == ErrorCode::connection || code_ == ErrorCode::timeout ||
         code_ == ErrorCode::in_doubt;
}

}  // namespace outpost
