#pragma once
// URL parameters every store takes the same way (docs/configuration.md, "Store URLs"): one rule
// for a duration parameter, so `archive_retention=7d` and `dead_retention=7d` read alike on
// SQLite, PostgreSQL, Redis and memory.

#include <optional>
#include <string_view>

#include "core/url.h"
#include "outpost/store.h"

namespace outpost::core {

// The duration parameter `name` of `url` ("500ms", "30s", "5m", "12h", "7d"; core/duration.h),
// or nullopt when absent. Throws ConfigError naming the parameter.
std::optional<Duration> duration_param(const Url& url, std::string_view name);

// archive_retention= and dead_retention= into `options` (those given override it).
void apply_retention_params(const Url& url, StoreOptions& options);

}  // namespace outpost::core
