#pragma once
// Event headers as a JSON object of strings: how the SQLite and PostgreSQL stores keep them.

#include <optional>
#include <string>
#include <string_view>

#include "outpost/event.h"

namespace outpost::core {

// {"name":"value",...}; invalid UTF-8 is replaced (U+FFFD) rather than refused.
std::string headers_to_json(const Headers& headers);
// nullopt when `json` is not a JSON object; non-string values come back as their JSON text.
std::optional<Headers> headers_from_json(std::string_view json);

}  // namespace outpost::core
