#pragma once
// What the PostgreSQL integration tests share: the shared server of the run
// (OUTPOST_TEST_PG_URL, started by tests/servers/postgres.sh), REQUIRE_PG() for tests that need
// it, and a raw libpq connection for what the store API does not show (tables, schema versions,
// NOTIFY). A cluster a test stops or restarts is its own: private_postgres.h.
//
// Header only: the tests that include it link libpq (PostgreSQL::PostgreSQL), the support
// library does not.

#include <libpq-fe.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "store_cases.h"

namespace outpost::testing {

// OUTPOST_TEST_PG_URL, or "" when it is not set.
inline std::string shared_pg_url() {
  auto url = env("OUTPOST_TEST_PG_URL");
  return url ? *url : std::string();
}

// Skips the test without the shared server (fails it when every endpoint is required:
// require_all_endpoints(), as CI runs).
#define REQUIRE_PG()                                                                            \
  do {                                                                                          \
    if (::outpost::testing::shared_pg_url().empty()) {                                          \
      if (::outpost::testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_PG_URL not set"; \
      GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";                                            \
    }                                                                                           \
  } while (0)

struct PgConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;

// A libpq connection to a store URL's server: the URL's own parameters (table=, ...) are not
// libpq's and are left out. Throws std::runtime_error when it cannot connect.
inline PgConn pg_connect(const std::string& url) {
  PgConn c(PQconnectdb(url.substr(0, url.find('?')).c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK)
    throw std::runtime_error(std::string("connect: ") + PQerrorMessage(c.get()));
  return c;
}

// Runs `sql`; the first column of the first row ("" when none). Throws std::runtime_error naming
// the statement when it fails.
inline std::string pg_query_one(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  auto st = PQresultStatus(r);
  std::string out, err = PQresultErrorMessage(r);
  if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) out = PQgetvalue(r, 0, 0);
  PQclear(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) throw std::runtime_error(sql + ": " + err);
  return out;
}

// Runs `sql`; every row of the result, its columns joined by '|', one row a line.
inline std::string pg_query(PGconn* c, const std::string& sql) {
  PGresult* r = PQexec(c, sql.c_str());
  auto st = PQresultStatus(r);
  std::string out, err = PQresultErrorMessage(r);
  if (st == PGRES_TUPLES_OK) {
    for (int i = 0; i < PQntuples(r); ++i) {
      for (int j = 0; j < PQnfields(r); ++j)
        out += (j ? "|" : "") + std::string(PQgetvalue(r, i, j));
      out += "\n";
    }
  }
  PQclear(r);
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) throw std::runtime_error(sql + ": " + err);
  return out;
}

// Drops an outbox table and everything the store made beside it (dead letters, archive,
// partitions, members, its schema version row), so a test can create an older version in its
// place.
inline void pg_drop_outbox(PGconn* c, const std::string& table) {
  pg_query_one(c, "DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_dead\", \"" + table +
                      "_archive\", \"" + table + "_partitions\", \"" + table +
                      "_members\" CASCADE");
  pg_query_one(c, "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

}  // namespace outpost::testing
