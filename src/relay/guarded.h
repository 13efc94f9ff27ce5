#pragma once
// The relay survives whatever a store or sink throws: every such call goes through failure_of(),
// which turns an exception into its text, so each call site says once what it does on failure
// instead of repeating a try/catch pair.

#include <exception>
#include <optional>
#include <string>

namespace outpost::relay_detail {

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
      return std::nullopt;  // out of memory for the text: nothing better to report
    }
  } catch (...) {
    try {
      return std::string("an unknown (non-std) exception");
    } catch (...) {
      return std::nullopt;
    }
  }
}

}  // namespace outpost::relay_detail
