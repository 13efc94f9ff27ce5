#pragma once
// The key position sinks deliver with an event (outpost/key_seq.h), formatted once.

#include <charconv>
#include <string_view>

#include "outpost/event.h"
#include "outpost/key_seq.h"

namespace outpost::core {

// StoredEvent::seq in decimal into `out` (NUL-terminated), or empty when the event carries no
// key position: no key (no order to place it in), or no sequence (seq 0: not read from a store).
inline std::string_view format_key_seq(const StoredEvent& event, char (&out)[24]) {
  if (event.key.empty() || event.seq <= 0) return {};
  char* end = std::to_chars(out, out + sizeof out - 1, event.seq).ptr;
  *end = '\0';
  return {out, static_cast<std::size_t>(end - out)};
}

}  // namespace outpost::core
