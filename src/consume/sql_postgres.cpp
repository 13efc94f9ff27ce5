// SqlTx and SqlConnection on PostgreSQL (libpq, text parameters and results), on the store's
// PostgreSQL layer (src/stores/postgres/pg_conn.h: one error mapping, the handles).

#include <libpq-fe.h>

#include <memory>
#include <string>

#include "consume/schema.h"
#include "consume/sql.h"
#include "outpost/error.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::consume {

using pg::ResultPtr;

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The caller's own connection (the inbox) has no endpoint: its messages name no server.
[[noreturn]] void fail(PGconn* conn, const PGresult* res, std::string_view what) {
  pg::throw_error(std::string_view(), conn, res, what);
}

bool ok(const PGresult* r) {
  auto s = PQresultStatus(r);
  return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
}

}  // namespace

std::vector<Row> postgres_query(void* handle, std::string_view sql,
                                const std::vector<Param>& params, std::int64_t* changes) {
  auto* conn = static_cast<PGconn*>(handle);
  std::vector<const char*> values;
  for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
  std::string text(sql);
  ResultPtr res(PQexecParams(conn, text.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0));
  if (!res || !ok(res.get())) fail(conn, res.get(), "statement");
  std::vector<Row> rows;
  int n = PQntuples(res.get()), cols = PQnfields(res.get());
  rows.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    Row row(static_cast<std::size_t>(cols));
    for (int c = 0; c < cols; ++c)
      if (!PQgetisnull(res.get(), r, c))
        row[static_cast<std::size_t>(c)] = std::string(
            PQgetvalue(res.get(), r, c), static_cast<std::size_t>(PQgetlength(res.get(), r, c)));
    rows.push_back(std::move(row));
  }
  if (changes) {
    const char* t = PQcmdTuples(res.get());
    *changes = (t && *t) ? std::stoll(t) : 0;
  }
  return rows;
}

void postgres_script(void* handle, const std::string& sql) {
  auto* conn = static_cast<PGconn*>(handle);
  ResultPtr res(PQexec(conn, sql.c_str()));
  if (!res || !ok(res.get())) fail(conn, res.get(), "schema");
}

namespace {

class PostgresConnection final : public SqlConnection {
 public:
  PostgresConnection(std::vector<std::string> keys, std::vector<std::string> values,
                     std::string where)
      : where_(std::move(where)) {
    std::vector<const char*> k, v;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      k.push_back(keys[i].c_str());
      v.push_back(values[i].c_str());
    }
    k.push_back(nullptr);
    v.push_back(nullptr);
    conn_.reset(PQconnectdbParams(k.data(), v.data(), 0));
    if (!conn_ || PQstatus(conn_.get()) != CONNECTION_OK)
      throw ConnectionError("postgres",
                            "cannot connect to PostgreSQL at " + where_ + ": " +
                                (conn_ ? trim(PQerrorMessage(conn_.get())) : "no memory"));
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
  }
  ~PostgresConnection() override {
    rollback();
    forget_tables_of(conn_.get());
  }

  SqlTx begin() override {
    // A server restart breaks the connection: reconnect once per transaction attempt.
    if (PQstatus(conn_.get()) != CONNECTION_OK) {
      PQreset(conn_.get());
      if (PQstatus(conn_.get()) != CONNECTION_OK)
        throw ConnectionError("postgres", "cannot reconnect to PostgreSQL at " + where_ + ": " +
                                              trim(PQerrorMessage(conn_.get())));
    }
    postgres_script(conn_.get(), "BEGIN");
    return SqlTx(TxHandle::postgres(conn_.get()));
  }
  void commit() override { postgres_script(conn_.get(), "COMMIT"); }
  void rollback() noexcept override {
    if (conn_ && PQtransactionStatus(conn_.get()) != PQTRANS_IDLE) {
      PGresult* r = PQexec(conn_.get(), "ROLLBACK");
      PQclear(r);
    }
  }
  std::string where() const override { return where_; }
  bool has_table(const std::string& table) override {
    return !postgres_query(conn_.get(), "SELECT 1 WHERE to_regclass($1) IS NOT NULL", {table},
                           nullptr)
                .empty();
  }

 private:
  std::string where_;
  pg::ConnPtr conn_;
};

}  // namespace

std::unique_ptr<SqlConnection> open_postgres_connection(std::vector<std::string> keys,
                                                        std::vector<std::string> values,
                                                        std::string where) {
  return std::make_unique<PostgresConnection>(std::move(keys), std::move(values), std::move(where));
}

}  // namespace outpost::consume
