#pragma once
// The relay survives whatever a store or sink throws: every such call goes through failure_of(),
// which turns an exception into its text, so each call site says once what it does on failure
// instead of repeating a try/catch pair.

#include <exception>
#include <optional>
#include <string>
#include <utility>

namespace outpost::relay_detail {

// The failure text when there is no memory for the real one: 13 characters fit libstdc++'s
// in-object buffer (15), so making it allocates nothing and cannot throw.
inline std::optional<std::string> out_of_memory_failure() noexcept {
  return std::optional<std::string>(std::in_place, "out of memory");
}

// Runs `f`; nullopt when it returned, else the exception's what() (a fixed text for non-std
// exceptions).
template <typename F>
std::optional<std::string> failure_of(F&& f) noexcept {
  try {
    f();
    return std::nullopt;
  } catch (const std::exception& ex) {
    try {
      return std::string(ex.what());
    } catch (...) {
      // Out of memory for the text: still a failure (nullopt would read as success and, e.g.,
      // count a failed settle as done). Short enough for the small-string buffer: no allocation.
      return out_of_memory_failure();
    }
  } catch (...) {
    try {
      return std::string("an unknown (non-std) exception");
    } catch (...) {
      return out_of_memory_failure();
    }
  }
}

}  // namespace outpost::relay_detail
