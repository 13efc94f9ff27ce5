// Scheduled delivery (Event::deliver_at, docs/relay.md "Scheduled delivery"): the store holds an
// event until its time, in ordered mode its key's later events wait too, and wait_for_work
// wakes for it without the caller polling. The same on every store case.

#include <gtest/gtest.h>

#include <chrono>
#include <string_view>

#include "outpost/error.h"
#include "outpost/store.h"
#include "store_case_test.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

class StoreSchedule : public testing::StoreCaseTest {
 protected:
  Store& store() {
    if (fixtures().empty()) make();
    return *fixtures().front().store;
  }
};

std::vector<EventId> ids(const ClaimedBatch& b) {
  std::vector<EventId> out;
  for (const auto& e : b.events) out.push_back(e.id);
  return out;
}

Event scheduled(std::string key, Duration in) {
  Event e = Event::make("reminder.due", "{}", std::move(key));
  e.deliver_at = now() + in;
  return e;
}

// Claims (waiting for work between tries) until `want` events came or 10 s passed; counts the
// waits, which must stay few: the store wakes for the due time, the caller does not poll.
std::vector<StoredEvent> claim_when_due(Store& s, std::size_t want, ClaimOrder order, int* waits) {
  std::vector<StoredEvent> got;
  auto start = SteadyClock::now();
  while (got.size() < want && SteadyClock::now() - start < 10s) {
    auto batch = s.claim(10, 30s, order);
    for (auto& e : batch.events) got.push_back(e);
    if (!batch.empty()) s.ack(batch, ids(batch));
    if (got.size() < want) {
      s.wait_for_work(8s);
      ++*waits;
    }
  }
  return got;
}

TEST_P(StoreSchedule, HeldUntilDueThenDeliveredWithoutPolling) {
  std::vector<Event> events{scheduled("", 1500ms)};
  auto start = SteadyClock::now();
  store().append(events);
  EXPECT_TRUE(store().claim(10, 30s).empty()) << "claimed before its deliver_at";
  int waits = 0;
  auto got = claim_when_due(store(), 1, ClaimOrder::ordered, &waits);
  ASSERT_EQ(got.size(), 1u) << "never delivered";
  EXPECT_EQ(got[0].id, events[0].id);
  EXPECT_GE(SteadyClock::now() - start, 1s) << "delivered well before its deliver_at";
  // One wait to the due time (a few more if a store's first wait only connects): bounded
  // generously, far below what polling every 10 ms for 1.5 s would take.
  EXPECT_LE(waits, 20);
}

TEST_P(StoreSchedule, ScheduledHeadHoldsBackItsKeyInOrderedMode) {
  std::vector<Event> events{scheduled("k", 1500ms), Event::make("t", "{}", "k"),
                            Event::make("t", "{}", "j")};
  store().append(events);
  auto first = store().claim(10, 30s, ClaimOrder::ordered);
  ASSERT_EQ(first.events.size(), 1u) << "key k's later event went before its scheduled head";
  EXPECT_EQ(first.events[0].id, events[2].id);
  store().ack(first, ids(first));
  int waits = 0;
  auto got = claim_when_due(store(), 2, ClaimOrder::ordered, &waits);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, events[0].id);
  EXPECT_EQ(got[1].id, events[1].id);
}

TEST_P(StoreSchedule, PastDeliverAtIsDueAtOnce) {
  std::vector<Event> events{scheduled("", -1h)};
  store().append(events);
  auto batch = store().claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(batch.events[0].id, events[0].id);
}

// Event::deliver_at comes back out with the event (the event JSON's "deliver_at": sinks, `outpost
// events list|show|dead|archive`, handlers): from list while it waits, from the claim, and
// kept by a dead letter and by the archive. To the millisecond (Redis keeps milliseconds).
// (Until 2026-11-27 a Redis claim returned none, and the Redis and PostgreSQL archives kept none.)
void expect_deliver_at(std::string_view backend, const StoredEvent& e, TimePoint want,
                       const char* where) {
  ASSERT_TRUE(e.deliver_at.has_value()) << backend << ": deliver_at lost in " << where;
  EXPECT_LE(std::chrono::abs(*e.deliver_at - want), std::chrono::milliseconds(1))
      << backend << ": deliver_at changed in " << where;
}

TEST_P(StoreSchedule, DeliverAtComesBackOutOfListClaimAndDead) {
  std::vector<Event> events{scheduled("k", 700ms)};
  const TimePoint at = *events[0].deliver_at;
  store().append(events);
  auto listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  expect_deliver_at(store().backend(), listed[0], at, "list");
  ClaimedBatch batch;
  for (auto start = SteadyClock::now(); batch.empty() && SteadyClock::now() - start < 10s;) {
    batch = store().claim(10, 30s);
    if (batch.empty()) store().wait_for_work(2s);
  }
  ASSERT_EQ(batch.events.size(), 1u) << "never delivered";
  expect_deliver_at(store().backend(), batch.events[0], at, "claim");
  std::vector<Nack> nacks{{events[0].id, "refused", std::nullopt}};
  ASSERT_EQ(store().nack(batch, nacks), 1u);
  auto dead = store().dead(10);
  ASSERT_EQ(dead.size(), 1u);
  expect_deliver_at(store().backend(), dead[0], at, "dead");
  // Retried, it keeps it: the retried event is the scheduled event, delivered late.
  ASSERT_EQ(store().retry_all(), 1u);
  listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  expect_deliver_at(store().backend(), listed[0], at, "list after retry");
}

// A deliver_at already past (`outpost emit --at` an earlier time) is due at once and still kept:
// listed, and claimed with the event (so the sink's JSON has it, as for a future one).
TEST_P(StoreSchedule, PastDeliverAtComesBackOutOfListAndClaim) {
  std::vector<Event> events{scheduled("k", -1h)};
  const TimePoint at = *events[0].deliver_at;
  store().append(events);
  auto listed = store().list(10);
  ASSERT_EQ(listed.size(), 1u);
  expect_deliver_at(store().backend(), listed[0], at, "list");
  auto batch = store().claim(10, 30s);
  ASSERT_EQ(batch.events.size(), 1u) << "a past deliver_at was not due at once";
  expect_deliver_at(store().backend(), batch.events[0], at, "claim");
}

TEST_P(StoreSchedule, DeliverAtComesBackOutOfTheArchive) {
  StoreOptions o;
  o.archive = true;
  Store& s = *make(o).store;
  std::vector<Event> events{scheduled("k", 300ms), Event::make("t", "{}", "j")};
  const TimePoint at = *events[0].deliver_at;
  s.append(events);
  int waits = 0;
  auto got = claim_when_due(s, 2, ClaimOrder::ordered, &waits);
  ASSERT_EQ(got.size(), 2u) << "never delivered";
  std::vector<ArchivedEvent> archived;
  try {
    archived = s.archived(10);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::not_found) GTEST_SKIP() << s.backend() << " reads no archive";
    throw;
  }
  ASSERT_EQ(archived.size(), 2u);
  for (const auto& a : archived) {
    if (a.id == events[0].id)
      expect_deliver_at(s.backend(), a, at, "the archive");
    else
      EXPECT_FALSE(a.deliver_at) << "an event emitted without deliver_at came back with one";
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreSchedule, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost
