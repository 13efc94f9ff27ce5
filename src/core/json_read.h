#pragma once
// event_from_json (outpost/json.h) with the line's key position: how the consumers read a log's
// events (src/consume/message.cpp).

#include <cstdint>
#include <string_view>

#include "outpost/json.h"

namespace outpost::core {

// As outpost::event_from_json; with `key_seq` not null, a keyed event's "key_seq" (the key
// position, outpost/key_seq.h) is stored there (left as it is when the line has none or the
// event no key). A "key_seq" that is not a positive integer is a ConfigError, as a mistyped
// field is.
Event event_from_json(std::string_view line, JsonInput input, std::int64_t* key_seq);

}  // namespace outpost::core
