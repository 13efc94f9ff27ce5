#pragma once
// What every store does to events before writing them, so the rules are the same everywhere.

#include <span>
#include <string>
#include <vector>

#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/store.h"

namespace outpost::core {

// Returns copies with nil ids replaced by fresh UUIDv7 and zero occurred_at set to now.
// Throws before anything is written: ConfigError for an empty type, Error(too_large) for an
// oversize payload (the message names the event index, type and sizes).
inline std::vector<Event> prepare_for_append(std::span<const Event> events,
                                             const StoreOptions& options,
                                             std::string_view backend) {
  std::vector<Event> out(events.begin(), events.end());
  for (std::size_t i = 0; i < out.size(); ++i) {
    Event& e = out[i];
    if (e.type.empty())
      throw ConfigError("event " + std::to_string(i) + ": type must not be empty",
                        std::string(backend));
    if (options.max_payload_bytes && e.payload.size() > options.max_payload_bytes)
      throw Error(ErrorCode::too_large, std::string(backend),
                  "event " + std::to_string(i) + " (type '" + e.type + "'): payload of " +
                      std::to_string(e.payload.size()) + " bytes is over the limit of " +
                      std::to_string(options.max_payload_bytes) + " bytes");
    if (e.id.is_nil()) e.id = EventId::generate();
    if (e.occurred_at.time_since_epoch().count() == 0) e.occurred_at = now();
  }
  return out;
}

}  // namespace outpost::core
