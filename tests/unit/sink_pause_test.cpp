// The relay's pure pieces split out of relay.cpp, without a store or a sink: the pause of an
// unavailable sink (src/relay/sink_pause.h, docs/relay.md "Pauses") and the lease deadline
// (src/relay/lease_deadline.h, docs/relay.md "The lease deadline").

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "relay/lease_deadline.h"
#include "relay/sink_pause.h"

namespace outpost::unit {
namespace {

using relay_detail::Batch;
using relay_detail::LeaseDeadlines;
using relay_detail::SinkPause;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

Batch unavailable_batch(std::uint64_t n, Duration retry_after = Duration{0}) {
  Batch b;
  b.n_unavailable = n;
  b.unavailable_why = "connection refused";
  b.retry_after = retry_after;
  return b;
}

Batch answered_batch() {
  Batch b;
  b.answered = true;
  return b;
}

// The probe wait is the step plus up to 10 % jitter.
void expect_wait(const SinkPause& p, Duration step) {
  EXPECT_GE(p.probe_wait(), step);
  EXPECT_LE(p.probe_wait(), step + step / 10);
}

TEST(SinkPause, AnUnavailableBatchTakesTheSinkDownOnceAndTheWaitsDoubleUpToTheCap) {
  SinkPause p(Duration{3'000});
  EXPECT_FALSE(p.down());
  auto down = p.on_batch(unavailable_batch(3), "web");
  ASSERT_TRUE(down);
  EXPECT_TRUE(down->down);
  EXPECT_NE(down->message.find("sink 'web' down since "), std::string::npos) << down->message;
  EXPECT_NE(down->message.find(": connection refused; its events wait (no attempt counted); "
                               "probing with one event in 500 ms, then backing off to every "
                               "3000 ms"),
            std::string::npos)
      << down->message;
  EXPECT_TRUE(p.down());
  expect_wait(p, 500ms);
  // Still down: no second report, the next probe further off, up to the cap.
  EXPECT_FALSE(p.on_batch(unavailable_batch(1), "web"));
  expect_wait(p, 1'000ms);
  EXPECT_FALSE(p.on_batch(unavailable_batch(1), "web"));
  expect_wait(p, 2'000ms);
  EXPECT_FALSE(p.on_batch(unavailable_batch(1), "web"));
  expect_wait(p, 3'000ms);

  RelayCounters c;
  p.fill_counters(c);
  EXPECT_TRUE(c.sink_down);
  EXPECT_EQ(c.unavailable, 6u);
  EXPECT_EQ(c.sink_outages, 1u);
  EXPECT_NE(c.sink_down_since, TimePoint{});
}

TEST(SinkPause, AnAnswerWhileDownBringsItBackNamingTheProbes) {
  SinkPause p(Duration{60'000});
  EXPECT_FALSE(p.on_batch(answered_batch(), "web"));  // up already: nothing to say
  ASSERT_TRUE(p.on_batch(unavailable_batch(1), "web"));
  EXPECT_FALSE(p.on_batch(Batch{}, "web"));  // neither unavailable nor answered: still down
  EXPECT_TRUE(p.down());
  p.count_probe();
  p.count_probe();
  auto back = p.on_batch(answered_batch(), "web");
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->down);
  EXPECT_EQ(back->message.find("sink 'web' is back after "), 0u) << back->message;
  EXPECT_NE(back->message.find(" s (2 probes); delivering again"), std::string::npos)
      << back->message;
  EXPECT_FALSE(p.down());

  RelayCounters c;
  p.fill_counters(c);
  EXPECT_FALSE(c.sink_down);
  EXPECT_EQ(c.sink_down_since, TimePoint{});
  EXPECT_EQ(c.sink_outages, 1u);

  // A second outage starts from the first step again and counts its own probes.
  ASSERT_TRUE(p.on_batch(unavailable_batch(1), "web"));
  expect_wait(p, 500ms);
  p.count_probe();
  auto again = p.on_batch(answered_batch(), "web");
  ASSERT_TRUE(again);
  EXPECT_NE(again->message.find("(1 probe)"), std::string::npos) << again->message;
  p.fill_counters(c);
  EXPECT_EQ(c.sink_outages, 2u);
}

TEST(SinkPause, RetryAfterIsHonouredAndCappedAndTheCapIsClamped) {
  SinkPause p(Duration{2'000});
  ASSERT_TRUE(p.on_batch(unavailable_batch(1, Duration{1'500}), "web"));
  expect_wait(p, 1'500ms);
  EXPECT_FALSE(p.on_batch(unavailable_batch(1, Duration{3'600'000}), "web"));
  expect_wait(p, 2'000ms);

  EXPECT_EQ(SinkPause(Duration{0}).probe_cap(), Duration{10});
  EXPECT_EQ(SinkPause(Duration{3'600'000}).probe_cap(), Duration{30'000});
  SinkPause small(Duration{100});
  ASSERT_TRUE(small.on_batch(unavailable_batch(1), "web"));
  expect_wait(small, 100ms);  // the first step (500 ms) is capped too
}

Batch claimed_batch() {
  Batch b;
  b.claimed.events.resize(1);
  return b;
}

TEST(LeaseDeadlines, ADeliveryStartsOnlyBeforeTheLeaseDeadlineAndIsBoundedByIt) {
  DeliveryControl control;
  // Lease 5 s: margin 500 ms; the deliver timeout (10 s) is longer than the lease.
  LeaseDeadlines d(control, Duration{5'000}, Duration{10'000});
  const auto t0 = SteadyClock::now();

  Batch empty;
  d.claimed(empty, t0);
  EXPECT_EQ(empty.lease_deadline, SteadyClock::time_point::max());

  Batch b = claimed_batch();
  d.claimed(b, t0);
  EXPECT_EQ(b.lease_deadline, t0 + 4'500ms);

  // Past the deadline: nothing starts.
  Batch late = b;
  d.begin_delivery(late, t0 + 4'500ms);
  EXPECT_TRUE(late.lease_ran_out);

  // Before it: the call's own deadline is returned, the control's is the lease deadline.
  const auto call = d.begin_delivery(b, t0 + 1s);
  EXPECT_FALSE(b.lease_ran_out);
  EXPECT_EQ(call, t0 + 11s);
  EXPECT_EQ(control.deadline(), t0 + 4'500ms);

  // A renewal that started before the deadline moves it (and the running call's) on ...
  Batch slots[1] = {b};
  const auto call2 = d.begin_delivery(slots[0], t0 + 1s);
  EXPECT_EQ(call2, t0 + 11s);
  d.renewed(slots, slots[0].claimed, t0 + 2s, Duration{5'000});
  EXPECT_EQ(slots[0].lease_deadline, t0 + 6'500ms);
  EXPECT_EQ(control.deadline(), t0 + 6'500ms);
  // ... one that started after it does not; nor one of another batch.
  d.renewed(slots, slots[0].claimed, t0 + 7s, Duration{5'000});
  EXPECT_EQ(slots[0].lease_deadline, t0 + 6'500ms);
  ClaimedBatch other;
  d.renewed(slots, other, t0 + 3s, Duration{5'000});
  EXPECT_EQ(slots[0].lease_deadline, t0 + 6'500ms);
  d.end_delivery();
}

TEST(LeaseDeadlines, TheMarginIsATenthOfTheLeaseAtMostOneSecond) {
  DeliveryControl control;
  LeaseDeadlines d(control, Duration{60'000}, Duration{1'000});
  const auto t0 = SteadyClock::now();
  Batch b = claimed_batch();
  d.claimed(b, t0);
  EXPECT_EQ(b.lease_deadline, t0 + 59s);
  // The call's own deadline (1 s) is earlier than the lease's: it bounds the control.
  EXPECT_EQ(d.begin_delivery(b, t0), t0 + 1s);
  EXPECT_EQ(control.deadline(), t0 + 1s);
  d.end_delivery();
}

}  // namespace
}  // namespace outpost::unit
