// Scheduled delivery on the Redis store, the parts beyond the conformance cases
// (tests/conformance/store_schedule_test.cpp): an event's deliver_at is carried back out by
// list() and dead() (so `outpost events list|show` print it), and the B.."v3:at" entry that keeps
// it (docs/redis.md) goes with the event, on Redis and on Redis Cluster.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/url.h"
#include "outpost/stores/redis.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

std::vector<std::string> urls() {
  std::vector<std::string> out;
  for (const char* var : {"OUTPOST_TEST_REDIS_URL", "OUTPOST_TEST_REDIS_CLUSTER_URL"}) {
    if (auto u = testing::env(var))
      out.push_back(*u);
    else if (testing::require_all_endpoints())
      ADD_FAILURE() << var << " not set";
  }
  return out;
}

std::string unique_prefix() {
  return "sched" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// ZCARD of one of the outbox's keys, asked of every node until one knows it (a cluster answers
// MOVED from the others).
long long zcard(const std::string& url, const std::string& key) {
  auto u = core::Url::parse(url);
  for (const auto& hp : u.hosts()) {
    std::unique_ptr<redisContext, CtxFree> c(redisConnect(hp.host.c_str(), hp.port));
    if (!c || c->err) continue;
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "ZCARD %s", key.c_str())));
    if (r && r->type == REDIS_REPLY_INTEGER) return r->integer;
  }
  ADD_FAILURE() << "no node answered ZCARD " << key;
  return -1;
}

TimePoint ms_precision(TimePoint t) {
  return TimePoint(std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()));
}

TEST(RedisSchedule, ListAndDeadCarryDeliverAtAndItLeavesWithTheEvent) {
  auto all = urls();
  if (all.empty()) GTEST_SKIP() << "no Redis server (OUTPOST_TEST_REDIS_URL)";
  for (const auto& base : all) {
    SCOPED_TRACE(base);
    const std::string prefix = unique_prefix();
    const std::string url =
        base + (base.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix;
    auto store = open_redis_store(url, {});
    const TimePoint later = ms_precision(now() + 1h);
    const TimePoint past = ms_precision(now() - 1s);
    Event held = Event::make("t", "{}", "k1"), due = Event::make("t", "{}", "k2"),
          plain = Event::make("t", "{}", "k3");
    held.deliver_at = later;
    due.deliver_at = past;
    store->append(std::vector<Event>{held, due, plain});

    auto listed = store->list(10);
    ASSERT_EQ(listed.size(), 3u);
    for (const auto& e : listed) {
      if (e.id == held.id) {
        ASSERT_TRUE(e.deliver_at);
        EXPECT_EQ(*e.deliver_at, later);
      } else if (e.id == due.id) {
        ASSERT_TRUE(e.deliver_at);
        EXPECT_EQ(*e.deliver_at, past);
      } else {
        EXPECT_FALSE(e.deliver_at) << "an unscheduled event shows no deliver_at";
      }
    }

    // The two due events: one acked (its entry goes), one dead-lettered (still shown there).
    auto batch = store->claim(10, 30s);
    ASSERT_EQ(batch.events.size(), 2u);
    const ClaimedBatch b = batch;
    const EventId acked = b.events[0].id, failed = b.events[1].id;
    EXPECT_EQ(store->ack(b, std::vector<EventId>{acked}), 1u);
    EXPECT_EQ(store->nack(b, std::vector<Nack>{{failed, "boom", std::nullopt}}), 1u);
    auto dead = store->dead(10);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_EQ(dead[0].id, failed);
    if (failed == due.id) {
      ASSERT_TRUE(dead[0].deliver_at);
      EXPECT_EQ(*dead[0].deliver_at, past);
    } else {
      EXPECT_FALSE(dead[0].deliver_at);
    }
    // Left: the held event's entry and, if it was the failed one, the dead event's.
    const std::string at_key = "{" + prefix + "}:v3:at";
    EXPECT_EQ(zcard(url, at_key), failed == due.id ? 2 : 1) << "an acked event left its entry";
    EXPECT_EQ(store->discard_all(), 1u);
    EXPECT_EQ(zcard(url, at_key), 1) << "a discarded event left its entry";
  }
}

}  // namespace
}  // namespace outpost
