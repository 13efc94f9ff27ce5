#pragma once
// The one JSON encoding of an event (DESIGN §6), used by the file sink, `outpost emit -` and
// `outpost events list`:
//   {"id":"…","type":"…","key":"…","payload":<JSON value>,"occurred_at":"RFC 3339",
//    "headers":{…},"attempts":N}
// A payload that is valid JSON is embedded as a JSON value; any other payload is a JSON string.
// On input only `type` and `payload` are required; a given `id` must be a UUID and is kept.

#include <string>
#include <string_view>

#include "outpost/event.h"

namespace outpost {

std::string to_json(const StoredEvent& event);
std::string to_json(const Event& event);  // attempts omitted

// Throws ConfigError naming the bad field.
Event event_from_json(std::string_view line);

}  // namespace outpost
