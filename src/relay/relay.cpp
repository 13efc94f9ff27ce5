// The relay loop. Per batch: one claim, one deliver, then at most one ack, one nack and one
// release call (each one round trip on every store). Per-event work is a few vector pushes into
// buffers reused across batches.

#include "outpost/relay.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "lease_keeper.h"

namespace outpost {
namespace {

constexpr Duration kErrorBackoffFirst{50};
constexpr Duration kErrorBackoffMax{5'000};
constexpr int kSettleTries = 4;            // an ack/nack/release is tried this many times
constexpr Duration kSettleRetryFirst{50};  // then 100, 200 ms: bounded, also while stopping
constexpr Duration kIdleWaitChunk{200};    // bounds the stop() vs wait_for_work() race

void validate(const RelayOptions& o) {
  if (o.batch_size < 1) throw ConfigError("relay batch size must be at least 1");
  if (o.lease.count() < 3) throw ConfigError("relay lease must be at least 3 ms");
  if (o.max_attempts < 1) throw ConfigError("relay max attempts must be at least 1");
  if (o.backoff_base.count() < 0) throw ConfigError("relay backoff base must not be negative");
  if (o.backoff_max.count() < 0) throw ConfigError("relay backoff max must not be negative");
  if (o.poll_interval.count() < 1) throw ConfigError("relay poll interval must be at least 1 ms");
}

std::string describe(const StoredEvent& e) {
  std::string s = "event " + e.id.str() + " (type '" + e.type + "'";
  if (!e.key.empty()) s += ", key '" + e.key + "'";
  return s + ")";
}

}  // namespace

struct Relay::Impl {
  Impl(Store& s, Sink& k, RelayOptions o)
      : store(s),
        sink(k),
        options((validate(o), std::move(o))),
        keeper(s, options.lease, [this](const std::string& m) { store_error(m); }) {}

  // ---- reporting -------------------------------------------------------------------------
  void report(const std::string& message) {
    if (!options.on_error) return;
    try {
      options.on_error(message);
    } catch (...) {  // documented as must-not-throw; the relay must survive it anyway
    }
  }

  void store_error(const std::string& message) {
    store_errors.fetch_add(1, std::memory_order_relaxed);
    report(message);
  }

  void delivery_error(const std::string& message, const StoredEvent& e) {
    if (options.on_delivery_error) {
      try {
        options.on_delivery_error(message, e);
      } catch (...) {
      }
    } else {
      report(message);
    }
  }

  // ---- waiting ---------------------------------------------------------------------------
  // Sleeps up to `d`; returns early when stop() is called.
  void sleep_for(Duration d) {
    std::unique_lock lock(sleep_mu);
    sleep_cv.wait_for(lock, d, [&] { return stopping.load(std::memory_order_acquire); });
  }

  Duration next_error_backoff() {
    error_backoff = error_backoff.count() == 0 ? kErrorBackoffFirst
                                               : std::min(kErrorBackoffMax, error_backoff * 2);
    // Half fixed, half jitter: relays that lost the same database do not return in lockstep.
    thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<std::int64_t> dist(0, error_backoff.count() / 2);
    return error_backoff / 2 + Duration{dist(rng)};
  }

  // Waits for work up to poll_interval, in chunks, so a stop() that raced past the store's
  // interrupt is noticed within one chunk. Returns early when the store signals work.
  // Returns true when it returned before poll_interval because the store signalled.
  bool idle_wait() {
    using SteadyClock = std::chrono::steady_clock;
    auto deadline = SteadyClock::now() + options.poll_interval;
    while (!stopping.load(std::memory_order_acquire)) {
      auto left = std::chrono::duration_cast<Duration>(deadline - SteadyClock::now());
      if (left.count() <= 0) return false;
      Duration chunk = std::min(left, kIdleWaitChunk);
      auto started = SteadyClock::now();
      store.wait_for_work(chunk);
      // Woken before the chunk ran out: the store signalled work (or spuriously): claim again.
      if (SteadyClock::now() - started + Duration{1} < chunk) return true;
    }
    return false;
  }

  // ---- settling --------------------------------------------------------------------------
  // Runs a settle call with a few bounded retries. nullopt: gave up (reported); the lease
  // expiry will redeliver those events (a bounded duplicate).
  template <typename F>
  std::optional<std::size_t> settle(const char* what, std::size_t count, F&& call, bool& retried) {
    Duration wait = kSettleRetryFirst;
    for (int attempt = 1;; ++attempt) {
      try {
        return call();
      } catch (const std::exception& ex) {
        store_error(std::string(what) + " of " + std::to_string(count) + " events failed" +
                    (attempt < kSettleTries ? " (retrying): "
                                            : " (giving up; the lease expiry "
                                              "will redeliver them): ") +
                    ex.what());
      } catch (...) {
        store_error(std::string(what) + " of " + std::to_string(count) +
                    " events failed with an unknown exception");
      }
      if (attempt >= kSettleTries) return std::nullopt;
      retried = true;
      std::this_thread::sleep_for(wait);  // not cut short by stop(): settling is part of draining
      wait *= 2;
    }
  }

  // ---- one cycle -------------------------------------------------------------------------
  std::size_t cycle() {
    ClaimedBatch batch = store.claim(options.batch_size, options.lease, options.order);
    if (batch.empty()) return 0;
    const std::size_t n = batch.events.size();
    batches.fetch_add(1, std::memory_order_relaxed);
    claimed.fetch_add(n, std::memory_order_relaxed);

    ack_ids.clear();
    nacks.clear();
    release_ids.clear();
    std::uint64_t n_failed = 0, n_dead = 0;

    // An event claimed more often than max_attempts lost its lease that many times (its relay
    // died or hung while delivering it): dead-letter it without trying again.
    std::span<const StoredEvent> to_deliver = batch.events;
    std::vector<StoredEvent> subset;
    bool over = std::any_of(batch.events.begin(), batch.events.end(), [&](const StoredEvent& e) {
      return e.attempts > options.max_attempts;
    });
    if (over) {
      for (const auto& e : batch.events) {
        if (e.attempts <= options.max_attempts) {
          subset.push_back(e);
          continue;
        }
        std::string why = "gave up after " + std::to_string(e.attempts - 1) + " attempts (max " +
                          std::to_string(options.max_attempts) +
                          "): its lease expired while it was being delivered (the relay died or "
                          "hung)";
        delivery_error(describe(e) + " dead-lettered: " + why, e);
        nacks.push_back(Nack{e.id, std::move(why), std::nullopt});
        ++n_dead;
      }
      to_deliver = subset;
    }

    if (!to_deliver.empty()) {
      std::vector<DeliveryResult> results;
      keeper.arm(batch);
      try {
        results = sink.deliver(to_deliver);
      } catch (const std::exception& ex) {
        results.assign(to_deliver.size(), DeliveryResult::failed(ex.what()));
      } catch (...) {
        results.assign(to_deliver.size(),
                       DeliveryResult::failed("sink threw a non-standard exception"));
      }
      if (!keeper.disarm()) {
        // Somebody else holds these events now; our acks would be fenced anyway.
        lease_lost.fetch_add(1, std::memory_order_relaxed);
        report("lease lost while delivering a batch of " + std::to_string(n) +
               " events: the batch is abandoned (its new owner delivers it)");
        return n;
      }
      if (results.size() != to_deliver.size()) {
        std::string why = "sink '" + std::string(sink.name()) + "' returned " +
                          std::to_string(results.size()) + " results for " +
                          std::to_string(to_deliver.size()) + " events";
        results.assign(to_deliver.size(), DeliveryResult::failed(why));
      }
      for (std::size_t i = 0; i < to_deliver.size(); ++i) {
        const StoredEvent& e = to_deliver[i];
        DeliveryResult& r = results[i];
        switch (r.status) {
          case DeliveryResult::Status::delivered:
            ack_ids.push_back(e.id);
            break;
          case DeliveryResult::Status::skipped:
            release_ids.push_back(e.id);
            break;
          case DeliveryResult::Status::failed: {
            ++n_failed;
            std::optional<Duration> retry_in;
            std::string note;
            if (e.attempts < options.max_attempts) {
              retry_in = backoff_delay(e.attempts, options.backoff_base, options.backoff_max);
              note = "; retry in " + std::to_string(retry_in->count()) + " ms";
            } else {
              ++n_dead;
              note = "; dead-lettered";
            }
            delivery_error(describe(e) + " attempt " + std::to_string(e.attempts) + "/" +
                               std::to_string(options.max_attempts) + " failed: " + r.error + note,
                           e);
            nacks.push_back(Nack{e.id, std::move(r.error), retry_in});
            break;
          }
        }
      }
    }

    bool retried = false, fenced = false;
    if (!ack_ids.empty()) {
      auto done = settle(
          "ack", ack_ids.size(), [&] { return store.ack(batch, ack_ids); }, retried);
      if (done && *done < ack_ids.size()) fenced = true;
    }
    if (!nacks.empty()) {
      auto done = settle(
          "nack", nacks.size(), [&] { return store.nack(batch, nacks); }, retried);
      if (done && *done < nacks.size()) fenced = true;
    }
    if (!release_ids.empty()) {
      auto done = settle(
          "release", release_ids.size(), [&] { return store.release(batch, release_ids); },
          retried);
      if (done && *done < release_ids.size()) fenced = true;
    }
    // After a retried call a short count may just mean the first try did take effect.
    if (fenced && !retried) {
      lease_lost.fetch_add(1, std::memory_order_relaxed);
      report("some events of a batch of " + std::to_string(n) +
             " were no longer leased by this relay when settled (lease expired)");
    }

    delivered.fetch_add(ack_ids.size(), std::memory_order_relaxed);
    failed.fetch_add(n_failed, std::memory_order_relaxed);
    dead.fetch_add(n_dead, std::memory_order_relaxed);
    released.fetch_add(release_ids.size(), std::memory_order_relaxed);
    return n;
  }

  void run() {
    while (!stopping.load(std::memory_order_acquire)) {
      std::size_t n = 0;
      try {
        n = cycle();
        error_backoff = Duration{0};
      } catch (const std::exception& ex) {
        store_error(std::string("claim failed (backing off): ") + ex.what());
        sleep_for(next_error_backoff());
        continue;
      } catch (...) {
        store_error("claim failed with an unknown exception (backing off)");
        sleep_for(next_error_backoff());
        continue;
      }
      if (n > 0) futile_wakeups = 0;
      if (n > 0 || stopping.load(std::memory_order_acquire)) continue;
      try {
        if (options.until_empty) {
          StoreStats s = store.stats();
          if (s.pending + s.leased == 0) break;
        }
        // A store whose wait keeps returning at once while nothing is claimable (e.g. a due
        // event held back behind a leased one of its key) must not make this loop spin.
        if (futile_wakeups >= 3)
          sleep_for(Duration{std::min<std::int64_t>(futile_wakeups - 2, 10)});
        if (idle_wait())
          ++futile_wakeups;
        else
          futile_wakeups = 0;
      } catch (const std::exception& ex) {
        store_error(std::string("store wait failed (backing off): ") + ex.what());
        sleep_for(next_error_backoff());
      } catch (...) {
        store_error("store wait failed with an unknown exception (backing off)");
        sleep_for(next_error_backoff());
      }
    }
    try {
      sink.close();
    } catch (const std::exception& ex) {
      report(std::string("sink close failed: ") + ex.what());
    } catch (...) {
      report("sink close failed with an unknown exception");
    }
  }

  void stop() {
    stopping.store(true, std::memory_order_release);
    {
      std::lock_guard lock(sleep_mu);  // pairs with sleep_for's predicate check
    }
    sleep_cv.notify_all();
    try {
      store.interrupt();
    } catch (...) {  // the chunked idle wait notices the flag anyway
    }
  }

  RelayCounters snapshot() const {
    RelayCounters c;
    c.batches = batches.load(std::memory_order_relaxed);
    c.claimed = claimed.load(std::memory_order_relaxed);
    c.delivered = delivered.load(std::memory_order_relaxed);
    c.failed = failed.load(std::memory_order_relaxed);
    c.dead = dead.load(std::memory_order_relaxed);
    c.released = released.load(std::memory_order_relaxed);
    c.lease_lost = lease_lost.load(std::memory_order_relaxed);
    c.store_errors = store_errors.load(std::memory_order_relaxed);
    return c;
  }

  Store& store;
  Sink& sink;
  const RelayOptions options;

  std::atomic<bool> stopping{false};
  std::mutex sleep_mu;
  std::condition_variable sleep_cv;
  Duration error_backoff{0};  // relay thread only
  int futile_wakeups = 0;     // relay thread only: early wake-ups in a row that found nothing

  // Reused across batches (relay thread only) so the hot path does not allocate per batch.
  std::vector<EventId> ack_ids, release_ids;
  std::vector<Nack> nacks;

  std::atomic<std::uint64_t> batches{0}, claimed{0}, delivered{0}, failed{0}, dead{0}, released{0},
      lease_lost{0}, store_errors{0};

  relay_detail::LeaseKeeper keeper;  // last: its thread reports through the members above
};

Relay::Relay(Store& store, Sink& sink, RelayOptions options)
    : impl_(std::make_unique<Impl>(store, sink, std::move(options))) {}

Relay::~Relay() = default;

void Relay::run() {
  impl_->run();
}
std::size_t Relay::run_once() {
  return impl_->cycle();
}
void Relay::stop() {
  impl_->stop();
}
RelayCounters Relay::counters() const {
  return impl_->snapshot();
}
const RelayOptions& Relay::options() const {
  return impl_->options;
}

}  // namespace outpost
