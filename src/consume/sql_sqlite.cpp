// SqlTx and SqlConnection on SQLite. Statements are prepared per call: on the user's own
// connection we must not leave prepared statements behind (sqlite3_close would fail on them),
// and the consumer runs a handful of statements per batch, so caching would not pay.

#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>

#include "consume/schema.h"
#include "consume/sql.h"
#include "outpost/error.h"

namespace outpost::consume {
namespace {

// The same classes as the outbox store's mapping (src/stores/sqlite/sqlite_conn.cpp), so an
// outage is retried on both sides alike: a lock held too long, an I/O error, a full disk, a
// file that cannot be opened or written now are retryable (the consumer backs off and tries
// again; docs/consumers.md, "Failure classes"); a file that is not a database is not.
[[noreturn]] void fail(sqlite3* db, int rc, std::string_view what) {
  std::string text = std::string(what) + ": " + sqlite3_errmsg(db);
  const std::string code = std::to_string(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw TimeoutError("sqlite", text + " (the database stayed locked by another connection)");
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      throw ConnectionError("sqlite", text, code);
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw Error(ErrorCode::corrupt, "sqlite", text, code);
    case SQLITE_CONSTRAINT:
      throw Error(ErrorCode::conflict, "sqlite", text, code);
    case SQLITE_TOOBIG:
      throw Error(ErrorCode::too_large, "sqlite", text, code);
    default:
      throw Error(ErrorCode::backend, "sqlite", text, code);
  }
}

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};

// `$1` placeholders become SQLite's `?1` (numbered: a parameter may appear twice).
std::string to_sqlite(std::string_view sql) {
  std::string out(sql);
  for (char& c : out)
    if (c == '$') c = '?';
  return out;
}

}  // namespace

std::vector<Row> sqlite_query(void* handle, std::string_view sql, const std::vector<Param>& params,
                              std::int64_t* changes) {
  auto* db = static_cast<sqlite3*>(handle);
  std::string text = to_sqlite(sql);
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db, text.c_str(), static_cast<int>(text.size()), &raw, nullptr);
  if (rc != SQLITE_OK) fail(db, rc, "prepare");
  std::unique_ptr<sqlite3_stmt, StmtDeleter> stmt(raw);
  for (std::size_t i = 0; i < params.size(); ++i) {
    int idx = static_cast<int>(i + 1);
    rc = params[i] ? sqlite3_bind_text(raw, idx, params[i]->data(),
                                       static_cast<int>(params[i]->size()), SQLITE_STATIC)
                   : sqlite3_bind_null(raw, idx);
    if (rc != SQLITE_OK) fail(db, rc, "bind");
  }
  std::vector<Row> rows;
  for (;;) {
    rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) fail(db, rc, "statement");
    int n = sqlite3_column_count(raw);
    Row row(static_cast<std::size_t>(n));
    for (int c = 0; c < n; ++c) {
      if (sqlite3_column_type(raw, c) == SQLITE_NULL) continue;
      auto* p = reinterpret_cast<const char*>(sqlite3_column_text(raw, c));
      row[static_cast<std::size_t>(c)] =
          std::string(p, static_cast<std::size_t>(sqlite3_column_bytes(raw, c)));
    }
    rows.push_back(std::move(row));
  }
  if (changes) *changes = sqlite3_changes64(db);
  return rows;
}

void sqlite_script(void* handle, const std::string& sql) {
  auto* db = static_cast<sqlite3*>(handle);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : "";
    sqlite3_free(err);
    fail(db, rc, "schema");
  }
}

namespace {

struct DbDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};

class SqliteConnection final : public SqlConnection {
 public:
  SqliteConnection(const std::string& path, int busy_timeout_ms, bool create) : path_(path) {
    sqlite3* raw = nullptr;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    db_.reset(raw);
    if (rc != SQLITE_OK && !create && (rc & 0xff) == SQLITE_CANTOPEN) {
      std::error_code ec;
      if (!std::filesystem::exists(path, ec))
        throw Error(ErrorCode::not_found, "sqlite",
                    "there is no consumer state at 'sqlite:" + path +
                        "': the file does not exist (nothing was created)");
    }
    if (rc != SQLITE_OK)
      throw ConnectionError("sqlite", "cannot open SQLite database '" + path +
                                          "': " + (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
    sqlite3_busy_timeout(raw, busy_timeout_ms);
    if (create) switch_to_wal();
  }
  ~SqliteConnection() override {
    rollback();
    forget_tables_of(db_.get());
  }

  SqlTx begin() override {
    if (!wal_) switch_to_wal();
    sqlite_script(db_.get(), "BEGIN IMMEDIATE");
    return SqlTx(TxHandle::sqlite(db_.get()));
  }
  void commit() override { sqlite_script(db_.get(), "COMMIT"); }
  void rollback() noexcept override {
    if (!sqlite3_get_autocommit(db_.get()))
      sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
  }
  std::string where() const override { return "sqlite:" + path_; }
  bool has_table(const std::string& table) override {
    return !sqlite_query(db_.get(),
                         "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1", {table},
                         nullptr)
                .empty();
  }

 private:
  // WAL: readers (`consumers list`) never block the consumer; NORMAL is durable across a
  // process crash, which is what checkpoints must survive (kill -9).
  void switch_to_wal() {
    if (path_ != ":memory:") sqlite_script(db_.get(), "PRAGMA journal_mode=WAL");
    sqlite_script(db_.get(), "PRAGMA synchronous=NORMAL");
    wal_ = true;
  }

  bool wal_ = false;
  std::string path_;
  std::unique_ptr<sqlite3, DbDeleter> db_;
};

}  // namespace

std::unique_ptr<SqlConnection> open_sqlite_connection(const std::string& path, int busy_timeout_ms,
                                                      bool create) {
  return std::make_unique<SqliteConnection>(path, busy_timeout_ms, create);
}

}  // namespace outpost::consume
