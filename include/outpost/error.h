#pragma once
// Errors thrown at the API boundary. One flat root (outpost::Error) so callers can catch
// everything in one place; subclasses only where a catch site behaves differently.
// Inside the relay's hot path per-event outcomes are values (see sink.h), never exceptions.

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>

namespace outpost {

enum class ErrorCode {
  config,      // bad URL, option, table name, flag: fix the input; never retryable
  connection,  // the server/file could not be reached or the connection broke: retryable
  timeout,     // an operation ran out of time: retryable
  in_doubt,    // a write was sent but we do not know whether it took effect
  corrupt,     // the file/database is not an outpost store or its schema is unknown
  too_large,   // an event or payload is over a configured limit
  not_found,   // a named object (event id, stream) does not exist
  conflict,    // a second handler for one type, a lease held by somebody else
  backend,     // any other error reported by the engine
  internal,    // a bug in outpost
};

std::string_view to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  // `backend` names the component ("sqlite", "postgres", "kafka", "config", ...);
  // `native_code` is the engine's own code when there is one (SQLite result code, SQLSTATE...).
  Error(ErrorCode code, std::string backend, const std::string& message,
        std::string native_code = {});

  ErrorCode code() const noexcept { return code_; }
  const std::string& backend() const noexcept { return backend_; }
  const std::string& native_code() const noexcept { return native_code_; }
  // True when trying the same thing again later may succeed (connection, timeout, busy).
  bool retryable() const noexcept;

 private:
  ErrorCode code_;
  std::string backend_;
  std::string native_code_;
};

// Bad input: a URL, option, flag or name. The message names the bad part. CLI exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& message, std::string backend = "config")
      : Error(ErrorCode::config, std::move(backend), message) {}
};

class ConnectionError : public Error {
 public:
  ConnectionError(std::string backend, const std::string& message, std::string native_code = {})
      : Error(ErrorCode::connection, std::move(backend), message, std::move(native_code)) {}
};

class TimeoutError : public Error {
 public:
  TimeoutError(std::string backend, const std::string& message)
      : Error(ErrorCode::timeout, std::move(backend), message) {}
};

// The request was sent but the reply was lost: the effect may or may not have happened.
// (libpqxx's in_doubt_error reasoning: the caller must check, not blindly retry or give up.)
class InDoubtError : public Error {
 public:
  InDoubtError(std::string backend, const std::string& message)
      : Error(ErrorCode::in_doubt, std::move(backend), message) {}
};

// The destination of a delivery is down or busy, not refusing the event. A handler throws it
// (or a subclass) to say "pause me and try later" instead of spending one of the event's
// attempts; sinks report it as DeliveryResult::unavailable (docs/relay.md, "Failure classes").
class UnavailableError : public Error {
 public:
  explicit UnavailableError(const std::string& message,
                            std::chrono::milliseconds retry_after = std::chrono::milliseconds{0},
                            std::string backend = "handler")
      : Error(ErrorCode::connection, std::move(backend), message), retry_after_(retry_after) {}
  std::chrono::milliseconds retry_after() const noexcept { return retry_after_; }

 private:
  std::chrono::milliseconds retry_after_;
};

}  // namespace outpost
