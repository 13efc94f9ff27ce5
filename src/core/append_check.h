#pragma once
// What every store does to events before writing them, so the rules are the same everywhere
// (one validation layer; docs/cli.md, "Input rules"). The CLI runs the same checks
// before it opens a store.

#include <span>
#include <string>
#include <vector>

#include "core/utf8.h"
#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/store.h"

namespace outpost::core {

// Empty when `text` is UTF-8 without NUL within `max` bytes; otherwise what is wrong with it.
inline std::string text_problem(std::string_view text, std::size_t max) {
  if (text.size() > max)
    return "is " + std::to_string(text.size()) + " bytes, over the limit of " + std::to_string(max);
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    return "contains NUL (byte " + std::to_string(nul) + ")";
  if (auto bad = utf8_invalid_at(text); bad != text.size())
    return "is not valid UTF-8 (byte " + std::to_string(bad) + ")";
  return {};
}

// Throws ConfigError naming the field (type, key, header 'NAME', header name) of `e`, prefixed by
// where() ("event 3", "stdin line 7"; called only on failure, so the emit path builds no string),
// or Error(too_large) for an oversize payload. Type, key and headers: UTF-8 without NUL within
// outpost::limits; type non-empty.
template <class Where>
void check_event(const Event& e, const Where& where, std::size_t max_payload_bytes,
                 std::string_view backend) {
  auto fail = [&](const std::string& field, const std::string& problem) {
    throw ConfigError(where() + ": " + field + " " + problem, std::string(backend));
  };
  if (e.type.empty()) fail("type", "must not be empty");
  if (auto p = text_problem(e.type, limits::kMaxTypeBytes); !p.empty()) fail("type", p);
  if (auto p = text_problem(e.key, limits::kMaxKeyBytes); !p.empty()) fail("key", p);
  if (e.headers.size() > limits::kMaxHeaders)
    fail("headers", "are " + std::to_string(e.headers.size()) + ", over the limit of " +
                        std::to_string(limits::kMaxHeaders));
  for (const auto& [name, value] : e.headers) {
    if (name.empty()) fail("header name", "is empty");
    if (auto p = text_problem(name, limits::kMaxHeaderNameBytes); !p.empty())
      fail("header name", p);
    if (auto p = text_problem(value, limits::kMaxHeaderValueBytes); !p.empty())
      fail("header '" + name + "'", p);
  }
  if (max_payload_bytes && e.payload.size() > max_payload_bytes)
    throw Error(ErrorCode::too_large, std::string(backend),
                where() + " (type '" + e.type + "'): payload of " +
                    std::to_string(e.payload.size()) + " bytes is over the limit of " +
                    std::to_string(max_payload_bytes) + " bytes");
}

// Returns copies with nil ids replaced by fresh UUIDv7 and zero occurred_at set to now, and the
// causal chain of the event handled on this thread where they give none (inherit_from_handled,
// outpost/event.h). Throws before anything is written (check_event, naming "event <index>").
inline std::vector<Event> prepare_for_append(std::span<const Event> events,
                                             const StoreOptions& options,
                                             std::string_view backend) {
  std::vector<Event> out(events.begin(), events.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    Event& e = out[i];
    inherit_from_handled(e);
    check_event(
        e, [i] { return "event " + std::to_string(i); }, options.max_payload_bytes, backend);
    if (e.id.is_nil()) e.id = EventId::generate();
    if (e.occurred_at.time_since_epoch().count() == 0) e.occurred_at = now();
  }
  return out;
}

}  // namespace outpost::core
