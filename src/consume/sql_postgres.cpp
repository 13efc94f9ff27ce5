// SqlTx and SqlConnection on PostgreSQL (libpq, text parameters and results), on the store's
// PostgreSQL layer (src/stores/postgres/pg_conn.h: one error mapping, the handles, connections
// whose every wait is bounded). On the checkpoint store's own connection each statement waits at
// most timeout_ms, as the store's do (a hung server holds no stop() longer); on a caller's own
// connection (the Inbox given a TxHandle) statements block as the caller's settings let them.

#include <libpq-fe.h>

#include <memory>
#include <string>

#include "consume/schema.h"
#include "consume/sql.h"
#include "outpost/error.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::consume {
namespace {

// The caller's own connection has no endpoint: its messages name no server.
const pg::Endpoint& callers_connection() {
  static const pg::Endpoint none;
  return none;
}

pg::ResultPtr run(PGconn* conn, const pg::Endpoint* io, const std::string& sql,
                  const std::vector<Param>& params) {
  pg::Params p;
  for (const auto& v : params)
    if (v)
      p.text(*v);
    else
      p.null();
  if (io) return pg::exec_params(*io, conn, sql, p, "statement", pg::Results::text);
  return pg::exec_on_caller_connection(callers_connection(), conn, sql, p, "statement",
                                       pg::Results::text);
}

}  // namespace

std::vector<Row> postgres_query(void* handle, const pg::Endpoint* io, std::string_view sql,
                                const std::vector<Param>& params, std::int64_t* changes) {
  auto* conn = static_cast<PGconn*>(handle);
  pg::ResultPtr res = run(conn, io, std::string(sql), params);
  std::vector<Row> rows;
  int n = PQntuples(res.get()), cols = PQnfields(res.get());
  rows.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    Row row(static_cast<std::size_t>(cols));
    for (int c = 0; c < cols; ++c)
      if (!pg::is_null(res.get(), r, c))
        row[static_cast<std::size_t>(c)] = pg::get_bytes(res.get(), r, c);
    rows.push_back(std::move(row));
  }
  if (changes) {
    const char* t = PQcmdTuples(res.get());
    *changes = (t && *t) ? std::stoll(t) : 0;
  }
  return rows;
}

void postgres_script(void* handle, const pg::Endpoint* io, const std::string& sql) {
  auto* conn = static_cast<PGconn*>(handle);
  if (io) {
    pg::exec_simple(*io, conn, sql, "schema");
    return;
  }
  pg::ResultPtr res(PQexec(conn, sql.c_str()));
  auto st = res ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
    pg::throw_error(callers_connection(), conn, res.get(), "schema");
}

namespace {

class PostgresConnection final : public SqlConnection {
 public:
  explicit PostgresConnection(pg::Endpoint ep) : ep_(std::move(ep)), conn_(pg::connect(ep_)) {}
  ~PostgresConnection() override {
    rollback();
    forget_tables_of(conn_.get());
  }

  SqlTx begin() override {
    connected();
    postgres_script(conn_.get(), &ep_, "BEGIN");
    return SqlTx(TxHandle::postgres(conn_.get()), &ep_);
  }
  void commit() override { postgres_script(conn_.get(), &ep_, "COMMIT"); }
  void rollback() noexcept override {
    if (!conn_ || pg::broken(conn_.get()) || PQtransactionStatus(conn_.get()) == PQTRANS_IDLE)
      return;
    try {
      pg::exec_simple(ep_, conn_.get(), "ROLLBACK", "rollback");
    } catch (...) {  // past the deadline the connection is dropped: the server rolls back
    }
  }
  std::string where() const override { return ep_.where; }
  bool has_table(const std::string& table) override {
    connected();
    return !postgres_query(conn_.get(), &ep_, "SELECT 1 WHERE to_regclass($1) IS NOT NULL", {table},
                           nullptr)
                .empty();
  }

 private:
  // A server restart or a statement past its deadline breaks the connection: a new one per
  // transaction attempt (connect_timeout bounds the connect).
  void connected() {
    if (!pg::broken(conn_.get())) return;
    forget_tables_of(conn_.get());
    conn_.reset();
    conn_ = pg::connect(ep_);
  }

  pg::Endpoint ep_;
  pg::ConnPtr conn_;
};

}  // namespace

std::unique_ptr<SqlConnection> open_postgres_connection(std::vector<std::string> keys,
                                                        std::vector<std::string> values,
                                                        std::string where, Duration io_timeout) {
  pg::Endpoint ep;
  ep.keys = std::move(keys);
  ep.values = std::move(values);
  ep.where = std::move(where);
  ep.timeout = io_timeout;
  return std::make_unique<PostgresConnection>(std::move(ep));
}

}  // namespace outpost::consume
