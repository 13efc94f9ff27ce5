#pragma once
// Delivery errors can come by the thousand (a sink down): the CLI prints the first 20, then one
// in every 1000 with the count so far, so the log stays readable and the process is not slowed
// by its own output. `outpost relay`, `outpost consume` and each pipeline of `outpost run`
// (error_log() in log.h applies the rule).

#include <cstdint>
#include <string>

namespace outpost::cli {

// Whether the n-th error (counting from 1) is printed.
inline bool error_is_printed(std::uint64_t n) {
  return n <= 20 || n % 1000 == 0;
}
// " (N errors so far)" once errors are thinned out, else "".
inline std::string errors_so_far(std::uint64_t n) {
  return n > 20 ? " (" + std::to_string(n) + " errors so far)" : std::string();
}

}  // namespace outpost::cli
