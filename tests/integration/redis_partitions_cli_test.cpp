// `outpost partitions` on a partitioned Redis outbox (docs/cli.md "partitions", docs/redis.md
// "Partitions") against a real redis-server (OUTPOST_TEST_REDIS_URL): who holds which
// partition's writer lease, the fence, the backlog, a partition moving to a relay that joined,
// and the members, in the JSON shape PostgreSQL's view prints. Relays here are Store objects in
// this process, so the test decides when each claims, settles and leaves. Timing: every wait is
// bounded and generous; nothing asserts a speed.

#include <gtest/gtest.h>
#include <stdio.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "outpost/stores/redis.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

struct CliRun {
  int code = -1;
  std::string out;  // stdout (stderr goes to the test's log)
};

CliRun outpost_cli(const std::string& args) {
  CliRun r;
  FILE* f = ::popen((std::string(OUTPOST_BIN) + " " + args).c_str(), "r");
  if (!f) return r;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) r.out.append(buf, n);
  const int status = ::pclose(f);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

json view(const std::string& url) {
  CliRun r = outpost_cli("partitions --store '" + url + "' --json");
  EXPECT_EQ(r.code, 0) << r.out;
  if (r.code != 0) return json::object();
  return json::parse(r.out);
}

long long sum(const json& j, const char* field) {
  long long n = 0;
  for (const auto& p : j["partitions"]) n += p[field].get<long long>();
  return n;
}

std::vector<EventId> ids(const ClaimedBatch& b) {
  std::vector<EventId> out;
  for (const auto& e : b.events) out.push_back(e.id);
  return out;
}

TEST(RedisPartitionsCli, ShowsOwnersFencesBacklogAMoveAndTheMembers) {
  const auto base = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!base) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  const std::string prefix = testing::unique_name("pview_");
  const std::string plain = *base + "?prefix=" + prefix;
  const std::string url = plain + "&partitions=4";

  // Usage: a URL without partitions=N, or a bad one, is exit 2 with nothing on stdout.
  for (const std::string& bad : {plain, plain + "&partitions=0", plain + "&partitions=x"}) {
    CliRun r = outpost_cli("partitions --store '" + bad + "'");
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_EQ(r.out, "") << bad;
  }
  // Not partitioned yet (nothing opened it so): exit 1.
  EXPECT_EQ(outpost_cli("partitions --store '" + url + "'").code, 1);

  auto emitter = open_redis_store(url, {});
  std::vector<Event> events;
  for (int i = 0; i < 12; ++i) events.push_back(Event::make("t", "{}", "k" + std::to_string(i)));
  emitter->append(events);
  EXPECT_EQ(outpost_cli("partitions --store '" + plain + "&partitions=8'").code, 2)
      << "a partition count the outbox does not have";

  json before = view(url);
  EXPECT_EQ(before["outbox"], prefix);
  ASSERT_EQ(before["partitions"].size(), 4u) << before.dump();
  EXPECT_EQ(sum(before, "backlog"), 12);
  EXPECT_EQ(sum(before, "leased"), 0);
  EXPECT_TRUE(before["members"].empty()) << before.dump();
  for (const auto& p : before["partitions"]) {
    EXPECT_TRUE(p["owner"].is_null()) << p.dump();
    EXPECT_EQ(p["fence"], 0) << p.dump();
  }

  // One relay claims everything: it is the one member and holds all four, fence 1 each.
  auto one = open_redis_store(url, {});
  ClaimedBatch first = one->claim(100, 60s);
  ASSERT_EQ(first.events.size(), 12u);
  json owned = view(url);
  ASSERT_EQ(owned["members"].size(), 1u) << owned.dump();
  const std::string member = owned["members"][0]["member"];
  EXPECT_EQ(owned["members"][0]["partitions"], 4);
  EXPECT_GE(owned["members"][0]["joined_ms_ago"].get<long long>(), 0);
  EXPECT_GT(owned["members"][0]["expires_in_ms"].get<long long>(), 0);
  EXPECT_EQ(sum(owned, "backlog"), 12);
  EXPECT_EQ(sum(owned, "leased"), 12);
  for (const auto& p : owned["partitions"]) {
    EXPECT_EQ(p["owner"], member) << p.dump();
    EXPECT_EQ(p["fence"], 1) << p.dump();
    EXPECT_GT(p["lease_left_ms"].get<long long>(), 0) << p.dump();
    EXPECT_GE(p["moved_ms_ago"].get<long long>(), 0) << p.dump();
    EXPECT_FALSE(p["handing_over"]) << p.dump();
  }

  // A second relay joins: two of the four are now assigned to it, and the first still holds
  // them (its batch is open): those two show as handing over.
  auto two = open_redis_store(url, {});
  EXPECT_TRUE(two->claim(100, 60s).empty());
  json moving = view(url);
  ASSERT_EQ(moving["members"].size(), 2u) << moving.dump();
  int handing = 0;
  for (const auto& p : moving["partitions"]) handing += p["handing_over"].get<bool>() ? 1 : 0;
  EXPECT_EQ(handing, 2) << moving.dump();

  // The first settles its batch: it gives those two up, the second takes them (fence 2).
  ASSERT_EQ(one->ack(first, ids(first)), 12u);
  json moved;
  bool settled = false;
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       !settled && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(100ms);
    one->claim(100, 60s);  // both keep claiming (and so beating), as relays do
    two->claim(100, 60s);
    moved = view(url);
    settled = moved["members"].size() == 2u && moved["members"][0]["partitions"] == 2 &&
              moved["members"][1]["partitions"] == 2;
  }
  ASSERT_TRUE(settled) << moved.dump();
  EXPECT_EQ(sum(moved, "backlog"), 0);
  int fence2 = 0;
  for (const auto& p : moved["partitions"]) {
    EXPECT_FALSE(p["handing_over"]) << p.dump();
    fence2 += p["fence"] == 2 ? 1 : 0;
  }
  EXPECT_EQ(fence2, 2) << "the two moved partitions got a new fence: " << moved.dump();

  // The text table says the same.
  CliRun text = outpost_cli("partitions --store '" + url + "'");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("outbox " + prefix + ": 4 partitions, 2 live member(s)"),
            std::string::npos)
      << text.out;

  // Both stop (as on SIGTERM): they leave and give their partitions up at once.
  one.reset();
  two.reset();
  json after = view(url);
  EXPECT_TRUE(after["members"].empty()) << after.dump();
  for (const auto& p : after["partitions"]) EXPECT_TRUE(p["owner"].is_null()) << p.dump();
}

}  // namespace
}  // namespace outpost
