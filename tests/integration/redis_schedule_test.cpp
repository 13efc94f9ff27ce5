// Scheduled delivery on the Redis store, the parts beyond the conformance cases
// (tests/conformance/store_schedule_test.cpp): an event's deliver_at is carried back out by
// list() and dead() (so `outpost events list|show` print it), and the B.."v3:at" entry that keeps
// it (docs/redis.md) goes with the event, on Redis and on Redis Cluster. Then strict key order
// (ClaimOrder::strict) and dead_retention on Redis (namespace keypolicy below). A claim and the
// archive carry deliver_at too, with partitions=N as without.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
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

// Number of entries of one of the outbox's keys by `cmd` (HLEN, ZCARD), asked like zcard().
long long count_of(const std::string& url, const char* cmd, const std::string& key) {
  auto u = core::Url::parse(url);
  for (const auto& hp : u.hosts()) {
    std::unique_ptr<redisContext, CtxFree> c(redisConnect(hp.host.c_str(), hp.port));
    if (!c || c->err) continue;
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "%s %s", cmd, key.c_str())));
    if (r && r->type == REDIS_REPLY_INTEGER) return r->integer;
  }
  ADD_FAILURE() << "no node answered " << cmd << " " << key;
  return -1;
}

// A claim returns each event's deliver_at (so a sink's event JSON and a handler have it), and
// the archive keeps it, in every layout: one key space, partitions=N (one script for all
// partitions on a single master, settle_many.lua; a call per partition on Cluster), Cluster.
// Due ones (past deliver_at: `outpost emit --at` an earlier time) are claimed at once.
TEST(RedisSchedule, ClaimAndArchiveCarryDeliverAtInEveryLayout) {
  auto all = urls();
  if (all.empty()) GTEST_SKIP() << "no Redis server (OUTPOST_TEST_REDIS_URL)";
  for (const auto& base : all) {
    for (std::string parts : {"", "&partitions=4"}) {
      const std::string url = base + (base.find('?') == std::string::npos ? "?" : "&") +
                              "prefix=" + unique_prefix() + "&archive=1" + parts;
      SCOPED_TRACE(url);
      auto store = open_redis_store(url, {});
      std::map<EventId, std::optional<TimePoint>> want;
      auto emit = [&](int n) {
        std::vector<Event> events;
        for (int i = 0; i < n; ++i) {
          Event e = Event::make("t", "{}", "k" + std::to_string(want.size()));
          // Every other one scheduled, at a past time of its own.
          if (want.size() % 2 == 0)
            e.deliver_at = ms_precision(now() - 1h - 1s * static_cast<int>(want.size()));
          want[e.id] = e.deliver_at;
          events.push_back(e);
        }
        store->append(events);
      };
      auto check = [&](const ClaimedBatch& b) {
        for (const auto& e : b.events) {
          ASSERT_TRUE(want.count(e.id));
          EXPECT_EQ(e.deliver_at, want[e.id]) << "claimed " << e.id.str();
        }
      };
      emit(8);
      auto first = store->claim(100, 30s);
      ASSERT_EQ(first.events.size(), 8u);
      check(first);
      // The relay's path: settle the batch and claim the next in one call.
      emit(8);
      std::vector<EventId> acks;
      for (const auto& e : first.events) acks.push_back(e.id);
      Settlement settle;
      settle.acks = acks;
      SettleCounts counts;
      auto second = store->settle_and_claim(first, settle, counts, 100, 30s);
      EXPECT_EQ(counts.acked, 8u);
      ASSERT_EQ(second.events.size(), 8u);
      check(second);
      std::vector<EventId> acks2;
      for (const auto& e : second.events) acks2.push_back(e.id);
      ASSERT_EQ(store->ack(second, acks2), 8u);
      auto archived = store->archived(100);
      ASSERT_EQ(archived.size(), 16u);
      for (const auto& a : archived)
        EXPECT_EQ(a.deliver_at, want[a.id]) << "archived " << a.id.str();
    }
  }
}

// archive_retention trims an archived event's deliver_at with it (B.."v3:archived_at").
TEST(RedisSchedule, ArchiveRetentionTrimsTheArchivedDeliverAt) {
  auto all = urls();
  if (all.empty()) GTEST_SKIP() << "no Redis server (OUTPOST_TEST_REDIS_URL)";
  for (const auto& base : all) {
    const std::string prefix = unique_prefix();
    const std::string url = base + (base.find('?') == std::string::npos ? "?" : "&") +
                            "prefix=" + prefix + "&archive=1&archive_retention=200ms";
    SCOPED_TRACE(url);
    auto store = open_redis_store(url, {});
    auto deliver_one = [&] {
      Event e = Event::make("t", "{}", "k");
      e.deliver_at = ms_precision(now() - 1s);
      store->append(std::vector<Event>{e});
      auto b = store->claim(10, 30s);
      ASSERT_EQ(b.events.size(), 1u);
      ASSERT_EQ(store->ack(b, std::vector<EventId>{e.id}), 1u);
    };
    const std::string key = "{" + prefix + "}:v3:archived_at";
    deliver_one();
    EXPECT_EQ(count_of(url, "HLEN", key), 1);
    // Acks go on; within 30 s the first one is older than the retention and trimmed.
    bool trimmed = false;
    for (auto deadline = std::chrono::steady_clock::now() + 30s;
         !trimmed && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(300ms);
      deliver_one();
      trimmed = count_of(url, "ZCARD", "{" + prefix + "}:v3:archive") == 1;
    }
    ASSERT_TRUE(trimmed) << "the archive was not trimmed";
    EXPECT_EQ(count_of(url, "HLEN", key), 1) << "a trimmed event left its deliver_at";
  }
}

namespace keypolicy {

std::vector<std::string> urls() {
  std::vector<std::string> out;
  for (const char* var : {"OUTPOST_TEST_REDIS_URL", "OUTPOST_TEST_REDIS_CLUSTER_URL"}) {
    if (auto u = testing::env(var))
      out.push_back(*u + (u->find('?') == std::string::npos ? "?" : "&") +
                    "prefix=" + testing::unique_name("kp"));
    else if (testing::require_all_endpoints())
      ADD_FAILURE() << var << " not set";
  }
  return out;
}

std::vector<EventId> ids(const ClaimedBatch& b) {
  std::vector<EventId> out;
  for (const auto& e : b.events) out.push_back(e.id);
  return out;
}

TEST(RedisKeyPolicy, StrictHoldsTheKeyBehindItsDeadLetterAlsoForLaterEmits) {
  auto all = urls();
  if (all.empty()) GTEST_SKIP() << "no Redis server (OUTPOST_TEST_REDIS_URL)";
  for (const auto& url : all) {
    SCOPED_TRACE(url);
    auto store = open_redis_store(url, {});
    Event e1 = Event::make("t", "{}", "k"), e2 = Event::make("t", "{}", "k");
    store->append(std::vector<Event>{e1, e2});
    auto b = store->claim(1, 30s, ClaimOrder::strict);
    ASSERT_EQ(ids(b), std::vector<EventId>{e1.id});
    ASSERT_EQ(store->nack(b, std::vector<Nack>{{e1.id, "boom", std::nullopt}}), 1u);
    EXPECT_TRUE(store->claim(10, 30s, ClaimOrder::strict).empty()) << "e2 passed a dead head";
    Event e3 = Event::make("t", "{}", "k");  // emitted after e1 died
    store->append(std::vector<Event>{e3});
    EXPECT_TRUE(store->claim(10, 30s, ClaimOrder::strict).empty()) << "e3 passed a dead head";
    // Retried: delivered before the later events of its key.
    ASSERT_EQ(store->retry(std::vector<EventId>{e1.id}), 1u);
    auto r = store->claim(10, 30s, ClaimOrder::strict);
    ASSERT_EQ(ids(r), (std::vector<EventId>{e1.id, e2.id, e3.id}));
    EXPECT_EQ(store->ack(r, ids(r)), 3u);
    // Discarded: the key goes on.
    Event e4 = Event::make("t", "{}", "k"), e5 = Event::make("t", "{}", "k");
    store->append(std::vector<Event>{e4, e5});
    auto d = store->claim(1, 30s, ClaimOrder::strict);
    ASSERT_EQ(ids(d), std::vector<EventId>{e4.id});
    ASSERT_EQ(store->nack(d, std::vector<Nack>{{e4.id, "boom", std::nullopt}}), 1u);
    EXPECT_TRUE(store->claim(10, 30s, ClaimOrder::strict).empty());
    ASSERT_EQ(store->discard(std::vector<EventId>{e4.id}), 1u);
    auto rest = store->claim(10, 30s, ClaimOrder::strict);
    EXPECT_EQ(ids(rest), std::vector<EventId>{e5.id});
    store->ack(rest, ids(rest));
    // A key's only event dies, then the key gets a new one: it waits too.
    Event f1 = Event::make("t", "{}", "j");
    store->append(std::vector<Event>{f1});
    auto f = store->claim(10, 30s, ClaimOrder::strict);
    ASSERT_EQ(ids(f), std::vector<EventId>{f1.id});
    ASSERT_EQ(store->nack(f, std::vector<Nack>{{f1.id, "boom", std::nullopt}}), 1u);
    Event f2 = Event::make("t", "{}", "j");
    store->append(std::vector<Event>{f2});
    EXPECT_TRUE(store->claim(10, 30s, ClaimOrder::strict).empty()) << "f2 passed a dead head";
    auto unordered = store->claim(10, 30s, ClaimOrder::ordered);
    EXPECT_EQ(ids(unordered), std::vector<EventId>{f2.id}) << "ordered mode goes on past it";
  }
}

TEST(RedisKeyPolicy, DeadRetentionRemovesOldDeadLettersOnAck) {
  auto all = urls();
  if (all.empty()) GTEST_SKIP() << "no Redis server (OUTPOST_TEST_REDIS_URL)";
  for (const auto& url : all) {
    SCOPED_TRACE(url);
    StoreOptions o;
    o.dead_retention = Duration(200);
    auto store = open_redis_store(url, o);
    Event dead = Event::make("t", "{}", "a");
    store->append(std::vector<Event>{dead});
    auto b = store->claim(10, 30s);
    ASSERT_EQ(store->nack(b, std::vector<Nack>{{dead.id, "boom", std::nullopt}}), 1u);
    Event ok = Event::make("t", "{}", "b");
    store->append(std::vector<Event>{ok});
    auto c = store->claim(10, 30s);
    store->ack(c, ids(c));
    EXPECT_EQ(store->dead(10).size(), 1u) << "a young dead letter stays";
    bool gone = false;
    for (auto deadline = std::chrono::steady_clock::now() + 30s;
         !gone && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(100ms);
      Event more = Event::make("t", "{}", "b");
      store->append(std::vector<Event>{more});
      auto m = store->claim(10, 30s);
      store->ack(m, ids(m));
      gone = store->dead(10).empty();
    }
    EXPECT_TRUE(gone) << "the dead letter outlived dead_retention";
    EXPECT_EQ(store->stats().dead, 0);
  }
}

}  // namespace keypolicy

}  // namespace
}  // namespace outpost
