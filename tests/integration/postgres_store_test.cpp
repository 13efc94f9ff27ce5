// PostgreSQL store integration and fault tests. Tests that restart or stop the server use a
// PRIVATE cluster (initdb in a temporary directory, a free port), never the shared one; the rest
// use OUTPOST_TEST_PG_URL. The chaos test runs four relay processes (postgres_relay_worker),
// SIGKILLs them at random moments and restarts PostgreSQL mid-run; a checker over their
// delivered logs proves no loss, per-key order and that no key was in flight in two relays.

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "outpost/error.h"
#include "outpost/relay.h"
#include "outpost/stores/postgres.h"
#include "postgres_test.h"
#include "private_postgres.h"
#include "server_process.h"
#include "store_cases.h"
#include "stores/postgres/schema.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using testing::pg_connect;
using testing::pg_query_one;
using testing::shared_pg_url;
namespace fs = std::filesystem;

using testing::PrivateCluster;  // a cluster this test owns (so it may stop and restart it)

std::string with_table(const std::string& base, const std::string& table,
                       const std::string& extra = {}) {
  return base + "?table=" + table + extra;
}

// --- configuration and connection errors --------------------------------------------------------

TEST(PostgresStore, BadUrlsAreConfigErrorsNamingThePart) {
  auto expect_config = [](const std::string& url, const std::string& needle) {
    try {
      open_postgres_store(url);
      ADD_FAILURE() << "no error for " << url;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_config("postgresql://u@127.0.0.1:1/db?table=bad;drop", "table");
  expect_config("postgresql://u@127.0.0.1:1/db?schema=1x", "schema");
  expect_config("postgresql://u@127.0.0.1:1/db?tabel=x", "tabel");
  expect_config("postgresql://u@127.0.0.1:1/db?archive_retention=7w", "archive_retention");
  expect_config("postgresql://u@127.0.0.1:1/db?archive_partition=week", "archive_partition");
  expect_config("postgresql://u@127.0.0.1:1/db?table=" + std::string(41, 'a'), "table");
  expect_config("postgresql://u@127.0.0.1:1/db?timeout_ms=0", "timeout_ms");
  expect_config("postgresql://u@127.0.0.1:1/db?timeout_ms=10s", "timeout_ms");
}

TEST(PostgresStore, ServerDownIsAConnectionErrorNamingHostPortWithoutPassword) {
  auto port = testing::free_port();
  try {
    open_postgres_store("postgresql://app:sekrit@127.0.0.1:" + std::to_string(port) + "/db");
    FAIL() << "connected to a closed port";
  } catch (const ConnectionError& e) {
    std::string msg = e.what();
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
    EXPECT_EQ(msg.find("sekrit"), std::string::npos) << msg;
  }
}

TEST(PostgresStore, WrongDatabaseIsAClearError) {
  REQUIRE_PG();
  std::string base = shared_pg_url();
  std::string url = base.substr(0, base.rfind('/')) + "/no_such_db_outpost";
  try {
    open_postgres_store(url);
    FAIL() << "opened a missing database";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_db_outpost"), std::string::npos) << e.what();
  }
}

TEST(PostgresStore, TxHandleOutsideATransactionIsRejected) {
  REQUIRE_PG();
  std::string table = testing::unique_name("txh_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table));
  auto conn = pg_connect(shared_pg_url());
  std::vector<Event> events{Event::make("t", "{}")};
  EXPECT_THROW(store->append(events, TxHandle::postgres(conn.get())), ConfigError);
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// --- schema and notifications --------------------------------------------------------------------

TEST(PostgresStore, ConcurrentFirstOpensDoNotRace) {
  REQUIRE_PG();
  std::string url = with_table(shared_pg_url(), testing::unique_name("race_"),
                               "&schema=" + testing::unique_name("s_"));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&] {
      try {
        open_postgres_store(url);
      } catch (const std::exception& e) {
        ++failures;
        ADD_FAILURE() << e.what();
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto conn = pg_connect(shared_pg_url());
  std::string schema = url.substr(url.find("schema=") + 7);
  pg_query_one(conn.get(), "DROP SCHEMA \"" + schema + "\" CASCADE");
}

// Schema v2 sets fillfactor 30 (claims stay HOT updates); an outbox created by a v1 build is
// upgraded on first open (on to the current version) and keeps working.
TEST(PostgresStore, SchemaV1OutboxIsUpgradedToV2OnOpen) {
  REQUIRE_PG();
  std::string table = testing::unique_name("mig_");
  std::string url = with_table(shared_pg_url(), table);
  auto conn = pg_connect(shared_pg_url());
  auto reloptions = [&] {
    return pg_query_one(conn.get(),
                        "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = "
                        "'public.\"" +
                            table + "\"'::regclass");
  };
  auto version = [&] {
    return pg_query_one(conn.get(),
                        "SELECT version FROM outpost_schema_version WHERE tbl = '" + table + "'");
  };
  open_postgres_store(url);
  EXPECT_EQ(reloptions(), "fillfactor=30");
  EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
  // What a v1 build left behind.
  pg_query_one(conn.get(), "ALTER TABLE \"" + table + "\" SET (fillfactor = 60)");
  pg_query_one(conn.get(),
               "UPDATE outpost_schema_version SET version = 1 WHERE tbl = '" + table + "'");
  {
    auto store = open_postgres_store(url);
    EXPECT_EQ(reloptions(), "fillfactor=30");
    EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
    std::vector<Event> events{Event::make("t", "{}", "k")};
    store->append(events);
    auto batch = store->claim(10, 5s);
    ASSERT_EQ(batch.events.size(), 1u);
    std::vector<EventId> ids{batch.events[0].id};
    EXPECT_EQ(store->ack(batch, ids), 1u);
    EXPECT_EQ(store->stats().pending, 0);
  }
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
  pg_query_one(conn.get(), "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

// Schema v3 adds the crash counter. An outbox a v2 build left behind (no crashes columns) with an
// event in flight whose relay died and a dead letter: read-only it is read as it is (crashes 0,
// not migrated); the first writable open adds the columns in place, every event reads crashes 0,
// and the event whose lease expired is claimed as a crash, not another attempt.
TEST(PostgresStore, SchemaV2OutboxIsUpgradedToV3WithCrashesZero) {
  REQUIRE_PG();
  std::string table = testing::unique_name("mig_");
  std::string url = with_table(shared_pg_url(), table);
  auto conn = pg_connect(shared_pg_url());
  const std::string t = "\"" + table + "\"", dead_t = "\"" + table + "_dead\"";
  auto version = [&] {
    return pg_query_one(conn.get(),
                        "SELECT version FROM outpost_schema_version WHERE tbl = '" + table + "'");
  };
  open_postgres_store(url);
  EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
  // What a v2 build left behind.
  pg_query_one(conn.get(),
               "ALTER TABLE " + t + " DROP CONSTRAINT \"" + table + "_claim_needs_v4\"");
  pg_query_one(conn.get(), "ALTER TABLE " + t + " DROP COLUMN crashes");
  pg_query_one(conn.get(), "ALTER TABLE " + dead_t + " DROP COLUMN crashes");
  pg_query_one(conn.get(),
               "UPDATE outpost_schema_version SET version = 2 WHERE tbl = '" + table + "'");
  pg_query_one(conn.get(),
               "INSERT INTO " + t +
                   " (id, type, key, payload, attempts, state, lease_owner, lease_until) "
                   "VALUES (gen_random_uuid(), 'in.flight', 'k', '\\x7b7d', 1, 1, "
                   "'pg-gone-1', now() - interval '1 hour')");
  pg_query_one(conn.get(), "INSERT INTO " + dead_t +
                               " (seq, id, type, key, payload, occurred_at, headers, attempts, "
                               "last_error) VALUES (1000, gen_random_uuid(), 'dead', 'd', "
                               "'\\x7b7d', now(), '{}', 3, 'refused')");
  {
    StoreOptions ro;
    ro.open = OpenMode::read_only;
    auto store = open_postgres_store(url, ro);
    auto listed = store->list(10);
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].attempts, 1);
    EXPECT_EQ(listed[0].crashes, 0);
    auto dead = store->dead(10);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_EQ(dead[0].attempts, 3);
    EXPECT_EQ(dead[0].crashes, 0);
    EXPECT_EQ(dead[0].last_error, "refused");
    EXPECT_TRUE(store->leased(10).empty());  // expired an hour ago
  }
  EXPECT_EQ(version(), "2");  // read-only migrated nothing
  {
    auto store = open_postgres_store(url);
    EXPECT_EQ(version(), std::to_string(pg::kSchemaVersion));
    auto listed = store->list(10);
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_EQ(listed[0].crashes, 0);
    auto dead = store->dead(10);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_EQ(dead[0].attempts, 3);
    EXPECT_EQ(dead[0].crashes, 0);
    EXPECT_EQ(dead[0].last_error, "refused");
    auto batch = store->claim(10, 5s);
    ASSERT_EQ(batch.events.size(), 1u);
    EXPECT_EQ(batch.events[0].type, "in.flight");
    EXPECT_EQ(batch.events[0].attempts, 1);  // the dead relay's attempt, in flight again
    EXPECT_EQ(batch.events[0].crashes, 1);
    std::vector<Nack> nacks{{batch.events[0].id, "gave up", std::nullopt}};
    EXPECT_EQ(store->nack(batch, nacks), 1u);
    dead = store->dead(10);
    ASSERT_EQ(dead.size(), 2u);
    EXPECT_EQ(dead[0].type, "in.flight");  // seq 1, before the dead letter's 1000
    EXPECT_EQ(dead[0].crashes, 1);
  }
  pg_query_one(conn.get(),
               "DROP TABLE " + t + ", " + dead_t + ", \"" + table + "_archive\" CASCADE");
  pg_query_one(conn.get(), "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

std::vector<EventId> ids_of(const std::vector<StoredEvent>& events) {
  std::vector<EventId> ids;
  for (const auto& e : events) ids.push_back(e.id);
  return ids;
}

// Issue 19: a version 3 outbox (one shared head, no partitions) is upgraded in place: every
// existing row gets its key's partition, an event in flight under an old relay's lease is
// delivered again once that lease expires, and an old relay still running is refused at its
// next claim or renew (the constraint names the version it needs) instead of racing.
TEST(PostgresStore, SchemaV3OutboxIsUpgradedToV4AndOldRelaysAreRefused) {
  REQUIRE_PG();
  std::string table = testing::unique_name("mig_");
  std::string url = with_table(shared_pg_url(), table);
  auto conn = pg_connect(shared_pg_url());
  const std::string t = "\"" + table + "\"";
  open_postgres_store(url);
  // What a v3 build left behind: no partition columns, tables, function or constraint.
  pg_query_one(conn.get(), "ALTER TABLE " + t + " DROP CONSTRAINT \"" + table +
                               "_claim_needs_v4\", DROP COLUMN part, DROP COLUMN fence");
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "_partitions\", \"" + table + "_members\"");
  pg_query_one(conn.get(), "DROP FUNCTION \"" + table + "_rebalance\"");
  pg_query_one(conn.get(),
               "UPDATE outpost_schema_version SET version = 3 WHERE tbl = '" + table + "'");
  for (int i = 0; i < 20; ++i)
    pg_query_one(conn.get(), "INSERT INTO " + t +
                                 " (id, type, key, payload) VALUES "
                                 "(gen_random_uuid(), 'e', 'k" +
                                 std::to_string(i % 5) + "', '\\x7b7d')");
  // k0's head is in flight under a v3 relay's lease (8 s more).
  pg_query_one(conn.get(),
               "UPDATE " + t +
                   " SET state = 1, attempts = 1, lease_owner = 'pg-old-1', "
                   "lease_until = now() + interval '8 seconds' WHERE seq = (SELECT min(seq) "
                   "FROM " +
                   t + " WHERE key = 'k0')");
  auto store = open_postgres_store(url);
  EXPECT_EQ(pg_query_one(conn.get(),
                         "SELECT version FROM outpost_schema_version WHERE tbl = '" + table + "'"),
            std::to_string(pg::kSchemaVersion));
  EXPECT_EQ(pg_query_one(conn.get(),
                         "SELECT count(*) FROM " + t +
                             " WHERE part IS DISTINCT FROM (hashtext(key) & 2147483647) % 64"),
            "0");
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT count(*) FROM \"" + table + "_partitions\""), "64");
  // An old relay's claim (its statement's shape: state 1 under its own owner) is refused.
  try {
    pg_query_one(conn.get(), "UPDATE " + t +
                                 " SET state = 1, lease_owner = 'pg-old-2', lease_until "
                                 "= now() + interval '1 minute' WHERE key = 'k1'");
    ADD_FAILURE() << "an old relay's claim was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(table + "_claim_needs_v4"), std::string::npos) << e.what();
  }
  // The new store claims every free head (k1..k4), not k0 while the old lease lives.
  auto batch = store->claim(100, 30s);
  std::set<std::string> keys;
  for (const auto& e : batch.events) keys.insert(e.key);
  EXPECT_EQ(keys, (std::set<std::string>{"k1", "k2", "k3", "k4"}));
  EXPECT_EQ(batch.events.size(), 16u);
  EXPECT_EQ(store->ack(batch, ids_of(batch.events)), 16u);
  // Once the old lease has expired, k0's events come out in order, the first as a crash.
  ClaimedBatch k0;
  auto deadline = SteadyClock::now() + 30s;
  while (k0.empty() && SteadyClock::now() < deadline) {
    k0 = store->claim(100, 30s);
    if (k0.empty()) std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(k0.events.size(), 4u);
  EXPECT_EQ(k0.events[0].crashes, 1);
  for (std::size_t i = 1; i < k0.events.size(); ++i)
    EXPECT_LT(k0.events[i - 1].seq, k0.events[i].seq);
  EXPECT_EQ(store->ack(k0, ids_of(k0.events)), 4u);
  // A URL asking for another partition count than the outbox has is refused.
  EXPECT_THROW(open_postgres_store(url + "&partitions=16"), ConfigError);
  store.reset();
  pg_query_one(conn.get(), "DROP TABLE " + t + ", \"" + table + "_dead\", \"" + table +
                               "_archive\", \"" + table + "_partitions\", \"" + table +
                               "_members\" CASCADE");
  pg_query_one(conn.get(), "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

// Issue 19: a relay paused past its partition lease finds its partitions moved (the fence went
// up): its ack, nack, release and renew are refused and change nothing, and the new owner
// delivers the events once their row lease expires, in key order.
TEST(PostgresStore, AStaleOwnersWritesAreRefusedAfterItsPartitionsMoved) {
  REQUIRE_PG();
  std::string table = testing::unique_name("fence_");
  std::string url = with_table(shared_pg_url(), table, "&partition_lease_ms=1000");
  auto conn = pg_connect(shared_pg_url());
  auto a = open_postgres_store(url);
  std::vector<Event> events;
  for (int i = 0; i < 6; ++i) events.push_back(Event::make("e", "{}", "k" + std::to_string(i % 2)));
  a->append(events);
  auto held = a->claim(100, 6s);  // a owns every partition: both keys' runs
  ASSERT_EQ(held.events.size(), 6u);
  EXPECT_GT(held.lease.fence, 0);
  // a is "paused" past its partition lease and its partitions are taken over: every one gets a
  // new owner and a higher fence (b, or a itself when its heartbeat gets there first).
  const std::string parts = "\"" + table + "_partitions\"";
  pg_query_one(conn.get(), "UPDATE " + parts + " SET owner = NULL, lease_until = NULL");
  auto b = open_postgres_store(url);
  EXPECT_TRUE(b->claim(100, 30s).empty());  // the rows are still leased to a
  std::vector<EventId> one{held.events[0].id};
  std::vector<Nack> nacks{{held.events[1].id, "x", Duration(1000)}};
  std::vector<EventId> other{held.events[2].id};
  EXPECT_EQ(a->ack(held, one), 0u);
  EXPECT_EQ(a->nack(held, nacks), 0u);
  EXPECT_EQ(a->release(held, other), 0u);
  EXPECT_FALSE(a->renew(held, 30s));
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT count(*) FROM \"" + table + "\" WHERE state = 1"),
            "6");
  // After the row leases expire b delivers all six, each key in order, each a crash.
  auto deadline = SteadyClock::now() + 30s;
  std::vector<StoredEvent> got;
  while (got.size() < 6 && SteadyClock::now() < deadline) {
    auto batch = b->claim(100, 30s);
    if (batch.empty()) {
      std::this_thread::sleep_for(50ms);
      continue;
    }
    for (const auto& e : batch.events) got.push_back(e);
    EXPECT_EQ(b->ack(batch, ids_of(batch.events)), batch.events.size());
  }
  ASSERT_EQ(got.size(), 6u);
  std::map<std::string, std::vector<EventId>> want_by_key, got_by_key;
  for (const auto& e : events) want_by_key[e.key].push_back(e.id);
  for (const auto& e : got) {
    got_by_key[e.key].push_back(e.id);
    EXPECT_EQ(e.crashes, 1);
  }
  EXPECT_EQ(got_by_key, want_by_key);  // each key in emit order
  a.reset();
  b.reset();
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\", " + parts + ", \"" + table + "_members\" CASCADE");
  pg_query_one(conn.get(), "DELETE FROM outpost_schema_version WHERE tbl = '" + table + "'");
}

// Counts notifications on the outbox's channel delivered to a plain LISTEN connection.
int count_notifications(PGconn* listener, std::chrono::milliseconds settle) {
  int n = 0;
  auto deadline = SteadyClock::now() + settle;
  while (SteadyClock::now() < deadline) {
    PQconsumeInput(listener);
    while (PGnotify* note = PQnotifies(listener)) {
      ++n;
      EXPECT_STREQ(note->extra, "");  // tiny payload
      PQfreemem(note);
    }
    std::this_thread::sleep_for(10ms);
  }
  return n;
}

TEST(PostgresStore, OneNotificationPerTransactionNotPerRow) {
  REQUIRE_PG();
  std::string table = testing::unique_name("notify_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table));
  auto listener = pg_connect(shared_pg_url());
  std::string channel = pg_query_one(
      listener.get(),
      "SELECT substring(prosrc FROM 'pg_notify\\(''([^'']+)''') FROM pg_proc WHERE proname = '" +
          table + "_notify'");
  ASSERT_FALSE(channel.empty());
  pg_query_one(listener.get(), "LISTEN \"" + channel + "\"");

  std::vector<Event> many;
  for (int i = 0; i < 500; ++i) many.push_back(Event::make("t", "{}", "k" + std::to_string(i % 7)));
  store->append(many);
  EXPECT_EQ(count_notifications(listener.get(), 300ms), 1);

  // Two appends inside one user transaction: still one notification, at commit.
  auto writer = pg_connect(shared_pg_url());
  pg_query_one(writer.get(), "BEGIN");
  std::vector<Event> ten(many.begin(), many.begin() + 10);
  for (auto& e : ten) e.id = EventId::generate();
  store->append(ten, TxHandle::postgres(writer.get()));
  EXPECT_EQ(count_notifications(listener.get(), 100ms), 0);  // nothing before commit
  std::vector<Event> more{Event::make("t", "{}"), Event::make("t", "{}")};
  store->append(more, TxHandle::postgres(writer.get()));
  pg_query_one(writer.get(), "COMMIT");
  EXPECT_EQ(count_notifications(listener.get(), 300ms), 1);
  store.reset();
  pg_query_one(writer.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                                 "_archive\" CASCADE");
}

TEST(PostgresStore, ArchiveGoesToTimePartitionsAndRetentionDropsThem) {
  REQUIRE_PG();
  std::string table = testing::unique_name("arch_");
  auto store = open_postgres_store(with_table(
      shared_pg_url(), table, "&archive=true&archive_retention=1s&archive_partition=hour"));
  auto conn = pg_connect(shared_pg_url());
  auto partitions = [&] {
    return std::stoi(
        pg_query_one(conn.get(), "SELECT count(*) FROM pg_inherits WHERE inhparent = '\"" + table +
                                     "_archive\"'::regclass"));
  };
  EXPECT_GE(partitions(), 2);  // this hour and the next exist before the first ack
  std::vector<Event> events(20, Event::make("t", "{}"));
  for (auto& e : events) e.id = EventId::generate();
  store->append(events);
  auto batch = store->claim(100, 10s);
  ASSERT_EQ(batch.events.size(), 20u);
  std::vector<EventId> ids;
  for (const auto& e : batch.events) ids.push_back(e.id);
  EXPECT_EQ(store->ack(batch, ids), 20u);
  EXPECT_EQ(store->stats().archived, 20);
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT count(*) FROM \"" + table +
                                         "_archive\" WHERE archived_at "
                                         "<= clock_timestamp()"),
            "20");
  // Past the retention, the next ack's maintenance removes the old rows.
  std::this_thread::sleep_for(1200ms);
  std::vector<Event> one{Event::make("t", "{}")};
  store->append(one);
  auto b2 = store->claim(10, 10s);
  ASSERT_EQ(b2.events.size(), 1u);
  std::vector<EventId> id2{b2.events[0].id};
  store->ack(b2, id2);
  EXPECT_EQ(store->stats().archived, 1);
  store.reset();
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// A count returned by ack/nack/release is a settlement that has taken effect: a later failure
// on the store's connection must not roll it back. Here the failure is an ack that finds no
// archive partition (dropped by hand; the store creates it and acks again).
TEST(PostgresStore, ASettlementCountedStaysWhenALaterOneFails) {
  REQUIRE_PG();
  std::string table = testing::unique_name("settle_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table, "&archive=true"));
  auto conn = pg_connect(shared_pg_url());
  std::vector<Event> events{Event::make("t", "{}", "a"), Event::make("t", "{}", "b")};
  store->append(events);
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 2u);
  pg_query_one(conn.get(),
               "DO $$ DECLARE r record; BEGIN FOR r IN SELECT c.relname FROM pg_inherits "
               "i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '\"" +
                   table +
                   "_archive\"'::regclass LOOP EXECUTE format('DROP TABLE %I', "
                   "r.relname); END LOOP; END $$");
  std::vector<Nack> nack{{batch.events[0].id, "boom", std::chrono::hours(1)}};
  EXPECT_EQ(store->nack(batch, nack), 1u);
  std::vector<EventId> ack{batch.events[1].id};
  EXPECT_EQ(store->ack(batch, ack), 1u);  // fails once (no partition), then succeeds
  EXPECT_EQ(
      pg_query_one(conn.get(), "SELECT state || ' ' || coalesce(last_error, '-') FROM \"" + table +
                                   "\" WHERE id = '" + batch.events[0].id.str() + "'"),
      "2 boom");
  EXPECT_EQ(store->stats().archived, 1);
  store.reset();
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// A poll() that fails (here EINVAL: more descriptors than RLIMIT_NOFILE allows) fails at once
// again: wait_for_work must report it, not take it for a timeout and spin until its deadline.
TEST(PostgresStore, WaitForWorkReportsAFailingPoll) {
  REQUIRE_PG();
#if defined(__SANITIZE_ADDRESS__)
  // UBSan's vptr check reads the exception's memory through a pipe (IsAccessibleMemoryRange);
  // with RLIMIT_NOFILE at 1 it cannot make one and reports a false "invalid vptr". The plain
  // build of scripts/test runs this test.
  GTEST_SKIP() << "needs file descriptors the sanitizer runtime takes";
#endif
  std::string table = testing::unique_name("poll_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table));
  // The first wait connects the LISTEN connection and returns; wait until a wait really blocks.
  bool blocks = false;
  for (int i = 0; i < 10 && !blocks; ++i) {
    auto t = SteadyClock::now();
    store->wait_for_work(300ms);
    blocks = SteadyClock::now() - t >= 250ms;
  }
  ASSERT_TRUE(blocks);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit one = saved;
  one.rlim_cur = 1;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &one), 0);
  std::string what;
  try {
    store->wait_for_work(3s);
  } catch (const Error& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_NE(what.find("poll() failed"), std::string::npos) << what;
  // Once poll() works again, so does the wait.
  auto t = SteadyClock::now();
  store->wait_for_work(300ms);
  EXPECT_GE(SteadyClock::now() - t, 250ms);
  store.reset();
  auto conn = pg_connect(shared_pg_url());
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// A sink's error text is not ours to choose (a webhook's body may be Latin-1 or binary), and a
// nack that PostgreSQL refuses would leave the event to be redelivered for ever instead of
// retried or dead-lettered. last_error is text: invalid UTF-8 and NUL bytes become U+FFFD.
TEST(PostgresStore, NackKeepsAnyErrorTextAsValidUtf8) {
  REQUIRE_PG();
  std::string table = testing::unique_name("nackerr_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table));
  std::vector<Event> events{Event::make("t", "{}"), Event::make("t", "{}")};
  store->append(events);
  auto batch = store->claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 2u);
  const std::string latin1 = "caf\xe9 \"quoted\" \\ {a,b}";
  const std::string nul = std::string("before\0after", 12) + " \xed\xa0\x80 \xf0\x9f\x98\x80";
  std::vector<Nack> nacks{{batch.events[0].id, latin1, std::nullopt},
                          {batch.events[1].id, nul, std::nullopt}};
  EXPECT_EQ(store->nack(batch, nacks), 2u);
  auto dead = store->dead(10);
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].last_error, "caf\xef\xbf\xbd \"quoted\" \\ {a,b}");
  EXPECT_EQ(dead[1].last_error,
            "before\xef\xbf\xbd"
            "after \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xf0\x9f\x98\x80");
  store.reset();
  auto conn = pg_connect(shared_pg_url());
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// Values PostgreSQL refuses come back naming the event and the field, never as the backend's
// words (index row sizes, encodings, parameter numbers), and nothing is written.
TEST(PostgresStore, RefusedValuesNameTheEventAndField) {
  REQUIRE_PG();
  std::string table = testing::unique_name("refuse_");
  auto store = open_postgres_store(with_table(shared_pg_url(), table));
  std::mt19937 rng(7);
  std::string long_key;  // incompressible, so the index row cannot shrink below the limit
  for (int i = 0; i < 3000; ++i) long_key += static_cast<char>('!' + rng() % 90);
  Event bad_header = Event::make("t", "{}", "k");
  bad_header.headers["h"] = std::string("a\0b", 3);
  const std::vector<std::pair<std::vector<Event>, std::string>> cases{
      {{Event::make("t", "{}", "k"), Event::make("t", "{}", long_key)}, "key"},
      {{Event::make("t", "{}", std::string("k\0", 2))}, "key"},
      {{Event::make("t", "{}", "caf\xe9")}, "key"},
      {{Event::make(std::string("t\0", 2), "{}", "k")}, "type"},
      {{Event::make("t", "{}", "k"), bad_header}, "header"},
  };
  for (const auto& [events, field] : cases) {
    for (bool in_tx : {false, true}) {
      std::string what;
      try {
        if (in_tx) {
          auto conn = pg_connect(shared_pg_url());
          pg_query_one(conn.get(), "BEGIN");
          store->append(events, TxHandle::postgres(conn.get()));
        } else {
          store->append(events);
        }
      } catch (const Error& e) {
        what = e.what();
      }
      SCOPED_TRACE(field + (in_tx ? " in the caller's transaction" : ""));
      EXPECT_NE(what.find(field), std::string::npos) << what;
      for (const char* backend_words :
           {"index row", "btree", "invalid byte sequence", "Unicode escape", "parameter $"})
        EXPECT_EQ(what.find(backend_words), std::string::npos) << what;
    }
  }
  EXPECT_EQ(store->stats().pending, 0);
  store.reset();
  auto conn = pg_connect(shared_pg_url());
  pg_query_one(conn.get(), "DROP TABLE \"" + table + "\", \"" + table + "_dead\", \"" + table +
                               "_archive\" CASCADE");
}

// --- relays against a private cluster ------------------------------------------------------------

// Delivered ids, thread-safe, with a wait.
struct Delivered {
  std::mutex mu;
  std::unordered_set<std::string> ids;
  void add(const std::string& id) {
    std::lock_guard lock(mu);
    ids.insert(id);
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return ids.size();
  }
  bool wait_for(std::size_t n, std::chrono::milliseconds timeout) {
    auto deadline = SteadyClock::now() + timeout;
    while (SteadyClock::now() < deadline) {
      if (size() >= n) return true;
      std::this_thread::sleep_for(5ms);
    }
    return size() >= n;
  }
};

class RecordingSink final : public Sink {
 public:
  explicit RecordingSink(Delivered& d) : d_(d) {}
  std::string_view name() const override { return "recording"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    for (const auto& e : events) d_.add(e.id.str());
    return std::vector<DeliveryResult>(events.size());
  }

 private:
  Delivered& d_;
};

TEST(PostgresStoreFaults, RelaySurvivesServerDownAndIsWokenByNotifyAfterRestart) {
  PrivateCluster pg;
  std::string url = with_table(pg.url(), "outbox");
  auto store = open_postgres_store(url);
  Delivered delivered;
  RecordingSink sink(delivered);
  RelayOptions options;
  options.poll_interval = 10'000ms;  // any prompt delivery below came from NOTIFY or a re-check
  options.backoff_base = 5ms;
  std::atomic<int> errors{0};
  options.on_error = [&](const std::string&) { ++errors; };
  Relay relay(*store, sink, options);
  std::thread runner([&] { relay.run(); });

  std::vector<Event> first(50, Event::make("t", "{}"));
  for (auto& e : first) e.id = EventId::generate();
  store->append(first);
  ASSERT_TRUE(delivered.wait_for(50, 5s));

  pg.stop();
  std::this_thread::sleep_for(1500ms);  // the relay hits the dead server and keeps retrying
  pg.start();
  // The relay reconnects by itself; an append after the restart wakes it through NOTIFY on the
  // new LISTEN connection well before the 10 s poll interval.
  auto writer = open_postgres_store(url);
  std::this_thread::sleep_for(1500ms);
  auto t0 = SteadyClock::now();
  std::vector<Event> second(10, Event::make("t", "{}"));
  for (auto& e : second) e.id = EventId::generate();
  writer->append(second);
  EXPECT_TRUE(delivered.wait_for(60, 9s));
  auto took = SteadyClock::now() - t0;
  // Bounded by the relay's error backoff (at most 5 s) if its last claim failed just before
  // the server came back; the 10 s poll interval would be slower than this.
  EXPECT_LT(took, 7s);
  relay.stop();
  runner.join();
  EXPECT_EQ(delivered.size(), 60u);
}

// --- the chaos run ------------------------------------------------------------------------------

struct Record {
  long pid;
  std::int64_t seq;
  std::string key, id;
  std::int64_t t0, t1;
};

std::vector<Record> read_logs(const std::string& dir) {
  std::vector<Record> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".log") continue;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream s(line);
      std::string tag;
      Record r;
      if (s >> tag >> r.pid >> r.seq >> r.key >> r.id >> r.t0 >> r.t1 && tag == "D")
        out.push_back(r);
    }
  }
  return out;
}

TEST(PostgresStoreFaults, FourRelayProcessesKillsAndRestartLoseNothingAndKeepKeyOrder) {
  constexpr int kEvents = 100'000;
  constexpr int kKeys = 400;
  constexpr int kRelays = 4;
  PrivateCluster pg;
  std::string url = with_table(pg.url(), "chaos");
  std::string logs = testing::temp_dir() + "/pg_chaos_" + std::to_string(::getpid());
  fs::create_directories(logs);
  auto store = open_postgres_store(url);

  std::vector<testing::ServerProcess> relays;
  std::vector<int> incarnation(kRelays, 0);
  auto spawn = [&](int i) {
    ++incarnation[i];
    return testing::ServerProcess(
        {OUTPOST_PG_WORKER, url,
         logs + "/r" + std::to_string(i) + "_" + std::to_string(incarnation[i]) + ".log", "20",
         std::to_string(1000 * i + incarnation[i])},
        logs + "/r" + std::to_string(i) + ".stderr");
  };
  for (int i = 0; i < kRelays; ++i) {
    relays.push_back(spawn(i));  // started by the constructor
  }

  // Producer: batches of 200 in one transaction each; on a lost connection the batch is sent
  // again with the same ids (a conflict then proves the first attempt committed).
  std::vector<std::string> all_ids;
  std::atomic<bool> produced{false};
  std::thread producer([&] {
    std::mt19937 rng(7);
    auto writer = open_postgres_store(url);
    for (int done = 0; done < kEvents;) {
      std::vector<Event> batch;
      for (int i = 0; i < 200 && done + i < kEvents; ++i) {
        batch.push_back(Event::make("chaos", "{\"n\":" + std::to_string(done + i) + "}",
                                    "k" + std::to_string(rng() % kKeys)));
      }
      for (int attempt = 0;; ++attempt) {
        try {
          writer->append(batch);
          break;
        } catch (const Error& e) {
          if (e.code() == ErrorCode::conflict) break;
          if (!(e.retryable() || e.code() == ErrorCode::in_doubt) || attempt > 200) {
            ADD_FAILURE() << "producer gave up: " << e.what();
            produced = true;
            return;
          }
          std::this_thread::sleep_for(50ms);
        }
      }
      for (const auto& e : batch) all_ids.push_back(e.id.str());
      done += static_cast<int>(batch.size());
      std::this_thread::sleep_for(2ms);  // spread the load over the chaos window
    }
    produced = true;
  });

  // Chaos: SIGKILL a random relay every ~0.7 s (restarted shortly after), restart PostgreSQL once.
  std::mt19937 rng(42);
  auto start = SteadyClock::now();
  bool restarted = false;
  int kills = 0;
  while (!produced || SteadyClock::now() - start < 6s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(400 + rng() % 600));
    int i = static_cast<int>(rng() % kRelays);
    relays[i].signal(SIGKILL);
    relays[i].wait_exit(5s);
    ++kills;
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 300));
    relays[i] = spawn(i);
    if (!restarted && SteadyClock::now() - start > 2s) {
      pg.restart();
      restarted = true;
    }
    if (SteadyClock::now() - start > 90s) break;
  }
  producer.join();
  ASSERT_TRUE(restarted);

  // Drain: wait until the outbox is empty (every event acked), bounded.
  auto checker = pg_connect(pg.url());
  auto deadline = SteadyClock::now() + 90s;
  std::string left;
  while (SteadyClock::now() < deadline) {
    try {
      left = pg_query_one(checker.get(), "SELECT count(*) FROM chaos");
    } catch (const std::exception&) {
      checker = pg_connect(pg.url());
      continue;
    }
    if (left == "0") break;
    std::this_thread::sleep_for(200ms);
  }
  for (auto& r : relays) r.stop();
  EXPECT_EQ(left, "0") << "events still in the outbox";
  EXPECT_EQ(pg_query_one(checker.get(), "SELECT count(*) FROM chaos_dead"), "0");

  auto records = read_logs(logs);
  // No loss.
  std::unordered_set<std::string> delivered;
  for (const auto& r : records) delivered.insert(r.id);
  std::size_t missing = 0;
  for (const auto& id : all_ids) missing += !delivered.contains(id);
  EXPECT_EQ(all_ids.size(), static_cast<std::size_t>(kEvents));
  EXPECT_EQ(missing, 0u);
  // Per key: first deliveries in seq order; never in flight in two processes at once.
  std::map<std::string, std::vector<const Record*>> by_key;
  for (const auto& r : records) by_key[r.key].push_back(&r);
  std::size_t order_violations = 0, overlaps = 0;
  for (auto& [key, recs] : by_key) {
    std::sort(recs.begin(), recs.end(), [](const Record* a, const Record* b) {
      return a->t0 != b->t0 ? a->t0 < b->t0 : a->seq < b->seq;
    });
    std::set<std::int64_t> seen;
    std::int64_t max_first = -1;
    for (const auto* r : recs) {
      if (seen.insert(r->seq).second) {
        if (r->seq < max_first) ++order_violations;
        max_first = std::max(max_first, r->seq);
      }
    }
    // Intervals of different processes for one key must not overlap.
    std::int64_t busy_until = -1;
    long busy_pid = -1;
    for (const auto* r : recs) {
      if (r->pid != busy_pid && r->t0 < busy_until) ++overlaps;
      if (r->t1 > busy_until || r->pid == busy_pid) {
        busy_until = std::max(busy_until, r->t1);
        busy_pid = r->pid;
      }
    }
  }
  EXPECT_EQ(order_violations, 0u);
  EXPECT_EQ(overlaps, 0u);
  std::size_t duplicates = records.size() - delivered.size();
  std::printf(
      "chaos: %d events, %d relays, %d SIGKILLs, 1 PostgreSQL restart, %zu deliveries "
      "(%zu duplicates), %.1f s\n",
      kEvents, kRelays, kills, records.size(), duplicates,
      std::chrono::duration<double>(SteadyClock::now() - start).count());
}

}  // namespace
}  // namespace outpost
