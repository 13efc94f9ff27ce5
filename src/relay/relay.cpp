// The relay loop. Per batch: one claim, one deliver, then at most one ack, one nack and one
// release call (each one round trip on every store); pipelined (the default), the settling of
// one batch and the claim of the next are one Store::settle_and_claim call, made while the sink
// delivers the batch in between. Per-event work is a few vector pushes into buffers reused
// across batches.

#include "outpost/relay.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "lease_keeper.h"
#include "pipeline_mode.h"

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
  if (o.drain_timeout.count() < 0) throw ConfigError("relay drain timeout must not be negative");
  if (o.deliver_timeout.count() < 0)
    throw ConfigError("relay deliver timeout must not be negative");
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
  std::optional<std::size_t> settle_call(const char* what, std::size_t count, F&& call,
                                         bool& retried) {
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

  // ---- one batch -------------------------------------------------------------------------
  // A claimed batch on its way through the relay: what is delivered, and what the relay
  // decided for each event. Three of these exist (being settled, being delivered, claimed
  // ahead), so one batch can be delivered while the store settles the previous one and claims
  // the next (pipelining); buffers are reused across batches.
  struct Slot {
    ClaimedBatch batch;
    std::vector<StoredEvent> subset;  // events to deliver when some were dead-lettered unseen
    bool use_subset = false;
    std::vector<DeliveryResult> results;
    std::vector<EventId> acks, releases;
    std::vector<Nack> nacks;
    std::uint64_t n_failed = 0, n_dead = 0;
    bool abandoned = false;  // the lease was lost while delivering: settle nothing

    std::span<const StoredEvent> to_deliver() const {
      return use_subset ? std::span<const StoredEvent>(subset)
                        : std::span<const StoredEvent>(batch.events);
    }
    Settlement settlement() const { return Settlement{acks, nacks, releases}; }
  };

  // Counts a fresh claim and dead-letters events whose lease expired more often than
  // max_attempts (their relay died or hung while delivering them) without trying them again.
  void prepare(Slot& slot) {
    slot.use_subset = false;
    slot.subset.clear();
    slot.results.clear();
    slot.acks.clear();
    slot.nacks.clear();
    slot.releases.clear();
    slot.n_failed = slot.n_dead = 0;
    slot.abandoned = false;
    if (slot.batch.empty()) return;
    batches.fetch_add(1, std::memory_order_relaxed);
    claimed.fetch_add(slot.batch.events.size(), std::memory_order_relaxed);
    bool over =
        std::any_of(slot.batch.events.begin(), slot.batch.events.end(),
                    [&](const StoredEvent& e) { return e.attempts > options.max_attempts; });
    if (!over) return;
    slot.use_subset = true;
    for (const auto& e : slot.batch.events) {
      if (e.attempts <= options.max_attempts) {
        slot.subset.push_back(e);
        continue;
      }
      std::string why = "gave up after " + std::to_string(e.attempts - 1) + " attempts (max " +
                        std::to_string(options.max_attempts) +
                        "): its lease expired while it was being delivered (the relay died or "
                        "hung)";
      delivery_error(describe(e) + " dead-lettered: " + why, e);
      slot.nacks.push_back(Nack{e.id, std::move(why), std::nullopt});
      ++slot.n_dead;
    }
  }

  // Runs the sink on the slot's events (on whichever thread calls it); never throws.
  void deliver(Slot& slot) {
    auto events = slot.to_deliver();
    if (events.empty()) return;
    try {
      const auto now = DeliveryControl::Clock::now();
      control.begin(deliver_timeout, now);
      keeper.renew_until(slot.batch, now + deliver_timeout);
      slot.results = sink.deliver_bounded(events, control);
      if (std::string why = sink.closed(); !why.empty()) {
        // The destination is gone for good: stop; decide() releases what was not delivered.
        {
          std::lock_guard lock(sleep_mu);
          sink_closed = std::move(why);
        }
        stop(true);
      }
    } catch (const std::exception& ex) {
      slot.results.assign(events.size(), DeliveryResult::failed(ex.what()));
    } catch (...) {
      slot.results.assign(events.size(),
                          DeliveryResult::failed("sink threw a non-standard exception"));
    }
  }

  // Turns the sink's results into acks, nacks (with backoff or dead) and releases.
  void decide(Slot& slot) {
    auto events = slot.to_deliver();
    if (events.empty()) return;
    if (slot.results.size() != events.size()) {
      std::string why = "sink '" + std::string(sink.name()) + "' returned " +
                        std::to_string(slot.results.size()) + " results for " +
                        std::to_string(events.size()) + " events";
      slot.results.assign(events.size(), DeliveryResult::failed(why));
    }
    for (std::size_t i = 0; i < events.size(); ++i) {
      const StoredEvent& e = events[i];
      DeliveryResult& r = slot.results[i];
      switch (r.status) {
        case DeliveryResult::Status::delivered:
          slot.acks.push_back(e.id);
          break;
        case DeliveryResult::Status::skipped:
          slot.releases.push_back(e.id);
          break;
        case DeliveryResult::Status::failed: {
          if (stopping.load(std::memory_order_acquire)) {
            // Cut short by the stop (a request given up, or timing out while draining): not
            // this event's fault, so no attempt is counted (docs/relay.md).
            slot.releases.push_back(e.id);
            break;
          }
          ++slot.n_failed;
          std::optional<Duration> retry_in;
          std::string note;
          if (e.attempts < options.max_attempts) {
            retry_in = backoff_delay(e.attempts, options.backoff_base, options.backoff_max);
            note = "; retry in " + std::to_string(retry_in->count()) + " ms";
          } else {
            ++slot.n_dead;
            note = "; dead-lettered";
          }
          delivery_error(describe(e) + " attempt " + std::to_string(e.attempts) + "/" +
                             std::to_string(options.max_attempts) + " failed: " + r.error + note,
                         e);
          slot.nacks.push_back(Nack{e.id, std::move(r.error), retry_in});
          break;
        }
      }
    }
  }

  // After delivery: false when the lease was lost meanwhile (the batch is abandoned; its new
  // owner delivers it, and our acks would be fenced anyway).
  bool still_leased(Slot& slot) {
    if (keeper.disarm(slot.batch)) return true;
    slot.abandoned = true;
    lease_lost.fetch_add(1, std::memory_order_relaxed);
    report("lease lost while delivering a batch of " + std::to_string(slot.batch.events.size()) +
           " events: the batch is abandoned (its new owner delivers it)");
    return false;
  }

  void count_settled(const Slot& slot, bool fenced) {
    if (fenced) {
      lease_lost.fetch_add(1, std::memory_order_relaxed);
      report("some events of a batch of " + std::to_string(slot.batch.events.size()) +
             " were no longer leased by this relay when settled (lease expired)");
    }
    delivered.fetch_add(slot.acks.size(), std::memory_order_relaxed);
    failed.fetch_add(slot.n_failed, std::memory_order_relaxed);
    dead.fetch_add(slot.n_dead, std::memory_order_relaxed);
    released.fetch_add(slot.releases.size(), std::memory_order_relaxed);
  }

  // Settles with the separate calls, each retried a few times.
  void settle(Slot& slot) {
    if (slot.abandoned) return;
    bool retried = false, fenced = false;
    if (!slot.acks.empty()) {
      auto done = settle_call(
          "ack", slot.acks.size(), [&] { return store.ack(slot.batch, slot.acks); }, retried);
      if (done && *done < slot.acks.size()) fenced = true;
    }
    if (!slot.nacks.empty()) {
      auto done = settle_call(
          "nack", slot.nacks.size(), [&] { return store.nack(slot.batch, slot.nacks); }, retried);
      if (done && *done < slot.nacks.size()) fenced = true;
    }
    if (!slot.releases.empty()) {
      auto done = settle_call(
          "release", slot.releases.size(), [&] { return store.release(slot.batch, slot.releases); },
          retried);
      if (done && *done < slot.releases.size()) fenced = true;
    }
    // After a retried call a short count may just mean the first try did take effect.
    count_settled(slot, fenced && !retried);
  }

  // Settles `done` and claims the next batch into `next` in one store call. If that call
  // fails, settles with the separate (retried) calls and leaves `next` empty; the caller's
  // next plain claim backs off if the store is still failing.
  void settle_and_claim(Slot& done, Slot& next) {
    if (done.abandoned || done.settlement().empty()) {
      if (!done.abandoned) count_settled(done, false);
      prefetch(next);
      return;
    }
    SettleCounts counts;
    try {
      next.batch = store.settle_and_claim(done.batch, done.settlement(), counts, options.batch_size,
                                          options.lease, options.order);
    } catch (const std::exception& ex) {
      store_error(std::string("settle and claim failed (settling again on its own): ") + ex.what());
      next.batch = ClaimedBatch{};
      prepare(next);
      settle(done);
      return;
    } catch (...) {
      store_error("settle and claim failed with an unknown exception (settling again)");
      next.batch = ClaimedBatch{};
      prepare(next);
      settle(done);
      return;
    }
    prepare(next);
    bool fenced = counts.acked < done.acks.size() || counts.nacked < done.nacks.size() ||
                  counts.released < done.releases.size();
    count_settled(done, fenced);
  }

  // ---- one cycle, no pipelining (run_once) --------------------------------------------------
  std::size_t cycle() {
    Slot& slot = slots[0];
    slot.batch = store.claim(options.batch_size, options.lease, options.order);
    prepare(slot);
    if (slot.batch.empty()) return 0;
    const std::size_t n = slot.batch.events.size();
    if (!slot.to_deliver().empty()) {
      keeper.arm(slot.batch);  // renewed while the sink works
      deliver(slot);
      if (!still_leased(slot)) return n;
      decide(slot);
    }
    settle(slot);
    return n;
  }

  // ---- the pipelined loop -----------------------------------------------------------------
  // Steady state, with batches x (delivered), y (being delivered) and z (claimed):
  //   relay thread:    wait for y ... | settle x + claim z | wait for y | ...
  //   delivery thread: deliver y .................................... | deliver z ...
  // So the store's round trips overlap the sink's. Per-key order holds: z is claimed while y is
  // still leased, so z holds no key of y (ordered claims skip keys in flight), and x is settled
  // before anything after it of its keys can be claimed.
  class DeliveryThread {
   public:
    explicit DeliveryThread(Impl& relay) : relay_(relay) {}
    ~DeliveryThread() {
      {
        std::lock_guard lock(mu_);
        quit_ = true;
      }
      cv_.notify_all();
      if (thread_.joinable()) thread_.join();
    }
    void start(Slot& slot) {
      std::lock_guard lock(mu_);
      job_ = &slot;
      done_ = false;
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
      cv_.notify_all();
    }
    void wait() {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return done_; });
    }

   private:
    void loop() {
      std::unique_lock lock(mu_);
      while (true) {
        cv_.wait(lock, [&] { return quit_ || job_ != nullptr; });
        if (!job_) return;  // quit with nothing to do
        Slot* slot = job_;
        lock.unlock();
        relay_.deliver(*slot);
        lock.lock();
        job_ = nullptr;
        done_ = true;
        cv_.notify_all();
        if (quit_) return;
      }
    }
    Impl& relay_;
    std::mutex mu_;
    std::condition_variable cv_;
    Slot* job_ = nullptr;  // guarded by mu_
    bool done_ = true;     // guarded by mu_
    bool quit_ = false;    // guarded by mu_
    std::thread thread_;
  };

  // Hands `slot` (claimed, its lease already kept) to the delivery thread. Returns whether a
  // delivery was started (not when every event was dead-lettered unseen).
  bool start_delivery(Slot& slot) {
    if (slot.to_deliver().empty()) return false;
    delivery.start(slot);
    return true;
  }

  // Claims into `slot` and keeps its lease; a failing claim is reported, the slot left empty.
  void prefetch(Slot& slot) {
    slot.batch = ClaimedBatch{};
    try {
      slot.batch = store.claim(options.batch_size, options.lease, options.order);
    } catch (const std::exception& ex) {
      store_error(std::string("claim failed: ") + ex.what());
    } catch (...) {
      store_error("claim failed with an unknown exception");
    }
    prepare(slot);
  }

  // Gives a claimed batch that will not be delivered (the relay is stopping) back to the store
  // without counting the attempt.
  void give_back(Slot& slot) {
    keeper.disarm(slot.batch);
    slot.acks.clear();
    slot.releases.clear();
    for (const auto& e : slot.to_deliver()) slot.releases.push_back(e.id);
    // slot.nacks keeps the unseen dead-letters decided in prepare().
    settle(slot);
    slot.batch = ClaimedBatch{};
  }

  // Runs a step that claims; if it throws, reports it and backs off. false: it failed.
  template <typename F>
  bool claim_or_back_off(F&& step) {
    try {
      step();
      error_backoff = Duration{0};
      return true;
    } catch (const std::exception& ex) {
      store_error(std::string("claim failed (backing off): ") + ex.what());
    } catch (...) {
      store_error("claim failed with an unknown exception (backing off)");
    }
    sleep_for(next_error_backoff());
    return false;
  }

  void pipelined_run() {
    // Roles rotate over the three slots: `settling` was delivered and is not settled yet,
    // `delivering` is handed to the sink, `claimed` receives the batch after it.
    Slot* settling = &slots[0];
    Slot* delivering = &slots[1];
    Slot* claimed_next = &slots[2];
    for (Slot& s : slots) s.batch = ClaimedBatch{};
    bool found_nothing = false;  // the last claim came back empty: wait before claiming again
    while (!stopping.load(std::memory_order_acquire)) {
      if (delivering->batch.empty()) {
        if (!found_nothing && !claim_or_back_off([&] {
              delivering->batch = store.claim(options.batch_size, options.lease, options.order);
              prepare(*delivering);
            }))
          continue;
        if (delivering->batch.empty()) {
          found_nothing = false;
          if (!wait_when_idle()) break;
          continue;
        }
        keeper.arm(delivering->batch);
      }
      found_nothing = false;
      futile_wakeups = 0;

      const bool ahead = mode.claim_ahead(delivering->batch.events.size() == options.batch_size) &&
                         !stopping.load(std::memory_order_acquire);
      bool started = false;
      if (ahead) {
        // The sink works on its own thread while this one settles the previous batch and
        // claims the next.
        started = start_delivery(*delivering);
        if (!settling->batch.empty()) {
          settle_and_claim(*settling, *claimed_next);
          settling->batch = ClaimedBatch{};
        } else {
          prefetch(*claimed_next);
        }
        if (options.order == ClaimOrder::ordered &&
            claimed_next->batch.events.size() < options.batch_size / 2)
          mode.ahead_found_little();
        if (!claimed_next->batch.empty()) keeper.arm(claimed_next->batch);
        if (started) delivery.wait();
      } else {
        // Claiming after the delivery: deliver on this thread (no hand-off to wait for).
        if (!settling->batch.empty()) {
          settle(*settling);  // only when switching from claiming ahead
          settling->batch = ClaimedBatch{};
        }
        if (!delivering->to_deliver().empty()) {
          deliver(*delivering);
          started = true;
        }
      }
      if (still_leased(*delivering) && started) decide(*delivering);
      mode.batch_done(delivering->batch.events.size(),
                      delivering->batch.events.size() == options.batch_size);

      Slot* free_slot = settling;
      settling = delivering;
      delivering = claimed_next;
      claimed_next = free_slot;
      if (delivering->batch.empty() && !stopping.load(std::memory_order_acquire)) {
        // Nothing was claimed meanwhile: settle and look again in one call.
        settle_and_claim(*settling, *delivering);
        settling->batch = ClaimedBatch{};
        if (!delivering->batch.empty()) keeper.arm(delivering->batch);
        found_nothing = delivering->batch.empty();
      }
    }
    // Stopping: settle what was delivered, give back what was claimed but not delivered.
    if (!settling->batch.empty()) settle(*settling);
    if (!delivering->batch.empty()) give_back(*delivering);
  }

  // Idle: returns false when run() should return (until_empty and nothing left).
  bool wait_when_idle() {
    if (stopping.load(std::memory_order_acquire)) return true;
    try {
      if (options.until_empty) {
        StoreStats s = store.stats();
        if (s.pending + s.leased == 0) return false;
      }
      // A store whose wait keeps returning at once while nothing is claimable (e.g. a due
      // event held back behind a leased one of its key) must not make this loop spin.
      if (futile_wakeups >= 3) sleep_for(Duration{std::min<std::int64_t>(futile_wakeups - 2, 10)});
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
    return true;
  }

  void sequential_run() {
    while (!stopping.load(std::memory_order_acquire)) {
      std::size_t n = 0;
      if (!claim_or_back_off([&] { n = cycle(); })) continue;
      if (n > 0) futile_wakeups = 0;
      if (n > 0 || stopping.load(std::memory_order_acquire)) continue;
      if (!wait_when_idle()) break;
    }
  }

  void run() {
    if (options.pipeline)
      pipelined_run();
    else
      sequential_run();
    try {
      sink.close();
    } catch (const std::exception& ex) {
      report(std::string("sink close failed: ") + ex.what());
    } catch (...) {
      report("sink close failed with an unknown exception");
    }
    std::lock_guard lock(sleep_mu);
    if (!sink_closed.empty())
      throw ConnectionError(std::string(sink.name()),
                            "sink closed for good (" + sink_closed +
                                "): the relay stopped; the events it held were released");
  }

  void stop(bool now) {
    const auto at = DeliveryControl::Clock::now();
    if (now)
      control.stop(at);
    else if (options.drain_timeout.count() > 0)
      control.stop(at + options.drain_timeout);
    else
      control.stop();  // deliveries in flight end by their own timeouts
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
  // A deliver() call's deadline (deliver_timeout, the lease when 0).
  const Duration deliver_timeout =
      options.deliver_timeout.count() > 0 ? options.deliver_timeout : options.lease;

  std::atomic<bool> stopping{false};
  std::mutex sleep_mu;
  std::condition_variable sleep_cv;
  std::string sink_closed;          // guarded by sleep_mu: Sink::closed() once it said so
  Duration error_backoff{0};        // relay thread only
  int futile_wakeups = 0;           // relay thread only: early wake-ups in a row that found nothing
  relay_detail::PipelineMode mode;  // relay thread only
  DeliveryControl control;          // bounds the deliver() call in progress; set by stop()

  // Relay thread only (the delivery thread touches the one it was handed); reused across batches
  // so the hot path does not allocate per batch.
  Slot slots[3];

  std::atomic<std::uint64_t> batches{0}, claimed{0}, delivered{0}, failed{0}, dead{0}, released{0},
      lease_lost{0}, store_errors{0};

  relay_detail::LeaseKeeper keeper;  // its thread reports through the members above
  DeliveryThread delivery{*this};    // last: destroyed (joined) first
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
  impl_->stop(false);
}
void Relay::abort() {
  impl_->stop(true);
}
RelayCounters Relay::counters() const {
  return impl_->snapshot();
}
const RelayOptions& Relay::options() const {
  return impl_->options;
}

}  // namespace outpost
