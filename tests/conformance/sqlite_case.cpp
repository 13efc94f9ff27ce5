// Registers the SQLite store with the store conformance suite: each fixture is a fresh file in
// the per-process temp directory; open_again opens a second store object on the file, and
// append_in_tx writes through a separate raw sqlite3 connection inside BEGIN IMMEDIATE.

#include <sqlite3.h>

#include <filesystem>
#include <stdexcept>

#include "outpost/stores/sqlite.h"
#include "store_cases.h"

namespace {

using outpost::testing::StoreFixture;

void exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(std::string(sql) + ": " + msg);
  }
}

const bool registered = outpost::testing::register_store_case({
    .name = "sqlite",
    .unavailable_reason = [] { return std::string(); },
    .make =
        [](const outpost::StoreOptions& options) {
          std::string path =
              outpost::testing::temp_dir() + "/" + outpost::testing::unique_name("conf") + ".db";
          outpost::SqliteOptions o;
          o.path = path;
          o.store = options;
          StoreFixture f;
          f.store = outpost::make_sqlite_store(o);
          f.open_again = [o] {
            return std::shared_ptr<outpost::Store>(outpost::make_sqlite_store(o));
          };
          std::weak_ptr<outpost::Store> weak =
              f.store;  // no cycle: cleanup runs after the store closes
          f.append_in_tx = [path, weak](std::span<const outpost::Event> events, bool commit) {
            sqlite3* db = nullptr;
            if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) {
              sqlite3_close(db);
              throw std::runtime_error("cannot open " + path);
            }
            std::unique_ptr<sqlite3, int (*)(sqlite3*)> guard(db, sqlite3_close);
            outpost::configure_sqlite_connection(db);
            exec(db, "CREATE TABLE IF NOT EXISTS business (n INTEGER)");
            exec(db, "BEGIN IMMEDIATE");
            exec(db, "INSERT INTO business VALUES (1)");
            weak.lock()->append(events, outpost::TxHandle::sqlite(db));
            exec(db, commit ? "COMMIT" : "ROLLBACK");
          };
          f.checks_generated_ids = false;
          f.url = "sqlite:" + path;
          f.cleanup = [path] {
            for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
          };
          return f;
        },
});

}  // namespace
