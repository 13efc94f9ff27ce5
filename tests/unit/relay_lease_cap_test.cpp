// The store's lease cap (Store::max_lease; docs/relay.md, "The lease deadline"): the relay claims
// and renews with min(its lease, the cap), and StoreWrapper forwards the cap so the daemon's
// measuring decorator keeps it. PostgreSQL reports its partition lease there; its effect on a
// killed relay is PostgresPartitions.AKilledRelaysEventsComeBackWithinItsPartitionLease.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "outpost/relay.h"
#include "outpost/store_wrapper.h"
#include "outpost/stores/memory.h"

namespace outpost::unit {
namespace {

using namespace std::chrono_literals;

// A memory store that reports a cap and records every lease asked for.
class CappedStore final : public StoreWrapper {
 public:
  CappedStore(std::shared_ptr<Store> inner, std::optional<Duration> cap)
      : StoreWrapper(std::move(inner)), cap_(cap) {}
  std::optional<Duration> max_lease() const override { return cap_; }
  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    asked(lease);
    return StoreWrapper::claim(max, lease, order);
  }
  bool renew(const ClaimedBatch& batch, Duration lease) override {
    asked(lease);
    return StoreWrapper::renew(batch, lease);
  }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    asked(lease);
    return StoreWrapper::settle_and_claim(done, settlement, counts, max, lease, order);
  }
  std::vector<Duration> leases() {
    std::lock_guard lock(mu_);
    return leases_;
  }

 private:
  void asked(Duration lease) {
    std::lock_guard lock(mu_);
    leases_.push_back(lease);
  }
  std::optional<Duration> cap_;
  std::mutex mu_;
  std::vector<Duration> leases_;
};

class CountingSink final : public Sink {
 public:
  std::string_view name() const override { return "counting"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    delivered += events.size();
    return std::vector<DeliveryResult>(events.size(), DeliveryResult::delivered());
  }
  std::size_t delivered = 0;
};

// Runs a relay asking for `lease` over 50 events; returns the leases the store was asked for.
std::vector<Duration> run_relay(std::optional<Duration> cap, Duration lease, Duration& effective) {
  CappedStore store(make_memory_store(), cap);
  std::vector<Event> events;
  for (int i = 0; i < 50; ++i) events.push_back(Event::make("t", "{}", "k" + std::to_string(i)));
  store.append(events);
  CountingSink sink;
  RelayOptions options;
  options.batch_size = 10;
  options.lease = lease;
  options.until_empty = true;
  Relay relay(store, sink, options);
  effective = relay.options().lease;
  relay.run();
  EXPECT_EQ(sink.delivered, 50u);
  return store.leases();
}

TEST(RelayLeaseCap, TheRelayAsksForNoMoreThanTheStoresCap) {
  Duration effective{0};
  auto leases = run_relay(Duration(4'000), Duration(120'000), effective);
  EXPECT_EQ(effective, Duration(4'000));
  ASSERT_FALSE(leases.empty());
  for (auto l : leases) EXPECT_EQ(l, Duration(4'000));
}

TEST(RelayLeaseCap, AShorterLeaseThanTheCapAndNoCapAreKept) {
  Duration effective{0};
  for (auto l : run_relay(Duration(4'000), Duration(2'000), effective)) EXPECT_EQ(l, 2'000ms);
  EXPECT_EQ(effective, Duration(2'000));
  for (auto l : run_relay(std::nullopt, Duration(120'000), effective)) EXPECT_EQ(l, 120'000ms);
  EXPECT_EQ(effective, Duration(120'000));
}

// A sink that honours the relay's deadline as the HTTP sink does: it starts an event only while
// the control allows it, and each event takes `per_event`.
class SlowBoundedSink final : public Sink {
 public:
  explicit SlowBoundedSink(Duration per_event) : per_event_(per_event) {}
  std::string_view name() const override { return "slow"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return std::vector<DeliveryResult>(events.size(), DeliveryResult::delivered());
  }
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    std::vector<DeliveryResult> out;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (!control.may_start()) {
        out.push_back(DeliveryResult::failed(control.timed_out_error()));
        continue;
      }
      std::this_thread::sleep_for(per_event_);
      out.push_back(DeliveryResult::delivered());
    }
    return out;
  }

 private:
  Duration per_event_;
};

// The cap shortens the lease, not the delivery: with the default deliver timeout (0: the lease),
// a batch that takes several capped leases to deliver, renewed all along, is delivered whole. The
// cap (1.5 s, renewed every 0.5 s) is below the delivery (10 x 250 ms) and far below the lease
// asked for (60 s), so the outcome does not depend on the machine's speed. Before the fix the
// deliver timeout was the capped lease and every event started after 1.5 s failed (PostgreSQL: 5 s,
// so a webhook slower than 50 ms per event got failed attempts and duplicates under default flags).
TEST(RelayLeaseCap, TheDeliverTimeoutIsTheLeaseAskedForNotTheCap) {
  CappedStore store(make_memory_store(), Duration(1'500));
  std::vector<Event> events;
  for (int i = 0; i < 10; ++i) events.push_back(Event::make("t", "{}", "k" + std::to_string(i)));
  store.append(events);
  SlowBoundedSink sink(250ms);
  RelayOptions options;
  options.batch_size = 10;
  options.lease = Duration(60'000);
  options.until_empty = true;
  Relay relay(store, sink, options);
  relay.run();
  const auto c = relay.counters();
  EXPECT_EQ(c.delivered, 10u);
  EXPECT_EQ(c.failed, 0u);
  EXPECT_EQ(store.stats().pending, 0u);
}

TEST(RelayLeaseCap, StoreWrapperForwardsTheCap) {
  auto capped = std::make_shared<CappedStore>(make_memory_store(), Duration(4'000));
  StoreWrapper wrapper(capped);
  EXPECT_EQ(wrapper.max_lease(), std::optional<Duration>(Duration(4'000)));
  EXPECT_EQ(make_memory_store()->max_lease(), std::nullopt);
}

}  // namespace
}  // namespace outpost::unit
