// The store's lease cap (Store::max_lease; docs/relay.md, "The lease deadline"): the relay claims
// and renews with min(its lease, the cap), and StoreWrapper forwards the cap so the daemon's
// measuring decorator keeps it. PostgreSQL reports its partition lease there; its effect on a
// killed relay is PostgresPartitions.AKilledRelaysEventsComeBackWithinItsPartitionLease.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
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

TEST(RelayLeaseCap, StoreWrapperForwardsTheCap) {
  auto capped = std::make_shared<CappedStore>(make_memory_store(), Duration(4'000));
  StoreWrapper wrapper(capped);
  EXPECT_EQ(wrapper.max_lease(), std::optional<Duration>(Duration(4'000)));
  EXPECT_EQ(make_memory_store()->max_lease(), std::nullopt);
}

}  // namespace
}  // namespace outpost::unit
