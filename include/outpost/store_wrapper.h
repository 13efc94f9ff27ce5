#pragma once
// StoreWrapper: a Store that forwards every call of both halves (OutboxStore, OutboxAdmin) to
// another Store (the idea of leveldb's EnvWrapper). A decorator (timing, fault injection, a test's
// pause) derives from it and overrides only what it changes, so a virtual added to Store later, or
// one with a default such as archived(), reaches the wrapped store instead of silently answering
// the base class's default (docs/architecture.md, "Decorators").
//
// settle_and_claim is forwarded too, so the wrapped store's one-round-trip path is kept. A
// decorator that changes claim, ack, nack or release and wants that change on the relay's hot
// path as well overrides settle_and_claim with OutboxStore::settle_and_claim (the separate calls in
// turn, through its own overrides).
//
// Thread safety: as the wrapped store's; the wrapper adds no state of its own.

#include <memory>
#include <utility>

#include "outpost/store.h"

namespace outpost {

class StoreWrapper : public Store {
 public:
  // `target` must outlive the wrapper.
  explicit StoreWrapper(Store& target) : target_(&target) {}
  // The wrapper keeps `target` alive.
  explicit StoreWrapper(std::shared_ptr<Store> target)
      : owned_(std::move(target)), target_(owned_.get()) {}

  Store& target() const { return *target_; }

  std::string_view backend() const override { return target_->backend(); }

  // OutboxStore: the relay's half.
  void append(std::span<const Event> events, TxHandle tx = {}) override {
    target_->append(events, tx);
  }
  ClaimedBatch claim(std::size_t max, Duration lease,
                     ClaimOrder order = ClaimOrder::ordered) override {
    return target_->claim(max, lease, order);
  }
  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    return target_->ack(batch, ids);
  }
  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    return target_->nack(batch, nacks);
  }
  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    return target_->release(batch, ids);
  }
  bool renew(const ClaimedBatch& batch, Duration lease) override {
    return target_->renew(batch, lease);
  }
  std::optional<Duration> max_lease() const override { return target_->max_lease(); }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order = ClaimOrder::ordered) override {
    return target_->settle_and_claim(done, settlement, counts, max, lease, order);
  }
  void wait_for_work(Duration max) override { target_->wait_for_work(max); }
  void interrupt() override { target_->interrupt(); }

  // OutboxAdmin: the operators' half.
  StoreStats stats() override { return target_->stats(); }
  std::vector<StoredEvent> list(std::size_t limit) override { return target_->list(limit); }
  std::vector<EventState> blocked(std::size_t limit) override { return target_->blocked(limit); }
  std::vector<EventState> leased(std::size_t limit) override { return target_->leased(limit); }
  std::vector<DeadEvent> dead(std::size_t limit) override { return target_->dead(limit); }
  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    return target_->archived(limit);
  }
  std::size_t retry(std::span<const EventId> ids) override { return target_->retry(ids); }
  std::size_t retry_all() override { return target_->retry_all(); }
  std::size_t discard(std::span<const EventId> ids) override { return target_->discard(ids); }
  std::size_t discard_all() override { return target_->discard_all(); }

 private:
  std::shared_ptr<Store> owned_;  // empty when the caller owns the target
  Store* target_;
};

}  // namespace outpost
