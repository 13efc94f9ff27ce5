// Scheduled delivery (Event::deliver_at, docs/relay.md "Scheduled delivery"): the store holds an
// event until its time, in ordered mode its key's later events wait too, and wait_for_work
// wakes for it without the caller polling. The same on every store case.

#include <gtest/gtest.h>

#include <chrono>

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

INSTANTIATE_TEST_SUITE_P(Stores, StoreSchedule, ::testing::ValuesIn(testing::store_cases()),
                         testing::case_name);

}  // namespace
}  // namespace outpost
