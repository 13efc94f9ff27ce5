// Issue 20 item 6: the archive as URL parameters on Redis and memory (archive=1,
// archive_retention=D, as PostgreSQL has them) and Store::archived, which `outpost events
// archive` prints, on SQLite, memory and Redis (when OUTPOST_TEST_REDIS_URL is set).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/json.h"
#include "outpost/store.h"

namespace outpost::unit {
namespace {

using namespace std::chrono_literals;

// Emits two events, delivers them (claim + ack) and returns the store's archive.
std::vector<ArchivedEvent> deliver_and_read(Store& store, std::vector<Event>& sent) {
  sent = {Event::make("a", R"({"n":1})", "k"), Event::make("b", R"({"n":2})", "k")};
  sent[1].headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  store.append(sent);
  auto batch = store.claim(10, 30000ms);
  EXPECT_EQ(batch.events.size(), 2u);
  std::vector<EventId> ids;
  for (const auto& e : batch.events) ids.push_back(e.id);
  EXPECT_EQ(store.ack(batch, ids), 2u);
  return store.archived(10);
}

void expect_newest_first(const std::vector<ArchivedEvent>& got, const std::vector<Event>& sent) {
  ASSERT_EQ(got.size(), 2u);
  // Acked together: the same archive time, then the later event first.
  EXPECT_EQ(got[0].id, sent[1].id);
  EXPECT_EQ(got[1].id, sent[0].id);
  EXPECT_EQ(got[0].payload, sent[1].payload);
  EXPECT_EQ(got[0].headers, sent[1].headers);
  EXPECT_EQ(got[0].type, "b");
  EXPECT_EQ(got[0].key, "k");
  const auto age = now() - got[0].archived_at;
  EXPECT_LT(age, std::chrono::minutes(10));
  EXPECT_GT(age, -std::chrono::minutes(10));
  EXPECT_NE(to_json(got[0]).find("{\"archived_at\":\""), std::string::npos) << to_json(got[0]);
}

TEST(ArchiveRead, SqliteReadsItsArchiveNewestFirst) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("outpost-archive-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto store = open_store("sqlite:" + (dir / "a.db").string() + "?archive=true");
    std::vector<Event> sent;
    expect_newest_first(deliver_and_read(*store, sent), sent);
    EXPECT_EQ(store->archived(1).size(), 1u);
  }
  std::filesystem::remove_all(dir);
}

TEST(ArchiveRead, RedisTakesTheArchiveFromItsUrl) {
  const char* url = std::getenv("OUTPOST_TEST_REDIS_URL");
  if (!url) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  const std::string prefix = "archive" + std::to_string(::getpid());
  auto store =
      open_store(std::string(url) + "?prefix=" + prefix + "&archive=1&archive_retention=7d");
  std::vector<Event> sent;
  expect_newest_first(deliver_and_read(*store, sent), sent);
  EXPECT_EQ(store->stats().archived, 2);
  // Without the parameter nothing is archived.
  auto plain = open_store(std::string(url) + "?prefix=" + prefix + "x");
  std::vector<Event> more;
  EXPECT_TRUE(deliver_and_read(*plain, more).empty());
  // A retention of 0 keeps every archived event, as on PostgreSQL.
  auto none =
      open_store(std::string(url) + "?prefix=" + prefix + "y&archive=1&archive_retention=0ms");
  EXPECT_EQ(deliver_and_read(*none, more).size(), 2u) << "0 keeps forever, as on PostgreSQL";
}

TEST(ArchiveRead, RedisArchiveParametersAreCheckedWithTheUrl) {
  for (const char* bad :
       {"archive=maybe", "archive_retention=7x", "archive_retention=-1d", "archive_retentoin=7d"}) {
    const std::string url = std::string("redis://127.0.0.1:1/0?") + bad;
    EXPECT_THROW(check_store_url(url), ConfigError) << bad;
  }
  EXPECT_NO_THROW(check_store_url("redis://127.0.0.1:1/0?archive=1&archive_retention=12h"));
}

// The memory store takes the archive parameters every store takes (docs/configuration.md,
// "Store URLs") and reads its archive as the others do; without `archive` it keeps none. Until
// 2026-11-27 `memory:?archive=1` was an unknown parameter and archived() threw.
TEST(ArchiveRead, MemoryTakesTheArchiveFromItsUrl) {
  auto store = open_store("memory:?archive=1&archive_retention=7d");
  std::vector<Event> sent;
  expect_newest_first(deliver_and_read(*store, sent), sent);
  EXPECT_EQ(store->stats().archived, 2);
  EXPECT_EQ(store->archived(1).size(), 1u);
  auto plain = open_store("memory:");
  std::vector<Event> more;
  EXPECT_TRUE(deliver_and_read(*plain, more).empty()) << "without archive=1 nothing is kept";
  for (const char* bad :
       {"memory:?archive=maybe", "memory:?archive_retention=7x", "memory:?archive_retentoin=7d"})
    EXPECT_THROW(check_store_url(bad), ConfigError) << bad;
  EXPECT_NO_THROW(check_store_url("memory:?archive=true&archive_retention=12h"));
}

}  // namespace
}  // namespace outpost::unit
