// URL parsing of the SQLite store (sqlite:PATH | sqlite::memory: with parameters, see
// include/outpost/stores/sqlite.h) and the setup of a user's own connection.

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>

#include "core/names.h"
#include "core/store_params.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/stores/sqlite.h"
#include "stores/sqlite/sqlite_conn.h"
#include "stores/sqlite/sqlite_url.h"

namespace outpost {

namespace sqlite_store {

void check_options(const SqliteOptions& o) {
  if (o.path.empty()) throw ConfigError("sqlite store: the database path is empty");
  // SQLite takes the path as a C string: a NUL (%00 in a URL) would silently cut it short.
  if (o.path.find('\0') != std::string::npos)
    throw ConfigError("sqlite store: the database path contains a NUL byte (%00)");
  if (o.busy_timeout.count() < 0)
    throw ConfigError("sqlite store: busy_timeout must not be negative");
  // SQLite would say "disk I/O error" (a connection error, retried as an outage).
  if (std::error_code ec; o.path != ":memory:" && std::filesystem::is_directory(o.path, ec))
    throw ConfigError("sqlite store: '" + o.path + "' is a directory, not a database file");
}

SqliteOptions parse_url(std::string_view url, const StoreOptions& options) {
  auto u = core::Url::parse(url);
  if (u.scheme() != "sqlite") throw ConfigError("not a sqlite: URL: '" + u.redacted() + "'");
  SqliteOptions o;
  o.store = options;
  if (u.hierarchical()) {
    // sqlite:///abs/path is accepted as sqlite:/abs/path; a host is not.
    if (!u.hosts().empty())
      throw ConfigError("bad URL '" + u.redacted() +
                        "': sqlite URLs take a path, not a host (use sqlite:PATH or "
                        "sqlite:///abs/path)");
    o.path = "/" + u.path();
  } else {
    o.path = u.path();
  }
  // SQLite takes the path as a C string: a NUL (%00) would silently cut it short. Refused here
  // so check_store_url finds it before anything is opened.
  if (o.path.find('\0') != std::string::npos)
    throw ConfigError("bad URL '" + u.redacted() +
                      "': the database path contains a NUL byte (%00)");
  if (o.path.empty() || o.path == "/")
    throw ConfigError("bad URL '" + u.redacted() +
                      "': missing database path (use sqlite:PATH or sqlite::memory:)");
  if (o.path.back() == '/')
    throw ConfigError("bad URL '" + u.redacted() +
                      "': the database path names a directory (it ends in '/'): name a file, "
                      "e.g. sqlite:" +
                      o.path + "outbox.db");
  if (auto table = u.param("table")) o.table = *table;
  core::require_identifier(o.table, "table name (URL parameter 'table')");
  if (auto sync = u.param("synchronous")) {
    std::string v = *sync;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "normal")
      o.synchronous_full = false;
    else if (v == "full")
      o.synchronous_full = true;
    else
      throw ConfigError("bad URL '" + u.redacted() +
                        "': parameter 'synchronous' must be "
                        "normal or full, not '" +
                        *sync + "'");
  }
  if (auto archive = u.bool_param("archive")) o.store.archive = *archive;
  core::apply_retention_params(u, o.store);  // archive_retention=, dead_retention=
  if (auto ms = u.int_param("retention_ms", 0, INT64_MAX / 1000))
    o.store.archive_retention = Duration(*ms);
  if (auto ms = u.int_param("busy_timeout_ms", 0, INT32_MAX))
    o.busy_timeout = std::chrono::milliseconds(*ms);
  if (auto n = u.int_param("max_payload_bytes", 0, INT32_MAX))
    o.store.max_payload_bytes = static_cast<std::size_t>(*n);
  u.reject_unknown();
  return o;
}

}  // namespace sqlite_store

std::unique_ptr<Store> open_sqlite_store(std::string_view url, const StoreOptions& options) {
  return make_sqlite_store(sqlite_store::parse_url(url, options));
}

void configure_sqlite_connection(sqlite3* db, std::chrono::milliseconds busy_timeout,
                                 bool synchronous_full) {
  if (!db) throw ConfigError("configure_sqlite_connection: null connection", "sqlite");
  sqlite3_busy_timeout(db,
                       static_cast<int>(std::min<std::int64_t>(busy_timeout.count(), INT32_MAX)));
  const char* file = sqlite3_db_filename(db, "main");
  if (file && *file) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    if (err) sqlite3_free(err);
    if (rc != SQLITE_OK) sqlite_store::throw_no_wal(file, msg + ", code " + std::to_string(rc));
  }
  sqlite3_exec(db, synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
               nullptr, nullptr, nullptr);
}

}  // namespace outpost
