// The Redis store as a URL without partitions=N (N > 1) opens it (docs/redis.md, Partitions:
// "The default" and "Upgrade"): the count recorded for the outbox decides, and an outbox with
// none is partitioned into kDefaultPartitions on its first use where one script may touch every
// partition (a single master: standalone or Sentinel). An outbox that still holds events of the
// unpartitioned layout is used unpartitioned, as before, until a relay finds it drained: that
// relay records the count and every process of the outbox follows (their unpartitioned scripts
// are refused from then on, which makes them ask again). partitions=1 records the opt-out.

#include <chrono>
#include <memory>
#include <mutex>

#include "stores/redis/redis_partition.h"
#include "stores/redis/redis_scripts.h"
#include "stores/redis/redis_url.h"

namespace outpost::redis_store {
namespace {

// How often a relay on a drained-looking unpartitioned outbox tries to record the default.
constexpr std::chrono::seconds kSwitchEvery{1};

class AutoStore final : public Store {
 public:
  AutoStore(StoreConfig c, const StoreOptions& options)
      : config_(std::move(c)),
        options_(options),
        base_("{" + config_.prefix + "}:"),
        key_(base_ + "partitions"),
        meta_(config_.client) {}

  std::string_view backend() const override { return "redis"; }

  void append(std::span<const Event> events, TxHandle tx) override {
    with([&](Store& s) { s.append(events, tx); });
  }
  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    return drained_or([&](Store& s) { return s.claim(max, lease, order); });
  }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    return drained_or(
        [&](Store& s) { return s.settle_and_claim(done, settlement, counts, max, lease, order); });
  }
  std::size_t ack(const ClaimedBatch& b, std::span<const EventId> ids) override {
    return with([&](Store& s) { return s.ack(b, ids); });
  }
  std::size_t nack(const ClaimedBatch& b, std::span<const Nack> nacks) override {
    return with([&](Store& s) { return s.nack(b, nacks); });
  }
  std::size_t release(const ClaimedBatch& b, std::span<const EventId> ids) override {
    return with([&](Store& s) { return s.release(b, ids); });
  }
  bool renew(const ClaimedBatch& b, Duration lease) override {
    return with([&](Store& s) { return s.renew(b, lease); });
  }
  void wait_for_work(Duration max) override { current()->wait_for_work(max); }
  void interrupt() override {
    std::shared_ptr<Store> s;
    {
      std::lock_guard lock(mu_);
      s = store_;
    }
    if (s) s->interrupt();
  }

  StoreStats stats() override {
    return with([&](Store& s) { return s.stats(); });
  }
  std::vector<StoredEvent> list(std::size_t limit) override {
    return with([&](Store& s) { return s.list(limit); });
  }
  std::vector<EventState> blocked(std::size_t limit) override {
    return with([&](Store& s) { return s.blocked(limit); });
  }
  std::vector<EventState> leased(std::size_t limit) override {
    return with([&](Store& s) { return s.leased(limit); });
  }
  std::vector<DeadEvent> dead(std::size_t limit) override {
    return with([&](Store& s) { return s.dead(limit); });
  }
  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    return with([&](Store& s) { return s.archived(limit); });
  }
  std::size_t retry(std::span<const EventId> ids) override {
    return with([&](Store& s) { return s.retry(ids); });
  }
  std::size_t retry_all() override {
    return with([&](Store& s) { return s.retry_all(); });
  }
  std::size_t discard(std::span<const EventId> ids) override {
    return with([&](Store& s) { return s.discard(ids); });
  }
  std::size_t discard_all() override {
    return with([&](Store& s) { return s.discard_all(); });
  }

 private:
  // Runs `f` on the current store. A ConfigError (an unpartitioned script refused because the
  // outbox was partitioned meanwhile, or the other way round) makes it ask the outbox again:
  // when that changes the store, `f` runs once more on the new one (a refused script wrote
  // nothing), else the error stands.
  template <typename F>
  auto with(F f) -> decltype(f(std::declval<Store&>())) {
    std::shared_ptr<Store> s = current();
    try {
      return f(*s);
    } catch (const ConfigError&) {
      std::shared_ptr<Store> now = decide(s, /*create=*/false);
      if (now == s) throw;
      return f(*now);
    }
  }

  // A claim that finds nothing on an unpartitioned outbox that is waiting to be partitioned
  // tries to record the default (at most every kSwitchEvery): it succeeds once the outbox holds
  // no unpartitioned event, and the next claim is partitioned.
  template <typename F>
  ClaimedBatch drained_or(F f) {
    ClaimedBatch b = with(f);
    if (!b.empty()) return b;
    std::shared_ptr<Store> s;
    {
      std::lock_guard lock(mu_);
      const auto now = std::chrono::steady_clock::now();
      if (!draining_ || now < next_switch_) return b;
      next_switch_ = now + kSwitchEvery;
      s = store_;
    }
    decide(s, /*create=*/true);
    return b;
  }

  std::shared_ptr<Store> current() {
    {
      std::lock_guard lock(mu_);
      if (store_) return store_;
    }
    return decide(nullptr, options_.open == StoreOptions::Open::create);
  }

  // Asks partitions.lua (recording the default when `create` and the outbox is new or drained)
  // and opens the store that matches, unless `seen` (the store the caller used) was replaced
  // meanwhile or still matches. Returns the current store.
  std::shared_ptr<Store> decide(const std::shared_ptr<Store>& seen, bool create) {
    std::lock_guard lock(decide_mu_);
    {
      std::lock_guard lock2(mu_);
      if (store_ != seen) return store_;
    }
    if (meta_.cluster() < 0) meta_.command({"PING"});  // learns whether it is a cluster
    // On Redis Cluster a URL without a count keeps the unpartitioned layout: a transactional
    // emit (MULTI) stays in one slot there (docs/redis.md, Partitions: the default).
    const std::string fallback = meta_.cluster() == 0 ? std::to_string(kDefaultPartitions) : "0";
    const std::int64_t n = reply_int(
        meta_
            .eval(script_, key_,
                  {base_, std::to_string(config_.partitions), create ? "1" : "0", fallback})
            .get());
    if (n > 1 && config_.partitions == 1)
      throw ConfigError("redis: the outbox " + base_.substr(0, base_.size() - 1) + " has " +
                            std::to_string(n) + " partitions, the URL says partitions=1: use " +
                            "partitions=" + std::to_string(n) + " or leave it out " +
                            "(docs/redis.md, Partitions)",
                        "redis");
    std::shared_ptr<Store> next;
    const bool partitioned = n > 1;
    {
      std::lock_guard lock2(mu_);
      if (store_ && partitioned == partitioned_ && (!partitioned || n == partitions_)) {
        draining_ = n < 0;
        return store_;
      }
    }
    if (partitioned) {
      StoreConfig c = config_;
      c.partitions = static_cast<int>(n);
      next = open_partitioned(std::move(c), options_);
    } else {
      next = open_partition(config_.client, config_.prefix, config_.writer_lease, options_, {}, {});
    }
    std::lock_guard lock2(mu_);
    store_ = next;
    partitioned_ = partitioned;
    partitions_ = n;
    draining_ = n < 0;
    return store_;
  }

  const StoreConfig config_;
  const StoreOptions options_;
  const std::string base_;  // "{prefix}:"
  const std::string key_;
  Client meta_;
  Script script_{"partitions", std::string(kPrologue) + kPartitions, {}, {}};
  std::mutex decide_mu_;  // one decision at a time
  std::mutex mu_;         // guards what follows
  std::shared_ptr<Store> store_;
  bool partitioned_ = false;
  std::int64_t partitions_ = 0;
  bool draining_ = false;  // unpartitioned events hold the default count back
  std::chrono::steady_clock::time_point next_switch_{};
};

}  // namespace

std::unique_ptr<Store> open_auto(StoreConfig config, const StoreOptions& options) {
  return std::make_unique<AutoStore>(std::move(config), options);
}

}  // namespace outpost::redis_store
