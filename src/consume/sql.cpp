// Dialect dispatch of SqlTx; the engine calls live in sql_sqlite.cpp and sql_postgres.cpp, each
// compiled only when its client library was found.

#include "consume/sql.h"

#include "outpost/error.h"

namespace outpost::consume {

// Defined by the engine files; the stubs below stand in when an engine is not built.
std::vector<Row> sqlite_query(void* db, std::string_view sql, const std::vector<Param>& params,
                              std::int64_t* changes);
void sqlite_script(void* db, const std::string& sql);
std::vector<Row> postgres_query(void* conn, const pg::Endpoint* io, std::string_view sql,
                                const std::vector<Param>& params, std::int64_t* changes);
void postgres_script(void* conn, const pg::Endpoint* io, const std::string& sql);

#ifndef OUTPOST_CONSUME_HAVE_SQLITE
std::vector<Row> sqlite_query(void*, std::string_view, const std::vector<Param>&, std::int64_t*) {
  throw ConfigError("this build has no SQLite support");
}
void sqlite_script(void*, const std::string&) {
  throw ConfigError("this build has no SQLite support");
}
std::unique_ptr<SqlConnection> open_sqlite_connection(const std::string&, int, bool) {
  throw ConfigError("this build has no SQLite support (sqlite: checkpoint stores)");
}
#endif
#ifndef OUTPOST_CONSUME_HAVE_POSTGRES
std::vector<Row> postgres_query(void*, const pg::Endpoint*, std::string_view,
                                const std::vector<Param>&, std::int64_t*) {
  throw ConfigError("this build has no PostgreSQL support");
}
void postgres_script(void*, const pg::Endpoint*, const std::string&) {
  throw ConfigError("this build has no PostgreSQL support");
}
std::unique_ptr<SqlConnection> open_postgres_connection(std::vector<std::string>,
                                                        std::vector<std::string>, std::string,
                                                        Duration) {
  throw ConfigError("this build has no PostgreSQL support (postgresql:// checkpoint stores)");
}
#endif

namespace {

Dialect dialect_of(TxHandle tx) {
  switch (tx.kind()) {
    case TxHandle::Kind::sqlite:
      return Dialect::sqlite;
    case TxHandle::Kind::postgres:
      return Dialect::postgres;
    default:
      throw ConfigError("the inbox and consumers need a SQLite or PostgreSQL transaction handle");
  }
}

}  // namespace

SqlTx::SqlTx(TxHandle tx) : handle_(tx), dialect_(dialect_of(tx)) {
  if (!tx.native()) throw ConfigError("null transaction handle");
}

SqlTx::SqlTx(TxHandle tx, const pg::Endpoint* io) : SqlTx(tx) {
  io_ = io;
}

std::vector<Row> SqlTx::query(std::string_view sql, const std::vector<Param>& params) const {
  return dialect_ == Dialect::sqlite ? sqlite_query(handle_.native(), sql, params, nullptr)
                                     : postgres_query(handle_.native(), io_, sql, params, nullptr);
}

std::int64_t SqlTx::exec(std::string_view sql, const std::vector<Param>& params) const {
  std::int64_t changes = 0;
  if (dialect_ == Dialect::sqlite)
    sqlite_query(handle_.native(), sql, params, &changes);
  else
    postgres_query(handle_.native(), io_, sql, params, &changes);
  return changes;
}

void SqlTx::script(const std::string& sql) const {
  if (dialect_ == Dialect::sqlite)
    sqlite_script(handle_.native(), sql);
  else
    postgres_script(handle_.native(), io_, sql);
}

const char* SqlTx::now_ms() const {
  return dialect_ == Dialect::sqlite
             ? "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
             : "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)";
}

const char* SqlTx::serial_key() const {
  return dialect_ == Dialect::sqlite ? "INTEGER PRIMARY KEY AUTOINCREMENT"
                                     : "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY";
}

std::string SqlTx::json_text_elements(int param) const {
  std::string p = "$" + std::to_string(param);
  return dialect_ == Dialect::sqlite ? "json_each(" + p + ")"
                                     : "json_array_elements_text(" + p + "::json) AS j(value)";
}

}  // namespace outpost::consume
