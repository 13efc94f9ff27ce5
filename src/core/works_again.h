#pragma once
// The one line a relay and a consumer log once when an outage of their store (or log) ends:
// "WHAT again after 12.3 s (N failed UNITS)" (docs/operations.md, "Logs"). The consumer uses it
// (src/consume/consumer.cpp); the relay's own copy of the text is src/relay/relay.cpp.

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

namespace outpost::core {

// `what`: "the store works", "the log and the checkpoint store work"; `unit`: "failed calls",
// "failed tries".
inline std::string works_again(std::string_view what, std::chrono::steady_clock::duration took,
                               std::size_t failures, std::string_view unit) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", std::chrono::duration<double>(took).count());
  return std::string(what) + " again after " + seconds + " s (" + std::to_string(failures) + " " +
         std::string(unit) + ")";
}

}  // namespace outpost::core
