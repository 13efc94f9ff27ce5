// Store::blocked and Store::leased (the operators' read-only inspection behind the dashboard's
// blocked keys and leases views), the same on every store case.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "outpost/store.h"
#include "store_case_test.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

Event make_event(std::string type, std::string key = {}) {
  return Event::make(std::move(type), "{}", std::move(key));
}

class StoreInspect : public testing::StoreCaseTest {
 protected:
  Store& store() {
    if (fixtures().empty()) make();
    return *fixtures().front().store;
  }
};

// The store's clock is the database's; allow for it being a little off the test's.
void expect_near(TimePoint got, TimePoint want, const char* what) {
  auto off = std::chrono::duration_cast<std::chrono::milliseconds>(got - want);
  EXPECT_LT(std::chrono::abs(off), 10s) << what << " off by " << off.count() << " ms";
}

TEST_P(StoreInspect, BlockedShowsAFailedHeadWithItsErrorAndNextAttempt) {
  // k: the head fails and the next waits; j: delivered; "": fails but has no key to block.
  std::vector<Event> events{make_event("order.placed", "k"), make_event("order.paid", "k"),
                            make_event("t", "j"), make_event("t", "")};
  store().append(events);
  auto batch = store().claim(10, 10s);
  ASSERT_EQ(batch.events.size(), 4u);
  EXPECT_TRUE(store().blocked(10).empty()) << "in flight is not failing";
  TimePoint before = now();
  std::vector<Nack> nacks{{events[0].id, "sink said 503", Duration(60s)},
                          {events[3].id, "sink said 503", Duration(60s)}};
  ASSERT_EQ(store().nack(batch, nacks), 2u);
  std::vector<EventId> released{events[1].id};
  ASSERT_EQ(store().release(batch, released), 1u);
  std::vector<EventId> acked{events[2].id};
  ASSERT_EQ(store().ack(batch, acked), 1u);

  auto blocked = store().blocked(10);
  ASSERT_EQ(blocked.size(), 1u);
  const EventState& b = blocked[0];
  EXPECT_EQ(b.id, events[0].id);
  EXPECT_EQ(b.type, "order.placed");
  EXPECT_EQ(b.key, "k");
  EXPECT_GT(b.seq, 0);
  EXPECT_EQ(b.attempts, 1);
  EXPECT_EQ(b.last_error, "sink said 503");
  EXPECT_EQ(b.reason, "failing");
  ASSERT_TRUE(b.next_attempt.has_value());
  expect_near(*b.next_attempt, before + 60s, "next attempt");
  EXPECT_TRUE(b.lease_owner.empty());
  EXPECT_FALSE(b.lease_until.has_value());
  EXPECT_TRUE(store().blocked(0).empty());
}

// Issue 20 item 5: a key whose earliest undelivered event comes after a dead letter of the key
// is listed with the reason "dead" (relays with --on-dead hold wait for the dead letter; with
// continue it flows on), a failed head with "failing"; a retried dead letter (0 attempts, no
// dead letter before it) blocks nothing.
TEST_P(StoreInspect, AKeyBehindADeadLetterIsBlockedWithTheReasonDead) {
  std::vector<Event> events{make_event("t", "k"), make_event("t.next", "k"), make_event("t", "j")};
  store().append(events);
  auto batch = store().claim(1, 10s);
  ASSERT_EQ(batch.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "fatal", std::nullopt}};
  ASSERT_EQ(store().nack(batch, nacks), 1u);
  auto blocked = store().blocked(10);
  ASSERT_EQ(blocked.size(), 1u) << "k's next event waits behind its dead letter (on_dead=hold)";
  EXPECT_EQ(blocked[0].id, events[1].id);
  EXPECT_EQ(blocked[0].key, "k");
  EXPECT_EQ(blocked[0].type, "t.next");
  EXPECT_EQ(blocked[0].attempts, 0);
  EXPECT_EQ(blocked[0].reason, "dead");
  // Not leased, so it has a next attempt (docs/cli.md, events blocked) on every store: a time it
  // really has (due since appended), not the epoch.
  ASSERT_TRUE(blocked[0].next_attempt.has_value());
  EXPECT_GT(*blocked[0].next_attempt, events[1].occurred_at - std::chrono::hours(1));
  std::vector<EventId> ids{events[0].id};
  ASSERT_EQ(store().retry(ids), 1u);
  EXPECT_TRUE(store().blocked(10).empty()) << "a retried dead letter starts at 0 attempts";
}

TEST_P(StoreInspect, AFailedHeadBeingRetriedShowsItsLease) {
  std::vector<Event> events{make_event("t", "k"), make_event("t", "k")};
  store().append(events);
  auto first = store().claim(1, 10s);
  ASSERT_EQ(first.events.size(), 1u);
  std::vector<Nack> nacks{{events[0].id, "timeout", Duration(50ms)}};
  ASSERT_EQ(store().nack(first, nacks), 1u);
  ClaimedBatch again;
  for (auto deadline = SteadyClock::now() + 20s; again.empty() && SteadyClock::now() < deadline;) {
    std::this_thread::sleep_for(20ms);
    again = store().claim(1, 10s);
  }
  ASSERT_EQ(again.events.size(), 1u);
  ASSERT_EQ(again.events[0].id, events[0].id);
  TimePoint claimed = now();
  auto blocked = store().blocked(10);
  ASSERT_EQ(blocked.size(), 1u);
  EXPECT_EQ(blocked[0].id, events[0].id);
  EXPECT_EQ(blocked[0].attempts, 2);
  EXPECT_EQ(blocked[0].last_error, "timeout");
  EXPECT_EQ(blocked[0].lease_owner, again.lease.owner);
  EXPECT_EQ(blocked[0].fence, again.lease.fence);
  ASSERT_TRUE(blocked[0].lease_until.has_value());
  expect_near(*blocked[0].lease_until, claimed + 10s, "lease expiry");
  EXPECT_FALSE(blocked[0].next_attempt.has_value());
}

TEST_P(StoreInspect, LeasedShowsEachEventUnderALiveLeaseWithItsToken) {
  std::vector<Event> events{make_event("a", "k1"), make_event("b", "k2"), make_event("c", ""),
                            make_event("d", "k3")};
  store().append(events);
  EXPECT_TRUE(store().leased(10).empty());
  auto one = store().claim(1, 10s);
  auto two = store().claim(2, 10s);
  TimePoint claimed = now();
  ASSERT_EQ(one.events.size(), 1u);
  ASSERT_EQ(two.events.size(), 2u);

  auto leased = store().leased(10);
  ASSERT_EQ(leased.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(leased[i].id, events[i].id);
    EXPECT_EQ(leased[i].type, events[i].type);
    EXPECT_EQ(leased[i].key, events[i].key);
    EXPECT_EQ(leased[i].attempts, 1);
    const ClaimedBatch& holder = i == 0 ? one : two;
    EXPECT_EQ(leased[i].lease_owner, holder.lease.owner);
    EXPECT_EQ(leased[i].fence, holder.lease.fence);
    ASSERT_TRUE(leased[i].lease_until.has_value());
    expect_near(*leased[i].lease_until, claimed + 10s, "lease expiry");
    EXPECT_FALSE(leased[i].next_attempt.has_value());
  }
  EXPECT_NE(one.lease.owner, two.lease.owner);
  EXPECT_LT(leased[0].seq, leased[1].seq);
  EXPECT_EQ(store().leased(1).size(), 1u);

  // Settled or expired leases are gone.
  std::vector<EventId> acked{events[0].id};
  ASSERT_EQ(store().ack(one, acked), 1u);
  auto brief = store().claim(1, 50ms);
  ASSERT_EQ(brief.events.size(), 1u);
  std::this_thread::sleep_for(300ms);
  leased = store().leased(10);
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(leased[0].id, events[1].id);
  EXPECT_EQ(leased[1].id, events[2].id);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreInspect, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost
