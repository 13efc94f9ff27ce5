#pragma once
// The small SQL layer the consuming side needs on SQLite and PostgreSQL alike: statements with
// text parameters and text results, on a transaction that is already open (the user's own for
// the inbox, the checkpoint store's for consumers). One dialect switch here keeps the inbox,
// checkpoint and dead-letter rules written once (src/consume/*.cpp) instead of once per engine.
//
// Statements use PostgreSQL's `$1, $2, ...` placeholders; on SQLite they run as `?1, ?2, ...`.
// Times are integers: milliseconds since the Unix epoch from the database's own clock
// (now_ms()), so every process sharing a store agrees on "old".

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"
#include "outpost/tx.h"

namespace outpost::pg {
struct Endpoint;
}

namespace outpost::consume {

using Param = std::optional<std::string>;  // nullopt = SQL NULL
using Row = std::vector<Param>;

enum class Dialect { sqlite, postgres };

// A non-owning view on an open transaction of the caller (TxHandle::sqlite / ::postgres).
// Not thread-safe (neither is the connection under it).
class SqlTx {
 public:
  // Throws ConfigError for a TxHandle of another kind (none, redis). A caller's own connection:
  // its statements block as long as the caller's connection settings let them.
  explicit SqlTx(TxHandle tx);
  // A transaction on a PostgreSQL connection the checkpoint store opened (pg::connect): every
  // statement waits at most the endpoint's I/O deadline (timeout_ms), then the connection is
  // dropped and ConnectionError thrown, so a hung server holds no stop() for longer.
  SqlTx(TxHandle tx, const pg::Endpoint* io);

  Dialect dialect() const { return dialect_; }
  TxHandle handle() const { return handle_; }

  // Runs one statement; returns its rows (empty for statements without results).
  std::vector<Row> query(std::string_view sql, const std::vector<Param>& params = {}) const;
  // Runs one statement; returns the number of rows it changed.
  std::int64_t exec(std::string_view sql, const std::vector<Param>& params = {}) const;
  // Runs several statements without parameters (DDL).
  void script(const std::string& sql) const;

  // Dialect pieces.
  const char* now_ms() const;      // current time in ms as an integer expression
  const char* serial_key() const;  // "auto-increment integer primary key" column type
  // A table expression of the text elements of the JSON array in parameter `param` (1-based),
  // as one column named `value`.
  std::string json_text_elements(int param) const;

 private:
  TxHandle handle_;
  Dialect dialect_;
  const pg::Endpoint* io_ = nullptr;
};

// An owned connection to a checkpoint store: `sqlite:PATH` or `postgresql://…` (the URL's own
// query parameters have been removed by the caller). One transaction at a time.
class SqlConnection {
 public:
  virtual ~SqlConnection() = default;
  // BEGIN IMMEDIATE on SQLite (the write lock up front, waiting busy_timeout for it), BEGIN on
  // PostgreSQL. Returns the handle of the open transaction.
  virtual SqlTx begin() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;   // no-op when no transaction is open
  virtual std::string where() const = 0;  // printable location, never a password
  // Whether `table` exists, read outside any transaction (writes nothing).
  virtual bool has_table(const std::string& table) = 0;
};

// `path` for SQLite (":memory:" allowed); waits up to `busy_timeout_ms` for another process's
// lock. Throws ConnectionError naming the path when it cannot be opened. Without `create`, a
// file that does not exist is ErrorCode::not_found (nothing is created), and the file is
// switched to WAL only at the first begin(), so a caller may check its tables first.
std::unique_ptr<SqlConnection> open_sqlite_connection(const std::string& path, int busy_timeout_ms,
                                                      bool create = true);
// libpq keyword/value pairs. Throws ConnectionError naming `where`. Every wait on the
// connection (each statement, BEGIN, COMMIT, ROLLBACK) is bounded by `io_timeout`; a broken
// connection is replaced at the next begin().
std::unique_ptr<SqlConnection> open_postgres_connection(std::vector<std::string> keys,
                                                        std::vector<std::string> values,
                                                        std::string where, Duration io_timeout);

}  // namespace outpost::consume
