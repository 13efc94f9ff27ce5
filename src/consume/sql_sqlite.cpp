// SqlTx and SqlConnection on SQLite, on the store's SQLite layer (src/stores/sqlite/sqlite_conn.h:
// one error mapping, one way to open a file). Statements are prepared per call: on the user's own
// connection we must not leave prepared statements behind (sqlite3_close would fail on them),
// and the consumer runs a handful of statements per batch, so caching would not pay.

#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>

#include "consume/schema.h"
#include "consume/sql.h"
#include "outpost/error.h"
#include "stores/sqlite/sqlite_conn.h"

namespace outpost::consume {

using sqlite_store::StmtPtr;
using sqlite_store::throw_sqlite;

namespace {

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
  if (rc != SQLITE_OK) throw_sqlite(db, rc, "prepare");
  StmtPtr stmt(raw);
  for (std::size_t i = 0; i < params.size(); ++i) {
    int idx = static_cast<int>(i + 1);
    rc = params[i] ? sqlite3_bind_text(raw, idx, params[i]->data(),
                                       static_cast<int>(params[i]->size()), SQLITE_STATIC)
                   : sqlite3_bind_null(raw, idx);
    if (rc != SQLITE_OK) throw_sqlite(db, rc, "bind");
  }
  std::vector<Row> rows;
  for (;;) {
    rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) throw_sqlite(db, rc, "statement");
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
  sqlite3_free(err);
  if (rc != SQLITE_OK) throw_sqlite(db, rc, "schema");
}

namespace {

class SqliteConnection final : public SqlConnection {
 public:
  SqliteConnection(const std::string& path, int busy_timeout_ms, bool create)
      : path_(path), busy_timeout_(busy_timeout_ms) {
    std::error_code ec;
    if (!create && path != ":memory:" && !std::filesystem::exists(path, ec))
      throw Error(ErrorCode::not_found, "sqlite",
                  "there is no consumer state at 'sqlite:" + path +
                      "': the file does not exist (nothing was created)");
    db_ = sqlite_store::open_read_write(path, create, busy_timeout_);
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
    if (path_ != ":memory:")
      sqlite_store::use_wal(db_.get(), path_, busy_timeout_, false);
    else
      sqlite_script(db_.get(), "PRAGMA synchronous=NORMAL");
    wal_ = true;
  }

  bool wal_ = false;
  std::string path_;
  std::chrono::milliseconds busy_timeout_;
  sqlite_store::DbPtr db_;
};

}  // namespace

std::unique_ptr<SqlConnection> open_sqlite_connection(const std::string& path, int busy_timeout_ms,
                                                      bool create) {
  return std::make_unique<SqliteConnection>(path, busy_timeout_ms, create);
}

}  // namespace outpost::consume
