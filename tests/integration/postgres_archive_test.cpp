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
#include "store_cases.h"

namespace outpost {
namespace {

using nlohmann::json;

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

}  // namespace
}  // namespace outpost
