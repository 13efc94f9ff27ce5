#pragma once
// RFC 3339 UTC with microseconds (2026-11-22T02:42:48.123456Z): the one formatter behind
// outpost::format_rfc3339 (event.h) and the sinks' per-event timestamps.

#include <cstdint>
#include <string_view>

#include "outpost/event.h"

namespace outpost::core {

// Formats without an allocation; the date and time up to the seconds are computed once per
// second of input (gmtime is the costly part), the microseconds by hand. The view stays valid
// (and NUL-terminated) until the next call. Not thread-safe: one per thread or per sink.
class Rfc3339Formatter {
 public:
  std::string_view format(TimePoint t);

 private:
  std::int64_t secs_ = 0;
  bool filled_ = false;
  char text_[64] = {};  // "YYYY-MM-DDTHH:MM:SS.uuuuuuZ" (27 characters for years 0-9999)
  std::size_t size_ = 0;
};

}  // namespace outpost::core
