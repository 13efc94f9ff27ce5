#pragma once
// The relay survives whatever a store or sink throws: every such call goes through failure_of(),
// which turns an exception into a Failure (its text, and the outpost::Error code when it was
// one), so each call site says once what it does on failure instead of repeating a try/catch
// pair. The code is what tells an outage (retried) from a row the store cannot read (fatal:
// docs/emit-contract.md; docs/operations.md, "The daemon").

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "outpost/error.h"

namespace outpost::relay_detail {

struct Failure {
  std::string text;               // what(); a fixed text for non-std exceptions
  std::optional<ErrorCode> code;  // set when an outpost::Error was thrown
  std::exception_ptr error;       // what was thrown, rethrown when it stops the relay
  // Retrying cannot cure it: the store holds a row it cannot read (docs/emit-contract.md), or is
  // not an outpost store at all. Everything else (outages, timeouts, a full disk) is retried.
  bool fatal() const noexcept { return code == ErrorCode::corrupt; }
};

// Runs `f`; nullopt when it returned, else what it threw.
template <typename F>
std::optional<Failure> failure_of(F&& f) noexcept {
  try {
    f();
    return std::nullopt;
  } catch (...) {
    // An empty Failure allocates nothing; the text is filled in below if there is memory for it.
    std::optional<Failure> out(std::in_place);
    out->error = std::current_exception();
    try {
      throw;
    } catch (const Error& ex) {
      out->code = ex.code();
    } catch (...) {
    }
    try {
      try {
        throw;
      } catch (const std::exception& ex) {
        out->text = ex.what();
      } catch (...) {
        out->text = "an unknown (non-std) exception";
      }
    } catch (...) {
      // Out of memory for the text: still a failure (nullopt would read as success and, e.g.,
      // count a failed settle as done). 13 characters fit libstdc++'s in-object buffer (15): no
      // allocation.
      out->text = "out of memory";
    }
    return out;
  }
}

}  // namespace outpost::relay_detail
