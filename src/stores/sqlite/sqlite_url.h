#pragma once
// The SQLite store's URL (sqlite:PATH | sqlite::memory: with parameters, include/outpost/stores/
// sqlite.h): every bad part is a ConfigError naming it, before any file is opened or created.

#include <string_view>

#include "outpost/store.h"
#include "outpost/stores/sqlite.h"

namespace outpost::sqlite_store {

SqliteOptions parse_url(std::string_view url, const StoreOptions& options);

// The options a store is made with (also without a URL): the path (not empty, no NUL, not a
// directory) and busy_timeout. ConfigError naming what is wrong.
void check_options(const SqliteOptions& o);

}  // namespace outpost::sqlite_store
