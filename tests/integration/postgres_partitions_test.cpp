// PostgreSQL partitions (docs/postgres.md, "Partitions and owners"): the claim's plan on a fresh
// outbox, and how fast partitions and their rows in flight change hands when a relay dies or
// stops. Against the shared server of the run (OUTPOST_TEST_PG_URL).

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "outpost/stores/postgres.h"
#include "store_cases.h"
#include "stores/postgres/schema.h"
#include "stores/postgres/sql.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

struct PgConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
using PgConn = std::unique_ptr<PGconn, PgConnDeleter>;

std::string shared_url() {
  auto url = testing::env("OUTPOST_TEST_PG_URL");
  return url ? *url : std::string();
}

#define REQUIRE_PG()                                                                 \
  do {                                                                               \
    if (shared_url().empty()) {                                                      \
      if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_PG_URL not set"; \
      GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";                                 \
    }                                                                                \
  } while (0)

PgConn raw_connect(const std::string& url) {
  PgConn c(PQconnectdb(url.c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK)
    throw std::runtime_error(std::string("connect: ") + PQerrorMessage(c.get()));
  return c;
}

// Every row of the result, its columns joined by '|', one row a line.
std::string query(PGconn* c, const std::string& sql) {
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

void drop_outbox(PGconn* c, const std::string& table) {
  query(c, "DROP TABLE IF EXISTS \"" + table + "\", \"" + table + "_dead\", \"" + table +
               "_archive\", \"" + table + "_partitions\", \"" + table + "_members\" CASCADE");
  query(c, "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

// The ordered claim as the relay runs it, planned the way its prepared statement is: first on
// an empty outbox (the generic plan is cached after five runs), then run on 300 events of 300
// keys. The plan must not rescan the per-key aggregate once per candidate: until 2026-11-26
// the candidates were joined with their keys' aggregate, and on a fresh outbox (estimates of
// one row) that join was a nested loop that rebuilt the aggregate for every candidate (100
// rescans and 4,950 rows filtered per claim of 100: 1.5 ms of a 2.8 ms claim; the single-relay
// regression of issue 19).
TEST(PostgresPartitions, OrderedClaimPlanDoesNotRescanPerCandidate) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("plan_");
  auto conn = raw_connect(shared_url());
  auto store = open_postgres_store(shared_url() + "?table=" + table);
  pg::Sql sql(pg::Names("public", table));
  std::string claim = sql.claim_ordered;
  claim.replace(claim.find("{max}"), 5, "100");
  // The relay's session settings (session.cpp), and every partition owned by "pg4-test".
  query(conn.get(), "SET enable_seqscan = off; SET enable_sort = off; SET jit = off");
  query(conn.get(), "UPDATE \"" + table +
                        "_partitions\" SET owner = 'pg4-test', fence = 1, lease_until = now() + "
                        "interval '1 hour'");
  query(conn.get(), "PREPARE c(text, text, text) AS " + claim);
  for (int i = 0; i < 6; ++i) query(conn.get(), "EXECUTE c('pg4-test-0', '30000', 'pg4-test')");
  std::vector<Event> events;
  for (int i = 0; i < 300; ++i) events.push_back(Event::make("t", "{}", "k" + std::to_string(i)));
  store->append(events);
  query(conn.get(), "BEGIN");
  std::string plan = query(
      conn.get(), "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE c('pg4-test-1', '30000', 'pg4-test')");
  query(conn.get(), "ROLLBACK");
  std::istringstream lines(plan);
  std::string line;
  int aggregates = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(line.find("Rows Removed by Join Filter"), std::string::npos) << plan;
    if (line.find("Aggregate") != std::string::npos && line.find("actual") != std::string::npos &&
        line.find("never executed") == std::string::npos) {
      ++aggregates;
      EXPECT_NE(line.find("loops=1)"), std::string::npos) << "rescanned: " << line << "\n" << plan;
    }
  }
  EXPECT_GT(aggregates, 0) << plan;
  EXPECT_NE(plan.find("rows=100 loops=1"), std::string::npos) << plan;  // a full claim
  store.reset();
  drop_outbox(conn.get(), table);
}

}  // namespace
}  // namespace outpost
