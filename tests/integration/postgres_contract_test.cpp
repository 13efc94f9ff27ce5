// The PostgreSQL emit contract (docs/emit-contract.md, "PostgreSQL"): what an application's own
// INSERT may and may not give, checked with raw libpq statements as a writer in another
// language sends them. Against the shared server of the run (OUTPOST_TEST_PG_URL).

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "outpost/store.h"
#include "outpost/stores/postgres.h"
#include "postgres_test.h"
#include "store_cases.h"
#include "stores/postgres/schema.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using testing::pg_connect;
using testing::pg_drop_outbox;
using testing::pg_query_one;
using testing::shared_pg_url;

std::vector<EventId> ids(const ClaimedBatch& b) {
  std::vector<EventId> out;
  for (const auto& e : b.events) out.push_back(e.id);
  return out;
}

// Runs `sql`, which must be refused naming the constraint `<table>_leased_needs_owner`.
void expect_refused(PGconn* c, const std::string& sql, const std::string& table) {
  try {
    pg_query_one(c, sql);
    ADD_FAILURE() << "accepted: " << sql;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(table + "_leased_needs_owner"), std::string::npos)
        << e.what();
  }
}

// Operator finding A10: an INSERT giving state 1 (leased; a typo for the documented hold,
// state 2) passed the check of version 4 (a NULL lease owner makes it NULL, which a CHECK
// accepts), and the row held its key forever: no claim takes a lease that never ends, and no
// count showed it. Since schema version 7 the outbox refuses it; the hold as documented and the
// defaults still go through and are delivered in order.
TEST(PostgresContract, AnInsertOfALeasedRowWithoutItsLeaseIsRefused) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("contract_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  const std::string t = "\"public\".\"" + table + "\"";
  const std::string cols = " (id, type, key, payload, state, due_at) VALUES (gen_random_uuid(), ";
  expect_refused(conn.get(), "INSERT INTO " + t + cols + "'typo', 'a', '\\x7b7d', 1, now())",
                 table);
  expect_refused(conn.get(),
                 "INSERT INTO " + t +
                     " (id, type, key, payload, state, lease_owner) VALUES (gen_random_uuid(), "
                     "'no_end', 'a', '\\x7b7d', 1, 'pg4-me')",
                 table);
  // What the contract documents: the hold (due now here), then a plain event of the same key.
  pg_query_one(conn.get(), "INSERT INTO " + t + cols + "'held', 'a', '\\x7b7d', 2, now())");
  pg_query_one(conn.get(), "INSERT INTO " + t +
                               " (id, type, key, payload) VALUES (gen_random_uuid(), 'after', "
                               "'a', '\\x7b7d')");
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].type, "held");
  EXPECT_EQ(batch.events[1].type, "after");
  EXPECT_EQ(store->ack(batch, ids(batch)), 2u);
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// An outbox of version 6 may already hold such a row: the upgrade to version 7 makes it what
// the writer meant, a hold until its due_at (due now here), so its key flows again, and adds
// the constraint in place.
TEST(PostgresContract, SchemaV6OutboxWithALeasedRowWithoutOwnerIsRepairedOnUpgrade) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("contract_");
  const std::string url = shared_pg_url() + "?table=" + table;
  auto conn = pg_connect(shared_pg_url());
  const std::string t = "\"" + table + "\"";
  auto version = [&] {
    return pg_query_one(conn.get(),
                        "SELECT version FROM outpost_schema_version WHERE tbl = '" + table + "'");
  };
  open_postgres_store(url);
  // What a version 6 build left behind, with a writer's mistaken row at the head of key a.
  pg_query_one(conn.get(),
               "ALTER TABLE " + t + " DROP CONSTRAINT \"" + table + "_leased_needs_owner\"");
  pg_query_one(conn.get(),
               "UPDATE outpost_schema_version SET version = 6 WHERE tbl = '" + table + "'");
  pg_query_one(conn.get(), "INSERT INTO " + t +
                               " (id, type, key, payload, state, due_at) VALUES "
                               "(gen_random_uuid(), 'stuck', 'a', '\\x7b7d', 1, now()), "
                               "(gen_random_uuid(), 'behind', 'a', '\\x7b7d', 0, now())");
  auto store = open_postgres_store(url);
  EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT state FROM " + t + " WHERE type = 'stuck'"), "2");
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].type, "stuck");
  EXPECT_EQ(batch.events[1].type, "behind");
  EXPECT_EQ(store->ack(batch, ids(batch)), 2u);
  expect_refused(conn.get(),
                 "INSERT INTO " + t +
                     " (id, type, key, payload, state) VALUES (gen_random_uuid(), 'typo', 'a', "
                     "'\\x7b7d', 1)",
                 table);
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT convalidated FROM pg_constraint WHERE conname = '" +
                                         table + "_leased_needs_owner'"),
            "t");
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

}  // namespace
}  // namespace outpost
