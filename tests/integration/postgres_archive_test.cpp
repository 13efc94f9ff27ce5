// The PostgreSQL store's archive read (Store::archived; docs/postgres.md, "Archive and
// retention"): the store API and `outpost events archive` / `events show` on it. Against the
// shared server of the run (OUTPOST_TEST_PG_URL).

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_process.h"
#include "outpost/stores/postgres.h"
#include "postgres_test.h"
#include "store_cases.h"
#include "stores/postgres/schema.h"

namespace outpost {
namespace {

using nlohmann::json;
using testing::pg_query_one;

std::string shared_url() {
  return testing::shared_pg_url();
}

// Three events acked one at a time into the archive of a fresh outbox; returns their ids in the
// order acked.
std::vector<EventId> archive_three(Store& store) {
  std::vector<Event> events;
  for (int i = 0; i < 3; ++i) {
    Event e =
        Event::make("order.placed", "{\"n\":" + std::to_string(i) + "}", "k" + std::to_string(i));
    e.headers.emplace("h", "v" + std::to_string(i));
    events.push_back(e);
  }
  store.append(events);
  ClaimedBatch b = store.claim(10, std::chrono::seconds(30));
  EXPECT_EQ(b.events.size(), 3u);
  std::vector<EventId> ids;
  for (const auto& e : b.events) {
    EXPECT_EQ(store.ack(b, std::span<const EventId>(&e.id, 1)), 1u);
    ids.push_back(e.id);
  }
  return ids;
}

// Until 2026-11-27 the PostgreSQL store kept an archive it could not read: archived() threw
// not_found ("cannot read an archive").
TEST(PostgresArchive, ArchivedListsTheArchiveMostRecentFirst) {
  REQUIRE_PG();
  const std::string url = shared_url() + "?table=" + testing::unique_name("arch_");
  const auto before = std::chrono::system_clock::now() - std::chrono::minutes(5);
  auto store = open_postgres_store(url + "&archive=true");
  const auto ids = archive_three(*store);
  ASSERT_EQ(ids.size(), 3u);

  auto all = store->archived(10);
  ASSERT_EQ(all.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const ArchivedEvent& a = all[i];
    EXPECT_EQ(a.id, ids[2 - i]) << i;  // the last acked first
    const std::string n = a.key.substr(1);
    EXPECT_EQ(a.type, "order.placed");
    EXPECT_EQ(a.payload, "{\"n\":" + n + "}");
    ASSERT_EQ(a.headers.size(), 1u);
    EXPECT_EQ(a.headers.begin()->second, "v" + n);
    EXPECT_EQ(a.attempts, 1);
    EXPECT_GT(a.archived_at, before);
    EXPECT_LT(a.archived_at, std::chrono::system_clock::now() + std::chrono::minutes(5));
    if (i > 0) {
      EXPECT_GE(all[i - 1].archived_at, a.archived_at);
    }
  }
  auto two = store->archived(2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].id, ids[2]);
  EXPECT_EQ(two[1].id, ids[1]);
  EXPECT_TRUE(store->archived(0).empty());
  // A store object that does not archive itself reads what others archived.
  auto reader = open_postgres_store(url);
  EXPECT_EQ(reader->archived(10).size(), 3u);
  // An outbox that never archived reads as an empty archive, not an error.
  auto empty = open_postgres_store(shared_url() + "?table=" + testing::unique_name("arch_"));
  EXPECT_TRUE(empty->archived(10).empty());
}

// `outpost events archive` and `events show` on PostgreSQL: until 2026-11-27 "cannot read an
// archive" and exit 1, and `show` of an archived event "not found".
TEST(PostgresArchive, EventsArchiveAndShowReadIt) {
  REQUIRE_PG();
  const std::string url = shared_url() + "?table=" + testing::unique_name("arch_");
  std::vector<EventId> ids;
  {
    auto store = open_postgres_store(url + "&archive=true");
    ids = archive_three(*store);
  }
  ASSERT_EQ(ids.size(), 3u);
  auto r = testing::run_cli({"events", "--store", url, "archive", "--limit", "2"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = testing::lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  auto first = json::parse(lines[0]);
  EXPECT_EQ(first["id"], ids[2].str()) << r.out;
  EXPECT_EQ(first["type"], "order.placed") << r.out;
  EXPECT_TRUE(first.contains("archived_at")) << r.out;
  EXPECT_EQ(json::parse(lines[1])["id"], ids[1].str()) << r.out;

  r = testing::run_cli({"events", "--store", url, "show", ids[0].str()});
  ASSERT_EQ(r.code, 0) << r.all();
  auto shown = json::parse(r.out);
  EXPECT_EQ(shown["state"], "archived") << r.out;
  EXPECT_EQ(shown["key"], "k0") << r.out;
  EXPECT_TRUE(shown.contains("archived_at")) << r.out;

  const std::string never = EventId::generate().str();
  r = testing::run_cli({"events", "--store", url, "show", never});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("nor archived"), std::string::npos) << r.err;
}

// Issue 20: until schema version 6 the archive kept no deliver_at (nor crashes), so `events
// archive` and `events show` of a delivered scheduled event lost it. An archive made by version 5
// is read as it is by a read-only open and gets both columns, rows kept, at the first writable
// open; events archived from then on keep them.
TEST(PostgresArchive, SchemaV5ArchiveGetsDeliverAtInPlace) {
  REQUIRE_PG();
  const std::string table = testing::unique_name("archmig_");
  const std::string url = shared_url() + "?table=" + table;
  auto conn = testing::pg_connect(shared_url());
  // What a version 5 build created: its migrations, its version row, and three archived rows
  // in this day's archive partition.
  const pg::Names n("public", table);
  pg_query_one(conn.get(), "BEGIN; CREATE TABLE IF NOT EXISTS " + n.versions +
                               " (tbl text PRIMARY KEY, version integer NOT NULL, updated_at "
                               "timestamptz NOT NULL DEFAULT now());" +
                               pg::migration_v1(n) + pg::migration_v2(n) + ";" +
                               pg::migration_v3(n) + ";" + pg::migration_v4(n, 8) +
                               pg::migration_v5(n) + "INSERT INTO " + n.versions +
                               " (tbl, version) VALUES ('" + table + "', 5); COMMIT");
  pg_query_one(conn.get(), "SELECT " + n.maintain + "(interval '0', 'day')");
  pg_query_one(conn.get(), "INSERT INTO " + n.archive +
                               " (seq, id, type, key, payload, occurred_at, headers, attempts, "
                               "archived_at) SELECT g, gen_random_uuid(), 'old', 'k', '\\x7b7d', "
                               "now(), '{}', 1, clock_timestamp() FROM generate_series(1, 3) g");
  auto archive_has = [&](const char* column) {
    return pg_query_one(conn.get(), "SELECT count(*) FROM pg_attribute WHERE attrelid = '" +
                                        n.archive + "'::regclass AND attname = '" + column +
                                        "' AND NOT attisdropped");
  };
  ASSERT_EQ(archive_has("deliver_at"), "0");
  {
    StoreOptions ro;
    ro.open = StoreOptions::Open::read_only;
    auto reader = open_postgres_store(url, ro);
    auto old = reader->archived(10);
    ASSERT_EQ(old.size(), 3u);
    EXPECT_FALSE(old[0].deliver_at.has_value());
  }
  EXPECT_EQ(archive_has("deliver_at"), "0") << "a read-only open migrated";

  StoreOptions o;
  o.archive = true;
  auto store = open_postgres_store(url, o);
  EXPECT_EQ(pg_query_one(conn.get(),
                         "SELECT version FROM " + n.versions + " WHERE tbl = '" + table + "'"),
            std::to_string(pg::kSchemaVersion));
  EXPECT_EQ(archive_has("deliver_at"), "1");
  EXPECT_EQ(archive_has("crashes"), "1");
  EXPECT_EQ(pg_query_one(conn.get(), "SELECT count(*) FROM " + n.archive + " WHERE type = 'old'"),
            "3")
      << "archived rows lost by the upgrade";

  // Scheduled a moment ago: due at once, and its deliver_at goes with it into the archive.
  Event e = Event::make("reminder.due", "{}", "j");
  e.deliver_at = now() - std::chrono::seconds(1);
  std::vector<Event> events{e};
  store->append(events);
  ClaimedBatch b = store->claim(10, std::chrono::seconds(30));
  ASSERT_EQ(b.events.size(), 1u);
  ASSERT_EQ(store->ack(b, std::span<const EventId>(&e.id, 1)), 1u);
  auto all = store->archived(10);
  ASSERT_EQ(all.size(), 4u);
  ASSERT_EQ(all[0].id, e.id);
  ASSERT_TRUE(all[0].deliver_at.has_value()) << "the archive lost deliver_at";
  EXPECT_EQ(
      std::chrono::duration_cast<std::chrono::milliseconds>(*all[0].deliver_at - *e.deliver_at)
          .count(),
      0);
  for (std::size_t i = 1; i < all.size(); ++i) {
    EXPECT_EQ(all[i].type, "old");
    EXPECT_FALSE(all[i].deliver_at.has_value());
    EXPECT_EQ(all[i].crashes, 0);
  }
  // As the CLI shows it.
  auto r = testing::run_cli({"events", "--store", url, "show", e.id.str()});
  ASSERT_EQ(r.code, 0) << r.all();
  auto shown = json::parse(r.out);
  EXPECT_EQ(shown["state"], "archived") << r.out;
  EXPECT_TRUE(shown.contains("deliver_at")) << r.out;
  store.reset();
  testing::pg_drop_outbox(conn.get(), table);
}

}  // namespace
}  // namespace outpost
