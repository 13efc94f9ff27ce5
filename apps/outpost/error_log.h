#pragma once
// Delivery errors can come by the thousand (a sink down): the CLI prints the first 20, then one
// in every 1000 with the count so far, so the log stays readable and the process is not slowed
// by its own output. `outpost relay`, `outpost consume` and each pipeline of `outpost run`.

#include <atomic>
#include <cstdint>
#include <iostream>
#include <mutex>
#include <string>

#include "cli.h"

namespace outpost::cli {

// Whether the n-th error (counting from 1) is printed.
inline bool error_is_printed(std::uint64_t n) {
  return n <= 20 || n % 1000 == 0;
}
// " (N errors so far)" once errors are thinned out, else "".
inline std::string errors_so_far(std::uint64_t n) {
  return n > 20 ? " (" + std::to_string(n) + " errors so far)" : std::string();
}

// Prints "<prefix>: <message, redacted>" on stderr for the errors error_is_printed() picks;
// nothing when quiet. Safe from any thread.
class ErrorLog {
 public:
  ErrorLog(std::string prefix, bool quiet) : prefix_(std::move(prefix)), quiet_(quiet) {}
  void operator()(const std::string& message) {
    auto n = count_.fetch_add(1) + 1;
    if (quiet_ || !error_is_printed(n)) return;
    std::lock_guard lock(mu_);
    std::cerr << prefix_ << ": " << redact(message) << errors_so_far(n) << "\n";
  }

 private:
  const std::string prefix_;
  const bool quiet_;
  std::atomic<std::uint64_t> count_{0};
  std::mutex mu_;
};

}  // namespace outpost::cli
