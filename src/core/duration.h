#pragma once
// Durations as operators write them: "500ms", "30s", "5m", "12h", "7d"; a bare number is
// seconds. The same forms as the PostgreSQL store's archive_retention (docs/postgres.md); the
// command line (`outpost events --older-than`, docs/cli.md) parses with this one.

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::core {

// `what` names the input in the error (e.g. "--older-than"). Throws ConfigError for anything
// but a non-negative whole number and one of the units ms, s, m, h, d, and for a duration whose
// microseconds do not fit in 64 bits (TimePoint arithmetic with it would overflow).
inline Duration parse_duration(std::string_view text, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return ConfigError(std::string(what) + " " + why + ", got '" + std::string(text) + "'");
  };
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || n < 0) throw bad("must be a duration like 7d, 12h, 30m, 10s or 500ms");
  std::string_view unit(p, static_cast<std::size_t>(text.data() + text.size() - p));
  std::int64_t ms_per_unit = 0;
  if (unit == "ms")
    ms_per_unit = 1;
  else if (unit.empty() || unit == "s")
    ms_per_unit = 1'000;
  else if (unit == "m")
    ms_per_unit = 60'000;
  else if (unit == "h")
    ms_per_unit = 3'600'000;
  else if (unit == "d")
    ms_per_unit = 86'400'000;
  else
    throw bad("has an unknown unit '" + std::string(unit) + "' (use ms, s, m, h or d)");
  if (n > std::numeric_limits<std::int64_t>::max() / 1000 / ms_per_unit) throw bad("is too large");
  return Duration(n * ms_per_unit);
}

}  // namespace outpost::core
