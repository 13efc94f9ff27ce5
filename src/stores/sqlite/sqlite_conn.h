#pragma once
// The SQLite access layer of outpost: the outbox store's connections (with their prepared-statement
// cache) and the consuming side's (checkpoint store, inbox: src/consume/sql_sqlite.cpp) are
// opened, configured and mapped to errors here, once. It holds the C-handle deleters, opening
// with busy timeout and WAL, the small step/bind/column helpers, reading an event row, and the
// one place where SQLite result codes become outpost errors (docs/architecture.md, "Failure
// classes" in docs/consumers.md: a lock held too long, an I/O error or a full disk is an outage,
// retried; a file that is not a database is not).

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "outpost/event.h"
#include "outpost/store.h"

namespace outpost::sqlite_store {

// --- errors (all thrown from sqlite_conn.cpp) ---

// Maps a SQLite result code: BUSY/LOCKED -> TimeoutError; NOTADB/CORRUPT -> corrupt;
// CANTOPEN/IOERR/FULL/READONLY/PERM -> ConnectionError; CONSTRAINT -> conflict; TOOBIG ->
// too_large; else backend. The message is "<what>: <sqlite's message>"; with `file` it names
// the database file ("database file 'F' <what>: ...", or "'F' is not an outpost database: ...").
[[noreturn]] void throw_sqlite(sqlite3* db, int rc, std::string_view what,
                               std::string_view file = {});
// A SQLite file that is not (this version of) an outpost outbox: ErrorCode::corrupt.
[[noreturn]] void throw_not_outbox(std::string_view file, std::string_view table,
                                   std::string_view what);
// No outbox there, and the store may not create one: ErrorCode::not_found.
[[noreturn]] void throw_no_outbox(std::string_view file, std::string_view table,
                                  std::string_view why);
// The file stayed in another journal mode than WAL: ConnectionError.
[[noreturn]] void throw_no_wal(std::string_view file, std::string_view detail);

// --- handles ---

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbPtr = std::unique_ptr<sqlite3, DbClose>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalize>;

// Opens `path` for reading and writing (creating the file when `create`), with extended result
// codes and SQLite's busy handler waiting up to `busy_timeout` for another connection's lock.
// Throws through throw_sqlite, naming the file.
DbPtr open_read_write(const std::string& path, bool create, std::chrono::milliseconds busy_timeout);
// Switches the file to WAL (retried while another process holds a lock, up to `busy_timeout`;
// any other journal mode afterwards is a ConnectionError) and sets the synchronous level: NORMAL
// survives a process crash (kill -9), FULL also a power loss. Not for ":memory:".
void use_wal(sqlite3* db, const std::string& path, std::chrono::milliseconds busy_timeout,
             bool synchronous_full);

// Resets a cached statement when a use of it ends (also on exceptions), so it holds no read
// snapshot or lock between uses.
class Use {
 public:
  explicit Use(sqlite3_stmt* s) : s_(s) {}
  ~Use() { sqlite3_reset(s_); }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  sqlite3_stmt* get() const { return s_; }
  operator sqlite3_stmt*() const { return s_; }

 private:
  sqlite3_stmt* s_;
};

// One connection with its cache of prepared statements (keyed by SQL text).
// Not thread-safe: the owner serialises use.
class Conn {
 public:
  Conn() = default;
  explicit Conn(DbPtr db) : db_(std::move(db)) {}
  ~Conn() {
    cache_.clear();  // finalize before closing
    db_.reset();
  }
  Conn(Conn&&) = default;
  Conn& operator=(Conn&&) = default;

  sqlite3* db() const { return db_.get(); }
  explicit operator bool() const { return db_ != nullptr; }

  sqlite3_stmt* prepare(const std::string& sql);
  void exec(const char* sql);

 private:
  DbPtr db_;
  std::unordered_map<std::string, StmtPtr> cache_;
};

// How to open the store's connections.
struct OpenSpec {
  std::string path;  // as given; ":memory:" for the private in-memory database
  bool memory = false;
  StoreOptions::Open open = StoreOptions::Open::create;
  std::chrono::milliseconds busy_timeout{30000};
  bool synchronous_full = false;
};

// The writer or a reader connection: extended result codes, busy timeout, WAL (switched once,
// retried while another process holds a lock) and the synchronous level. With Open::read_only
// a read-only connection (a file URI with mode=ro) that never writes, not even the WAL switch.
Conn open_connection(const OpenSpec& spec, bool writer);

// Steps a statement that returns no rows (or whose rows are ignored); returns changes().
int run(sqlite3* db, sqlite3_stmt* s, const char* what);
// One step: true with a row, false when done.
bool step_row(sqlite3* db, sqlite3_stmt* s, const char* what);

void bind_text(sqlite3_stmt* s, int i, std::string_view v);
void bind_blob(sqlite3_stmt* s, int i, const void* data, std::size_t n);
std::string column_text(sqlite3_stmt* s, int i);
std::string column_blob(sqlite3_stmt* s, int i);

// [1,2,3]: a list of seqs for json_each(?) in a statement.
std::string json_seqs(const std::vector<std::int64_t>& seqs);

// Columns: seq, id, type, key, payload, occurred_at, headers, attempts, deliver_at (Unix us or
// NULL; schema version 4), starting at `first`.
inline constexpr const char* kEventColumns =
    "seq, id, type, key, payload, occurred_at, headers, attempts, deliver_at";
void read_event(sqlite3_stmt* s, StoredEvent& e, int first = 0);

}  // namespace outpost::sqlite_store
