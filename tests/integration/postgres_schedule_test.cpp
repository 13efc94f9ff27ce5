// PostgreSQL scheduled delivery (docs/postgres.md, "Scheduled delivery"), beyond the conformance
// cases every store runs (tests/conformance/store_schedule_test.cpp): a plain SQL INSERT with
// deliver_at (docs/emit-contract.md) is held like an append, deliver_at comes back out of list,
// claim and the dead letters, and a version 4 outbox gets the column in place. Against the
// shared server of the run (OUTPOST_TEST_PG_URL).

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "outpost/store.h"
#include "outpost/stores/postgres.h"
#include "postgres_test.h"
#include "store_cases.h"
#include "stores/postgres/schema.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using testing::pg_connect;
using testing::pg_drop_outbox;
using testing::pg_query_one;
using testing::shared_pg_url;

std::vector<EventId> ids(const ClaimedBatch& b) {
  std::vector<EventId> out;
  for (const auto& e : b.events) out.push_back(e.id);
  return out;
}

// Claims until something comes or 10 s passed.
ClaimedBatch claim_within(Store& s, Duration max_wait = 10s) {
  auto deadline = SteadyClock::now() + max_wait;
  for (;;) {
    auto b = s.claim(10, 30s);
    if (!b.empty() || SteadyClock::now() >= deadline) return b;
    s.wait_for_work(1s);
  }
}

// An application's own INSERT with deliver_at (docs/emit-contract.md) is held until then like an
// append, its key's later rows wait behind it, and deliver_at reads back from list and claim.
TEST(PostgresSchedule, PlainSqlInsertWithDeliverAtIsHeld) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("sched_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  const std::string t = "\"" + table + "\"";
  pg_query_one(conn.get(), "INSERT INTO " + t +
                               " (id, type, key, payload, deliver_at) VALUES "
                               "(gen_random_uuid(), 'later', 'k', '\\x7b7d', now() + interval "
                               "'1 hour'), (gen_random_uuid(), 'behind', 'k', '\\x7b7d', NULL), "
                               "(gen_random_uuid(), 'now', 'j', '\\x7b7d', now() - interval '1 "
                               "minute')");
  auto listed = store->list(10);
  ASSERT_EQ(listed.size(), 3u);
  ASSERT_TRUE(listed[0].deliver_at.has_value());
  EXPECT_GT(*listed[0].deliver_at, now() + 50min);
  EXPECT_FALSE(listed[1].deliver_at.has_value());
  ASSERT_TRUE(listed[2].deliver_at.has_value());  // a past time: kept, due at once
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 1u) << "the scheduled head or its key's later row went early";
  EXPECT_EQ(batch.events[0].type, "now");
  EXPECT_TRUE(batch.events[0].deliver_at.has_value());
  EXPECT_EQ(store->ack(batch, ids(batch)), 1u);
  // Due now (as if the hour passed): the head first, then the row behind it.
  pg_query_one(conn.get(), "UPDATE " + t + " SET due_at = now() WHERE type = 'later'");
  auto due = store->claim(10, 30s);
  ASSERT_EQ(due.events.size(), 2u);
  EXPECT_EQ(due.events[0].type, "later");
  EXPECT_EQ(due.events[1].type, "behind");
  EXPECT_EQ(due.events[0].attempts, 1);
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// A scheduled event that fails for good keeps its deliver_at among the dead letters; retried, it
// is due at once (its time has passed), not held again.
TEST(PostgresSchedule, DeadScheduledEventKeepsDeliverAtAndRetriesAtOnce) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("sched_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  Event e = Event::make("t", "{}", "k");
  e.deliver_at = now() + 300ms;
  std::vector<Event> events{e};
  store->append(events);
  auto batch = claim_within(*store);
  ASSERT_EQ(batch.events.size(), 1u);
  std::vector<Nack> dead{{batch.events[0].id, "refused", std::nullopt}};
  EXPECT_EQ(store->nack(batch, dead), 1u);
  auto letters = store->dead(10);
  ASSERT_EQ(letters.size(), 1u);
  ASSERT_TRUE(letters[0].deliver_at.has_value());
  EXPECT_EQ(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          letters[0].deliver_at->time_since_epoch()),
      std::chrono::duration_cast<std::chrono::milliseconds>(e.deliver_at->time_since_epoch()));
  EXPECT_EQ(store->retry_all(), 1u);
  auto again = store->claim(10, 30s);
  ASSERT_EQ(again.events.size(), 1u) << "a retried scheduled event was held again";
  EXPECT_TRUE(again.events[0].deliver_at.has_value());
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// Schema version 5 adds deliver_at. A version 4 outbox (no column, no trigger) is read as it is
// when opened read-only (no deliver_at, nothing migrated); the first writable open adds both in
// place and schedules from then on.
TEST(PostgresSchedule, SchemaV4OutboxIsUpgradedToV5) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("mig_");
  const std::string url = shared_pg_url() + "?table=" + table;
  auto conn = pg_connect(shared_pg_url());
  const std::string t = "\"" + table + "\"";
  auto version = [&] {
    return pg_query_one(conn.get(),
                        "SELECT version FROM outpost_schema_version WHERE tbl = '" + table + "'");
  };
  open_postgres_store(url);
  // What a v4 build left behind.
  pg_query_one(conn.get(), "DROP TRIGGER \"" + table + "_schedule\" ON " + t);
  pg_query_one(conn.get(), "DROP FUNCTION \"" + table + "_schedule\"");
  pg_query_one(conn.get(), "ALTER TABLE " + t + " DROP COLUMN deliver_at");
  pg_query_one(conn.get(), "ALTER TABLE \"" + table + "_dead\" DROP COLUMN deliver_at");
  pg_query_one(conn.get(),
               "UPDATE outpost_schema_version SET version = 4 WHERE tbl = '" + table + "'");
  pg_query_one(conn.get(), "INSERT INTO " + t +
                               " (id, type, key, payload) VALUES (gen_random_uuid(), 'old', 'k', "
                               "'\\x7b7d')");
  {
    StoreOptions ro;
    ro.open = OpenMode::read_only;
    auto reader = open_postgres_store(url, ro);
    auto listed = reader->list(10);
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_FALSE(listed[0].deliver_at.has_value());
    EXPECT_EQ(reader->dead(10).size(), 0u);
  }
  EXPECT_EQ(version(), "4");  // read-only migrated nothing
  auto store = open_postgres_store(url);
  EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
  Event later = Event::make("t", "{}", "j");
  later.deliver_at = now() + 1h;
  std::vector<Event> events{later};
  store->append(events);
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].type, "old");
  auto listed = store->list(10);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_TRUE(listed[1].deliver_at.has_value());
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// An event scheduled for later is not the oldest pending one: its age would read as a stuck
// outbox on every dashboard and alert while it waits as asked.
TEST(PostgresSchedule, ScheduledEventsAreNotTheOldestPending) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("sched_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  Event e = Event::make("t", "{}", "k");
  e.occurred_at = now() - 1h;
  e.deliver_at = now() + 1h;
  std::vector<Event> events{e};
  store->append(events);
  auto s = store->stats();
  EXPECT_LT(s.oldest_pending_age, Duration(60'000));
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// Scheduled events are counted apart from pending (StoreStats::scheduled).
TEST(PostgresSchedule, StatsCountScheduledApartFromPending) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("sched_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  Event later = Event::make("t", "{}", "k");
  later.deliver_at = now() + 1h;
  std::vector<Event> events{later, Event::make("t", "{}", "j")};
  store->append(events);
  auto s = store->stats();
  EXPECT_EQ(s.scheduled, 1);
  EXPECT_EQ(s.pending, 1);
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// ClaimOrder::strict: a key with a dead letter is held until it is retried, then the retried
// event goes first; other keys flow.
TEST(PostgresSchedule, StrictClaimHoldsAKeyWithADeadLetter) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("strict_");
  auto conn = pg_connect(shared_pg_url());
  auto store = open_postgres_store(shared_pg_url() + "?table=" + table);
  std::vector<Event> events{Event::make("a", "{}", "k"), Event::make("b", "{}", "k"),
                            Event::make("c", "{}", "j")};
  store->append(events);
  auto first = store->claim(1, 30s, ClaimOrder::strict);
  ASSERT_EQ(first.events.size(), 1u);
  EXPECT_EQ(first.events[0].type, "a");
  std::vector<Nack> dead{{first.events[0].id, "refused", std::nullopt}};
  EXPECT_EQ(store->nack(first, dead), 1u);
  auto next = store->claim(10, 30s, ClaimOrder::strict);
  ASSERT_EQ(next.events.size(), 1u) << "k's later event went past its dead head";
  EXPECT_EQ(next.events[0].type, "c");
  EXPECT_EQ(store->ack(next, ids(next)), 1u);
  EXPECT_TRUE(store->claim(10, 30s, ClaimOrder::strict).empty());
  EXPECT_EQ(store->retry_all(), 1u);
  auto after = store->claim(10, 30s, ClaimOrder::strict);
  ASSERT_EQ(after.events.size(), 2u);
  EXPECT_EQ(after.events[0].type, "a");
  EXPECT_EQ(after.events[1].type, "b");
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

// StoreOptions::dead_retention: dead letters older than it are deleted (at open, then after
// settlements); younger ones stay.
TEST(PostgresSchedule, DeadRetentionDeletesOldDeadLetters) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("dret_");
  auto conn = pg_connect(shared_pg_url());
  const std::string url = shared_pg_url() + "?table=" + table;
  {
    auto store = open_postgres_store(url);
    std::vector<Event> events{Event::make("old", "{}", "k"), Event::make("young", "{}", "j")};
    store->append(events);
    auto batch = store->claim(10, 30s, ClaimOrder::unordered);
    ASSERT_EQ(batch.events.size(), 2u);
    std::vector<Nack> dead{{batch.events[0].id, "x", std::nullopt},
                           {batch.events[1].id, "x", std::nullopt}};
    EXPECT_EQ(store->nack(batch, dead), 2u);
  }
  pg_query_one(
      conn.get(),
      "UPDATE \"" + table + "_dead\" SET dead_at = now() - interval '2 days' WHERE type = 'old'");
  StoreOptions o;
  o.dead_retention = Duration(24 * 3600 * 1000);
  auto store = open_postgres_store(url, o);
  auto letters = store->dead(10);
  ASSERT_EQ(letters.size(), 1u);
  EXPECT_EQ(letters[0].type, "young");
  store.reset();
  pg_drop_outbox(conn.get(), table);
}

}  // namespace
}  // namespace outpost
