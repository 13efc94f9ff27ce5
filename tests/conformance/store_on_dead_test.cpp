// ClaimOrder::strict (relay --on-dead hold, docs/relay.md): a dead letter holds back the later
// events of its key until it is retried (then it is delivered first) or discarded; ordered
// (--on-dead continue) lets them flow on. Every store case runs these; a store that refuses
// strict claims (ConfigError, "not supported on this store yet") skips the strict cases.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/store.h"
#include "store_case_test.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

class StoreOnDead : public testing::StoreCaseTest {
 protected:
  Store& store() {
    if (fixtures().empty()) make();
    return *fixtures().front().store;
  }
  // Appends a1, a2 (key "a") and b1 (key "b"), then claims and dead-letters a1.
  void dead_head() {
    events_ = {Event::make("t", "a1", "a"), Event::make("t", "a2", "a"),
               Event::make("t", "b1", "b")};
    store().append(events_);
    auto batch = store().claim(1, 30s, ClaimOrder::ordered);
    ASSERT_EQ(batch.events.size(), 1u);
    ASSERT_EQ(batch.events[0].id, events_[0].id);
    std::vector<Nack> nacks{{events_[0].id, "refused", std::nullopt}};
    ASSERT_EQ(store().nack(batch, nacks), 1u);
  }
  // Claims under `order` and acks what came; nullopt when the store refuses the order.
  std::optional<std::vector<EventId>> claim_ack(ClaimOrder order) {
    ClaimedBatch b;
    try {
      b = store().claim(10, 30s, order);
    } catch (const ConfigError& e) {
      if (std::string(e.what()).find("not supported on this store yet") == std::string::npos) throw;
      return std::nullopt;
    }
    std::vector<EventId> ids;
    for (const auto& e : b.events) ids.push_back(e.id);
    if (!ids.empty()) store().ack(b, ids);
    return ids;
  }
  std::vector<Event> events_;
};

#define CLAIM_STRICT_OR_SKIP(var)                                                      \
  auto var##_opt = claim_ack(ClaimOrder::strict);                                      \
  if (!var##_opt)                                                                      \
    GTEST_SKIP() << store().backend() << " refuses ClaimOrder::strict (on_dead=hold) " \
                 << "for now: not supported on this store yet";                        \
  auto var = *var##_opt

TEST_P(StoreOnDead, StrictHoldsTheKeyBehindADeadHead) {
  dead_head();
  CLAIM_STRICT_OR_SKIP(got);
  EXPECT_EQ(got, std::vector<EventId>{events_[2].id}) << "only b1: a2 waits behind dead a1";
  auto again = claim_ack(ClaimOrder::strict);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->empty()) << "a2 claimed while a1 is dead";
}

TEST_P(StoreOnDead, RetryDeliversTheRetriedEventFirst) {
  dead_head();
  CLAIM_STRICT_OR_SKIP(got);
  ASSERT_EQ(got, std::vector<EventId>{events_[2].id});
  std::vector<EventId> a1{events_[0].id};
  ASSERT_EQ(store().retry(a1), 1u);
  auto b = store().claim(10, 30s, ClaimOrder::strict);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.events[0].id, events_[0].id) << "the retried event comes before a2";
  std::vector<EventId> order;
  for (const auto& e : b.events) order.push_back(e.id);
  store().ack(b, order);
  if (order.size() == 1) {
    auto rest = claim_ack(ClaimOrder::strict);
    ASSERT_TRUE(rest);
    order.insert(order.end(), rest->begin(), rest->end());
  }
  EXPECT_EQ(order, (std::vector<EventId>{events_[0].id, events_[1].id}));
}

TEST_P(StoreOnDead, DiscardUnblocksTheKey) {
  dead_head();
  CLAIM_STRICT_OR_SKIP(got);
  ASSERT_EQ(got, std::vector<EventId>{events_[2].id});
  std::vector<EventId> a1{events_[0].id};
  ASSERT_EQ(store().discard(a1), 1u);
  auto rest = claim_ack(ClaimOrder::strict);
  ASSERT_TRUE(rest);
  EXPECT_EQ(*rest, std::vector<EventId>{events_[1].id});
}

// Issue 20 item 5: under strict, an event held behind a dead letter is not work; waiting must
// not wake for it (the relay would claim nothing and wake again: one futile claim per 10 ms, its
// futile-wake-up sleep). Here a2 failed once (claimed under continue, nacked to retry 300 ms
// later) and a1 is dead: a2 falls due during the wait but stays held. The wake-ups are counted
// over a bounded period, each wait being at most 200 ms: a store that waits for real work wakes
// about 5 times (a slower machine: fewer); one that wakes for a2 wakes every few milliseconds.
TEST_P(StoreOnDead, StrictWaitDoesNotWakeForEventsHeldBehindADeadLetter) {
  dead_head();
  auto cont = store().claim(10, 30s, ClaimOrder::ordered);  // a2 and b1 (continue)
  ASSERT_EQ(cont.events.size(), 2u);
  std::vector<Nack> retry_a2{{events_[1].id, "refused", Duration(300)}};
  ASSERT_EQ(store().nack(cont, retry_a2), 1u);
  std::vector<EventId> b1{events_[2].id};
  ASSERT_EQ(store().ack(cont, b1), 1u);
  CLAIM_STRICT_OR_SKIP(got);
  ASSERT_TRUE(got.empty()) << "a2 claimed while a1 is dead";
  int wakes = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 1200ms) {
    store().wait_for_work(200ms);
    ++wakes;
    auto again = claim_ack(ClaimOrder::strict);
    ASSERT_TRUE(again);
    ASSERT_TRUE(again->empty()) << "a2 claimed while a1 is dead";
  }
  EXPECT_LE(wakes, 20) << store().backend()
                       << " woke for an event held behind a dead letter (strict)";
}

TEST_P(StoreOnDead, ContinueLetsTheLaterEventsFlowOn) {
  dead_head();
  auto got = claim_ack(ClaimOrder::ordered);
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, (std::vector<EventId>{events_[1].id, events_[2].id}));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreOnDead, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost

namespace outpost {
namespace {

using namespace std::chrono_literals;
using StoreScheduledStats = StoreOnDead;

// StoreStats::scheduled: an event held by a future deliver_at is counted apart from pending.
TEST_P(StoreScheduledStats, AScheduledEventIsCountedApartFromPending) {
  Event e = Event::make("t", "{}", "k");
  e.deliver_at = now() + 1h;
  std::vector<Event> events{e};
  store().append(events);
  auto s = store().stats();
  EXPECT_EQ(s.scheduled, 1);
  EXPECT_EQ(s.pending, 0);
}

// Issue 20 item 5: StoreStats::oldest_pending_age leaves the scheduled events out (an event
// scheduled for tomorrow is not a stuck one): here the scheduled event occurred an hour ago,
// the pending one just now.
TEST_P(StoreScheduledStats, OldestPendingAgeLeavesScheduledEventsOut) {
  Event later = Event::make("t", "{}", "k");
  later.occurred_at = now() - 1h;
  later.deliver_at = now() + 1h;
  std::vector<Event> events{later, Event::make("t", "{}", "j")};
  store().append(events);
  auto s = store().stats();
  EXPECT_EQ(s.scheduled, 1);
  EXPECT_EQ(s.pending, 1);
  EXPECT_LT(s.oldest_pending_age, Duration(10 * 60 * 1000))
      << "the scheduled event's age counted as the oldest pending";
}

// The same on a partitioned Redis outbox (URL partitions=16, docs/redis.md "Partitions"), whose
// stats are the partitions' combined (the oldest age is the largest of theirs): the partition
// holding the scheduled event must not report it as its oldest.
TEST_P(StoreScheduledStats, OldestPendingAgeLeavesScheduledEventsOutOfRedisPartitions) {
  if (store().backend() != "redis") GTEST_SKIP() << "partitions=N is the Redis store's";
  auto partitioned = open_store(fixtures().front().url + "&partitions=16");
  std::vector<Event> events;
  for (int i = 0; i < 8; ++i) {  // keys spread over the partitions, one scheduled event each
    Event later = Event::make("t", "{}", "k" + std::to_string(i));
    later.occurred_at = now() - 1h;
    later.deliver_at = now() + 1h;
    events.push_back(later);
  }
  events.push_back(Event::make("t", "{}", "j"));
  partitioned->append(events);
  auto s = partitioned->stats();
  EXPECT_EQ(s.scheduled, 8);
  EXPECT_EQ(s.pending, 1);
  EXPECT_LT(s.oldest_pending_age, Duration(10 * 60 * 1000))
      << "a scheduled event's age counted as the oldest pending";
}

// StoreOptions::dead_retention (URL dead_retention=): dead letters older than it are deleted as
// the store settles (each store says when: docs/sqlite.md, postgres.md, redis.md); the others stay.
TEST_P(StoreScheduledStats, DeadLettersOlderThanTheRetentionGo) {
  StoreOptions o;
  o.dead_retention = Duration(300);
  Store& s = *make(o).store;
  std::vector<Event> old{Event::make("t", "old", "a")};
  s.append(old);
  auto b = s.claim(10, 30s);
  ASSERT_EQ(b.events.size(), 1u);
  std::vector<Nack> nacks{{old[0].id, "refused", std::nullopt}};
  ASSERT_EQ(s.nack(b, nacks), 1u);
  std::this_thread::sleep_for(600ms);
  // Settlements go on (each store prunes on its own schedule after them): within 10 s the old
  // dead letter is gone.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::vector<Event> more{Event::make("t", "x", "b")};
    s.append(more);
    auto c = s.claim(10, 30s);
    std::vector<EventId> ids;
    for (const auto& e : c.events) ids.push_back(e.id);
    if (!ids.empty()) s.ack(c, ids);
    gone = true;
    for (const auto& d : s.dead(10)) gone = gone && d.id != old[0].id;
    if (!gone) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(gone) << s.backend() << " kept a dead letter past dead_retention";
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreScheduledStats, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost
