#pragma once
// Validation of names that end up inside SQL text or Redis keys. Identifiers are never
// interpolated unchecked: everything passes through here first.

#include <string>
#include <string_view>

#include "outpost/error.h"

namespace outpost::core {

// [A-Za-z_][A-Za-z0-9_]{0,62}: safe to splice into SQL unquoted in any engine we support.
inline bool is_valid_identifier(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  if (!alpha(name[0])) return false;
  for (char c : name)
    if (!alpha(c) && !(c >= '0' && c <= '9')) return false;
  return true;
}

// Throws ConfigError: "<what> 'x;drop' is invalid: use [A-Za-z_][A-Za-z0-9_]{0,62}".
inline void require_identifier(std::string_view name, std::string_view what) {
  if (!is_valid_identifier(name))
    throw ConfigError(std::string(what) + " '" + std::string(name) +
                      "' is invalid: use 1-63 characters [A-Za-z_][A-Za-z0-9_]*");
}

}  // namespace outpost::core
