#pragma once
// The SQLite store: the embedded default. The outbox is a table in the application's own SQLite
// file, so an event is written in the same transaction as the business data.
//
// URL:  sqlite:PATH  |  sqlite::memory:   with optional parameters
//   table=outbox              table name, [A-Za-z_][A-Za-z0-9_]{0,62}; the store also creates
//                             <table>_dead, <table>_archive and <table>_schema
//   synchronous=normal|full   normal (default): a power loss may lose the last commits, never
//                             corrupts (WAL); full: fsync every commit
//   archive=true|false        move acked events to <table>_archive instead of deleting them
//   retention_ms=N            archived events older than N ms are removed (0 = keep forever)
//   busy_timeout_ms=N         how long a write waits for another process's lock before a
//                             TimeoutError (default 30000); SQLITE_BUSY never reaches the caller
//   max_payload_bytes=N       largest accepted payload (default from StoreOptions, 1 MiB)
//
// Emitting in your own transaction:
//   sqlite3* db = ...;                      // your connection to the same file
//   outpost::configure_sqlite_connection(db);   // WAL + busy timeout (once per connection)
//   sqlite3_exec(db, "BEGIN IMMEDIATE", ...);   // IMMEDIATE: take the write lock up front
//   ... your INSERT/UPDATE ...
//   store->append(events, outpost::TxHandle::sqlite(db));
//   sqlite3_exec(db, "COMMIT", ...);            // or ROLLBACK: then there is no event
//
// Concurrency: every method may be called from several threads; several processes may emit
// into one file while one or more relay it. Writers of one file inside a process are
// serialised by a fair (FIFO) lock shared by all store objects on that file; across processes
// SQLite's file lock is retried with backoff for up to busy_timeout_ms.
// Time (due_at, lease_until) is the database's clock (julianday('now')), in milliseconds.

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "outpost/store.h"

struct sqlite3;

namespace outpost {

struct SqliteOptions {
  // File path, or ":memory:" (a private in-memory database: nothing is shared or kept).
  std::string path;
  // Outbox table name; validated, never interpolated unchecked.
  std::string table = "outbox";
  // false: synchronous=NORMAL (default, fast; WAL keeps the file consistent);
  // true: synchronous=FULL (every commit survives a power loss).
  bool synchronous_full = false;
  // Longest wait for another process's write lock before throwing TimeoutError.
  std::chrono::milliseconds busy_timeout{30000};
  // Archive, retention, payload limit.
  StoreOptions store;
};

std::unique_ptr<Store> make_sqlite_store(const SqliteOptions& options);
// sqlite:PATH or sqlite::memory: with the parameters above; URL parameters override `options`.
std::unique_ptr<Store> open_sqlite_store(std::string_view url, const StoreOptions& options = {});

// Prepares a connection of the user's for emitting next to a running relay: WAL journal mode,
// a busy timeout (so BEGIN IMMEDIATE waits for the relay instead of failing), synchronous=NORMAL
// unless `synchronous_full`. Throws ConnectionError if the database cannot be switched to WAL.
void configure_sqlite_connection(sqlite3* db,
                                 std::chrono::milliseconds busy_timeout = std::chrono::seconds(30),
                                 bool synchronous_full = false);

}  // namespace outpost
