#include "stores/sqlite/sqlite_conn.h"

#include <algorithm>

#include "core/headers_json.h"
#include "outpost/error.h"
#include "stores/sqlite/sqlite_lock.h"

namespace outpost::sqlite_store {

// --- errors --------------------------------------------------------------------------------------

void throw_sqlite(sqlite3* db, int rc, std::string_view what, std::string_view file) {
  const std::string native = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  const std::string code = std::to_string(rc);
  const int primary = rc & 0xff;
  if (!file.empty() && (primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT))
    throw Error(ErrorCode::corrupt, "sqlite",
                "'" + std::string(file) + "' is not an outpost database: " + native, code);
  const std::string msg =
      (file.empty() ? std::string(what)
                    : "database file '" + std::string(file) + "' " + std::string(what)) +
      ": " + native;
  switch (primary) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw TimeoutError("sqlite", msg + " (database is locked by another connection)");
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw Error(ErrorCode::corrupt, "sqlite", msg, code);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      throw ConnectionError("sqlite", msg, code);
    case SQLITE_CONSTRAINT:
      throw Error(ErrorCode::conflict, "sqlite", msg, code);
    case SQLITE_TOOBIG:
      throw Error(ErrorCode::too_large, "sqlite", msg, code);
    default:
      throw Error(ErrorCode::backend, "sqlite", msg, code);
  }
}

void throw_not_outbox(std::string_view file, std::string_view table, std::string_view what) {
  throw Error(ErrorCode::corrupt, "sqlite",
              "'" + std::string(file) + "' is not an outpost database for table '" +
                  std::string(table) + "': " + std::string(what));
}

void throw_no_outbox(std::string_view file, std::string_view table, std::string_view why) {
  throw Error(ErrorCode::not_found, "sqlite",
              "there is no outbox '" + std::string(table) + "' at '" + std::string(file) +
                  "': " + std::string(why) + " (nothing was created)");
}

void throw_no_wal(std::string_view file, std::string_view detail) {
  throw ConnectionError("sqlite", "database file '" + std::string(file) +
                                      "' could not be switched to WAL (" + std::string(detail) +
                                      ")");
}

// --- handles -------------------------------------------------------------------------------------

sqlite3_stmt* Conn::prepare(const std::string& sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second.get();
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db_.get(), sql.c_str(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(db_.get(), rc, "preparing statement");
  cache_.emplace(sql, StmtPtr(s));
  return s;
}

void Conn::exec(const char* sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_.get(), sql, nullptr, nullptr, &err);
  if (err) sqlite3_free(err);
  if (rc != SQLITE_OK) throw_sqlite(db_.get(), rc, std::string("executing ") + sql);
}

namespace {

// Read-only: a file URI with mode=ro. SQLite reads a WAL database read-only only where it can
// use or create the -shm file; where it cannot (a read-only directory), immutable=1 reads the
// file as it is (no locks: for inspection of a file nobody writes).
DbPtr open_read_only(const std::string& path, bool immutable) {
  std::string uri = "file:";
  for (unsigned char ch : path) {
    if (ch == '%' || ch == '?' || ch == '#' || ch < 0x20) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      uri += '%';
      uri += kHex[ch >> 4];
      uri += kHex[ch & 15];
    } else {
      uri += static_cast<char>(ch);
    }
  }
  uri += immutable ? "?mode=ro&immutable=1" : "?mode=ro";
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(uri.c_str(), &raw,
                           SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);
  if (rc == SQLITE_OK)
    rc = sqlite3_exec(raw, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) return db;
  if (!immutable) return open_read_only(path, true);
  throw_sqlite(raw, rc, "cannot be read", path);
}

int busy_ms(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::min<std::int64_t>(timeout.count(), INT32_MAX));
}

}  // namespace

DbPtr open_read_write(const std::string& path, bool create,
                      std::chrono::milliseconds busy_timeout) {
  sqlite3* raw = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) throw_sqlite(raw, rc, "cannot be opened", path);
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, busy_ms(busy_timeout));
  return db;
}

void use_wal(sqlite3* db, const std::string& path, std::chrono::milliseconds busy_timeout,
             bool synchronous_full) {
  with_busy_retry(busy_timeout, [&] {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc != SQLITE_OK) throw_sqlite(db, rc, "is not usable", path);
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW) throw_sqlite(db, rc, "could not be switched to WAL", path);
    std::string mode = column_text(raw, 0);
    if (mode != "wal") throw_no_wal(path, "journal mode " + mode);
  });
  const char* sync = synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL";
  char* err = nullptr;
  int rc = sqlite3_exec(db, sync, nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) throw_sqlite(db, rc, std::string("executing ") + sync);
}

Conn open_connection(const OpenSpec& spec, bool writer) {
  if (spec.open == StoreOptions::Open::read_only) {
    Conn c(open_read_only(spec.path, false));
    sqlite3_extended_result_codes(c.db(), 1);
    sqlite3_busy_timeout(c.db(), busy_ms(spec.busy_timeout));
    return c;
  }
  const bool create = writer && spec.open == StoreOptions::Open::create;
  // Writes retry BEGIN IMMEDIATE themselves (begin_immediate); a short handler timeout keeps
  // that loop responsive. Reads wait the whole busy timeout.
  Conn c(open_read_write(spec.path, create,
                         writer ? std::chrono::milliseconds(20) : spec.busy_timeout));
  if (!spec.memory) use_wal(c.db(), spec.path, spec.busy_timeout, spec.synchronous_full);
  return c;
}

std::string json_seqs(const std::vector<std::int64_t>& seqs) {
  std::string out = "[";
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(seqs[i]);
  }
  out += ']';
  return out;
}

int run(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) throw_sqlite(db, rc, what);
  return sqlite3_changes(db);
}

bool step_row(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(db, rc, what);
}

void bind_text(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
}

void bind_blob(sqlite3_stmt* s, int i, const void* data, std::size_t n) {
  // A zero-length blob must not be bound as NULL (the column is NOT NULL).
  if (n == 0)
    sqlite3_bind_zeroblob(s, i, 0);
  else
    sqlite3_bind_blob64(s, i, data, n, SQLITE_STATIC);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s, i))
           : std::string();
}

std::string column_blob(sqlite3_stmt* s, int i) {
  const void* p = sqlite3_column_blob(s, i);
  return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s, i)) : std::string();
}

void read_event(sqlite3_stmt* s, StoredEvent& e, int first) {
  e.seq = sqlite3_column_int64(s, first);
  // The row is named so an operator can fix or delete it (docs/emit-contract.md).
  if (sqlite3_column_bytes(s, first + 1) != 16)
    throw Error(ErrorCode::corrupt, "sqlite",
                "event id column is not a 16-byte blob (row seq " + std::to_string(e.seq) + ")");
  e.id = EventId::from_bytes(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, first + 1)));
  e.type = column_text(s, first + 2);
  e.key = column_text(s, first + 3);
  e.payload = column_blob(s, first + 4);
  e.occurred_at = TimePoint(std::chrono::microseconds(sqlite3_column_int64(s, first + 5)));
  e.headers.clear();
  if (sqlite3_column_type(s, first + 6) != SQLITE_NULL) {
    auto headers = core::headers_from_json(column_text(s, first + 6));
    if (!headers)
      throw Error(ErrorCode::corrupt, "sqlite",
                  "headers column is not a JSON object (row seq " + std::to_string(e.seq) +
                      ", event " + e.id.str() + ")");
    e.headers = std::move(*headers);
  }
  e.attempts = sqlite3_column_int(s, first + 7);
  e.deliver_at.reset();
  if (sqlite3_column_type(s, first + 8) != SQLITE_NULL)
    e.deliver_at = TimePoint(std::chrono::microseconds(sqlite3_column_int64(s, first + 8)));
}

}  // namespace outpost::sqlite_store
