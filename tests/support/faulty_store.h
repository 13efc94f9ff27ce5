#pragma once
// A Store decorator that injects faults and counts calls, for relay tests (model: leveldb's
// ErrorEnv over its EnvWrapper). Header-only. Every knob is atomic, so a test may flip it while a
// relay runs. StoreWrapper forwards what it does not change.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "outpost/error.h"
#include "outpost/store_wrapper.h"

namespace outpost::testing {

class FaultyStore final : public StoreWrapper {
 public:
  explicit FaultyStore(std::shared_ptr<Store> inner) : StoreWrapper(std::move(inner)) {}

  // Fault knobs. fail_*: the next N calls throw ConnectionError (-1: every call).
  std::atomic<int> fail_claims{0};
  std::atomic<int> fail_acks{0};
  std::atomic<bool> renew_lost{false};    // renew returns false (another relay took the events)
  std::atomic<bool> renew_frozen{false};  // renew returns true but does nothing (a hung process)

  // Call counters.
  std::atomic<int> claim_calls{0}, ack_calls{0}, nack_calls{0}, release_calls{0}, renew_calls{0};

  // Every Nack passed to nack(), in call order.
  std::vector<Nack> nacks() {
    std::lock_guard lock(mu_);
    return nacks_;
  }

  Store& inner() { return target(); }

  // Called at the start of every claim (set before the store is used).
  std::function<void()> before_claim;

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ++claim_calls;
    if (before_claim) before_claim();
    if (take(fail_claims)) throw ConnectionError("faulty", "injected claim failure");
    return target().claim(max, lease, order);
  }
  // Called at the start of every ack (set before the store is used).
  std::function<void()> before_ack;

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    ++ack_calls;
    if (before_ack) before_ack();
    if (take(fail_acks)) throw ConnectionError("faulty", "injected ack failure");
    return target().ack(batch, ids);
  }
  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    ++nack_calls;
    {
      std::lock_guard lock(mu_);
      nacks_.insert(nacks_.end(), nacks.begin(), nacks.end());
    }
    return target().nack(batch, nacks);
  }
  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    ++release_calls;
    return target().release(batch, ids);
  }
  bool renew(const ClaimedBatch& batch, Duration lease) override {
    ++renew_calls;
    if (renew_lost) return false;
    if (renew_frozen) return true;
    return target().renew(batch, lease);
  }
  // The relay's hot path as the separate calls above, so every fault and counter applies to it.
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    return Store::settle_and_claim(done, settlement, counts, max, lease, order);
  }

 private:
  static bool take(std::atomic<int>& budget) {
    int v = budget.load();
    while (v != 0) {
      if (v < 0) return true;
      if (budget.compare_exchange_weak(v, v - 1)) return true;
    }
    return false;
  }

  std::mutex mu_;
  std::vector<Nack> nacks_;  // guarded by mu_
};

}  // namespace outpost::testing
