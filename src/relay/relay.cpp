// The relay loop. Per batch: one claim, one deliver, then at most one ack, one nack and one
// release call (each one round trip on every store); pipelined (the default), the settling of
// one batch and the claim of the next are one Store::settle_and_claim call, made while the sink
// delivers the batch in between. Per-event work is a few vector pushes into buffers reused
// across batches.

#include "outpost/relay.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "batch.h"
#include "delivery_thread.h"
#include "guarded.h"
#include "lease_deadline.h"
#include "lease_keeper.h"
#include "pipeline_mode.h"
#include "sink_pause.h"

namespace outpost {
namespace {

constexpr Duration kErrorBackoffFirst{50};
constexpr Duration kErrorBackoffMax{5'000};
constexpr int kSettleTries = 4;            // an ack/nack/release is tried this many times
constexpr int kSettleTriesStopping = 2;    // ... while stopping (see settle_call)
constexpr Duration kSettleRetryFirst{50};  // then 100, 200 ms: bounded, also while stopping
constexpr Duration kIdleWaitChunk{200};    // bounds the stop() vs wait_for_work() race
// While stopping, a combined settle-and-claim that failed after this long means a store that
// does not answer (each further try would cost as long): the stop's other settle calls are
// skipped. One that failed sooner (a dropped connection) still gets the separate tries.
constexpr Duration kStoreHungAfter{1'000};

using SteadyClock = std::chrono::steady_clock;

void validate(const RelayOptions& o) {
  if (o.batch_size < 1) throw ConfigError("relay batch size must be at least 1");
  if (o.lease.count() < 3) throw ConfigError("relay lease must be at least 3 ms");
  if (o.max_attempts < 1) throw ConfigError("relay max attempts must be at least 1");
  if (o.max_crashes < 1) throw ConfigError("relay max crashes must be at least 1");
  if (o.backoff_base.count() < 0) throw ConfigError("relay backoff base must not be negative");
  if (o.backoff_max.count() < 0) throw ConfigError("relay backoff max must not be negative");
  if (o.poll_interval.count() < 1) throw ConfigError("relay poll interval must be at least 1 ms");
  if (o.drain_timeout.count() < 0) throw ConfigError("relay drain timeout must not be negative");
  if (o.deliver_timeout.count() < 0)
    throw ConfigError("relay deliver timeout must not be negative");
}

using relay_detail::Batch;
using relay_detail::failure_of;

}  // namespace

struct Relay::Impl {
  Impl(Store& s, Sink& k, RelayOptions o)
      : store(s),
        sink(k),
        options((validate(o), std::move(o))),
        keeper(
            s, options.lease, [this](const std::string& m) { store_error(m); },
            [this](const ClaimedBatch& b, SteadyClock::time_point started, Duration lease) {
              deadlines.renewed(slots, b, started, lease);
            }) {}

  // ---- reporting -------------------------------------------------------------------------
  void report(const std::string& message) {
    if (options.on_error) failure_of([&] { options.on_error(message); });  // must not throw
  }

  void store_error(const std::string& message) {
    store_errors.fetch_add(1, std::memory_order_relaxed);
    report(message);
  }

  void delivery_error(const std::string& message, const StoredEvent& e) {
    if (options.on_delivery_error)
      failure_of([&] { options.on_delivery_error(message, e); });  // must not throw
    else
      report(message);
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
  // expiry will redeliver those events (a bounded duplicate). While stopping, a store that
  // hangs would make every try cost a whole store timeout (PostgreSQL/Redis timeout_ms, then
  // connect_timeout per reconnect), and a stop settles up to three batches: so fewer tries, and
  // once a settle call gave up, the later ones of this stop are not tried at all.
  // `tries`: 0 for the usual few (fewer while stopping); a held settlement is tried once a round.
  template <typename F>
  std::optional<std::size_t> settle_call(const char* what, std::size_t count, F&& call,
                                         bool& retried, int tries = 0) {
    const bool stopping_now = stopping.load(std::memory_order_acquire);
    if (stopping_now && store_failed_while_stopping) {
      report(std::string(what) + " of " + std::to_string(count) +
             " events not tried: the store failed while stopping (the lease expiry will "
             "redeliver them)");
      return std::nullopt;
    }
    if (stopping_now)
      tries = kSettleTriesStopping;
    else if (tries <= 0)
      tries = kSettleTries;
    Duration wait = kSettleRetryFirst;
    for (int attempt = 1;; ++attempt) {
      std::size_t done = 0;
      auto failure = failure_of([&] { done = call(); });
      if (!failure) return done;
      const char* next = attempt < tries ? " (retrying): "
                         : stopping_now  ? " (giving up; the lease expiry will redeliver them): "
                                         : " (kept: retried with backoff before anything new is "
                                           "claimed): ";
      store_error(std::string(what) + " of " + std::to_string(count) + " events failed" + next +
                  *failure);
      if (attempt >= tries) {
        if (stopping.load(std::memory_order_acquire)) store_failed_while_stopping = true;
        return std::nullopt;
      }
      retried = true;
      std::this_thread::sleep_for(wait);  // not cut short by stop(): settling is part of draining
      wait *= 2;
    }
  }

  // ---- one batch (the pure rules are in batch.{h,cpp}) ------------------------------------
  // After a claim that started at `claim_started`: counts it, dead-letters events that crashed
  // relays too often (relay_detail::prepare) and sets the batch's lease deadline.
  void prepare(Batch& b, SteadyClock::time_point claim_started) {
    relay_detail::prepare(
        b, options.max_crashes,
        [this](const std::string& m, const StoredEvent& e) { delivery_error(m, e); });
    deadlines.claimed(b, claim_started);
    if (b.empty()) return;
    batches.fetch_add(1, std::memory_order_relaxed);
    claimed.fetch_add(b.claimed.events.size(), std::memory_order_relaxed);
  }

  // Runs the sink on the batch's events (on whichever thread calls it), bounded by the
  // deliver timeout and the stop; never throws.
  // A batch whose lease deadline passed before its delivery could start (the process was
  // paused, e.g. SIGSTOP, a VM pause, swapping) is not delivered at all: another relay may hold
  // its events now (docs/relay.md, "The lease deadline").
  void deliver(Batch& b) {
    auto events = b.to_deliver();
    if (events.empty()) return;
    const SteadyClock::time_point call_deadline = deadlines.begin_delivery(b, SteadyClock::now());
    if (b.lease_ran_out) {
      b.results.assign(events.size(),
                       DeliveryResult::skipped("not started: the lease deadline had passed"));
      return;
    }
    keeper.renew_until(b.claimed, call_deadline);
    auto failure = failure_of([&] { b.results = sink.deliver_bounded(events, control); });
    deadlines.end_delivery();
    if (failure) b.results.assign(events.size(), DeliveryResult::failed(*failure));
    if (std::string why = sink.closed(); !why.empty()) {
      // The destination is gone for good: stop; decide() releases what was not delivered.
      {
        std::lock_guard lock(sleep_mu);
        sink_closed = std::move(why);
      }
      stop(true);
    }
  }

  // After the delivery of `b` (started == a delivery ran): unless its lease was lost meanwhile,
  // turns the sink's results into acks, nacks and releases (relay_detail::decide).
  // Then notes what the results say about the sink (note_sink_state).
  void finish_delivery(Batch& b, bool started) {
    if (!still_leased(b) || !started) return;
    relay_detail::decide(
        b,
        {.max_attempts = options.max_attempts,
         .backoff_base = options.backoff_base,
         .backoff_max = options.backoff_max,
         .sink_name = sink.name(),
         .stopping = stopping.load(std::memory_order_acquire)},
        [this](const std::string& m, const StoredEvent& e) { delivery_error(m, e); });
    if (b.lease_ran_out) {
      lease_expired_undelivered.fetch_add(1, std::memory_order_relaxed);
      report("a batch of " + std::to_string(b.to_deliver().size()) +
             " events was not delivered: its lease deadline had passed before the delivery could "
             "start (the relay was paused or starved); released, claiming afresh");
      return;
    }
    note_sink_state(b);
  }

  // ---- the sink's pause (docs/relay.md, "Pauses"; the decisions are in sink_pause.{h,cpp}) -----
  bool sink_is_down() const { return pause.down(); }

  // After a delivered batch: the sink went down or came back (SinkPause::on_batch) is reported.
  void note_sink_state(const Batch& b) {
    if (auto change = pause.on_batch(b, sink.name())) sink_state(change->message, change->down);
  }

  void sink_state(const std::string& message, bool down) {
    if (options.on_sink_state)
      failure_of([&] { options.on_sink_state(message, down); });  // must not throw
    else
      report(message);
  }

  // While the sink is down: waits out the probe backoff (stop() cuts it short), then delivers one
  // event (cycle(1)), which brings the sink back or sets the next wait. false: run() returns
  // (until_empty and nothing left).
  bool probe() {
    sleep_for(pause.probe_wait());
    if (stopping.load(std::memory_order_acquire)) return true;
    pause.count_probe();
    std::size_t n = 0;
    const bool claimed = claim_or_back_off([&] { n = cycle(1); });
    slots[0].claimed = ClaimedBatch{};  // settled by cycle(); the loops start from empty slots
    if (!claimed) return true;
    if (n == 0 && !stopping.load(std::memory_order_acquire)) return wait_when_idle();
    return true;
  }

  // The one claim -> deliver -> decide path after a claim (the caller settles): delivers on this
  // thread unless every event was dead-lettered unseen.
  void deliver_and_decide(Batch& b) {
    const bool started = !b.to_deliver().empty();
    if (started) deliver(b);
    finish_delivery(b, started);
  }

  // After delivery: false when the lease was lost meanwhile (the batch is abandoned; its new
  // owner delivers it, and our acks would be fenced anyway).
  bool still_leased(Batch& slot) {
    if (keeper.disarm(slot.claimed)) return true;
    slot.abandoned = true;
    lease_lost.fetch_add(1, std::memory_order_relaxed);
    report("lease lost while delivering a batch of " + std::to_string(slot.claimed.events.size()) +
           " events: the batch is abandoned (its new owner delivers it)");
    return false;
  }

  void note_fenced(const Batch& slot) {
    lease_lost.fetch_add(1, std::memory_order_relaxed);
    report("some events of a batch of " + std::to_string(slot.claimed.events.size()) +
           " were no longer leased by this relay when settled (lease expired)");
  }

  void count_settled(const Batch& slot, bool fenced) {
    if (fenced) note_fenced(slot);
    delivered.fetch_add(slot.acks.size(), std::memory_order_relaxed);
    failed.fetch_add(slot.n_failed, std::memory_order_relaxed);
    dead.fetch_add(slot.n_dead, std::memory_order_relaxed);
    released.fetch_add(slot.releases.size(), std::memory_order_relaxed);
  }

  // Settles with the separate calls, each retried a few times. Each kind is counted and cleared
  // once recorded; what the store still refuses is left in the batch: true when nothing is.
  bool settle_parts(Batch& slot, int tries = 0) {
    bool fenced = false;
    bool& retried = slot.settle_retried;
    if (!slot.acks.empty()) {
      auto done = settle_call(
          "ack", slot.acks.size(), [&] { return store.ack(slot.claimed, slot.acks); }, retried,
          tries);
      if (done) {
        fenced |= *done < slot.acks.size();
        delivered.fetch_add(slot.acks.size(), std::memory_order_relaxed);
        slot.acks.clear();
      }
    }
    if (!slot.nacks.empty()) {
      auto done = settle_call(
          "nack", slot.nacks.size(), [&] { return store.nack(slot.claimed, slot.nacks); }, retried,
          tries);
      if (done) {
        fenced |= *done < slot.nacks.size();
        failed.fetch_add(slot.n_failed, std::memory_order_relaxed);
        dead.fetch_add(slot.n_dead, std::memory_order_relaxed);
        slot.n_failed = slot.n_dead = 0;
        slot.nacks.clear();
      }
    }
    if (!slot.releases.empty()) {
      auto done = settle_call(
          "release", slot.releases.size(),
          [&] { return store.release(slot.claimed, slot.releases); }, retried, tries);
      if (done) {
        fenced |= *done < slot.releases.size();
        released.fetch_add(slot.releases.size(), std::memory_order_relaxed);
        slot.releases.clear();
      }
    }
    // After a retried call a short count may just mean the first try did take effect.
    if (fenced && !retried) note_fenced(slot);
    return slot.settlement().empty();
  }

  // Settles `slot`. What the store refuses even after the retries (a full disk, a database that
  // is down) is kept and retried with backoff before anything new is claimed (drain_held), not
  // dropped: dropping it would deliver those events again after their lease, once per lease, for
  // as long as the store refuses writes (docs/relay.md, "Crash counting"). While stopping it is
  // given up: the lease expiry redelivers those events.
  void settle(Batch& slot) {
    if (slot.abandoned) return;
    if (settle_parts(slot) || stopping.load(std::memory_order_acquire)) return;
    held.push_back(std::move(slot));
    slot = Batch{};
  }

  // Retries the held settlements, one try each per round with the error backoff between rounds,
  // until all are recorded or the relay stops.
  void drain_held() {
    while (!held.empty() && !stopping.load(std::memory_order_acquire)) {
      sleep_for(next_error_backoff());
      if (stopping.load(std::memory_order_acquire)) break;
      retry_held(1);
    }
    if (held.empty()) error_backoff = Duration{0};
  }
  void retry_held(int tries) {
    std::erase_if(held, [&](Batch& b) { return settle_parts(b, tries); });
  }

  // Settles `done` and claims the next batch into `next` in one store call. If that call
  // fails, settles with the separate (retried) calls and leaves `next` empty; the caller's
  // next plain claim backs off if the store is still failing.
  void settle_and_claim(Batch& done, Batch& next) {
    if (!held.empty()) {  // the store refused a settlement: record it before claiming more
      settle(done);
      next.claimed = ClaimedBatch{};
      prepare(next, SteadyClock::now());
      return;
    }
    if (done.abandoned || done.settlement().empty()) {
      if (!done.abandoned) count_settled(done, false);
      prefetch(next);
      return;
    }
    SettleCounts counts;
    const auto started = SteadyClock::now();
    auto failure = failure_of([&] {
      next.claimed = store.settle_and_claim(done.claimed, done.settlement(), counts,
                                            options.batch_size, options.lease, options.order);
    });
    if (failure) {
      if (stopping.load(std::memory_order_acquire) &&
          SteadyClock::now() - started >= kStoreHungAfter)
        store_failed_while_stopping = true;
      store_error("settle and claim failed (settling again on its own): " + *failure);
      next.claimed = ClaimedBatch{};
      prepare(next, started);
      settle(done);
      return;
    }
    prepare(next, started);
    bool fenced = counts.acked < done.acks.size() || counts.nacked < done.nacks.size() ||
                  counts.released < done.releases.size();
    count_settled(done, fenced);
  }

  // ---- one cycle, no pipelining (run_once) --------------------------------------------------
  // Claims at most `max` events (the probe of a sink that is down: 1). A settlement the store
  // refused before is tried once first; while it is still refused nothing is claimed (0).
  std::size_t cycle(std::size_t max) {
    if (!held.empty()) {
      retry_held(1);
      if (!held.empty()) return 0;
    }
    Batch& b = slots[0];
    const auto started = SteadyClock::now();
    b.claimed = store.claim(max, options.lease, options.order);
    prepare(b, started);
    if (b.empty()) return 0;
    const std::size_t n = b.claimed.events.size();
    if (!b.to_deliver().empty()) keeper.arm(b.claimed);  // renewed while the sink works
    deliver_and_decide(b);
    settle(b);
    return n;
  }
  std::size_t run_once() { return cycle(sink_is_down() ? 1 : options.batch_size); }

  // ---- the pipelined loop -----------------------------------------------------------------
  // Steady state, with batches x (delivered), y (being delivered) and z (claimed):
  //   relay thread:    wait for y ... | settle x + claim z | wait for y | ...
  //   delivery thread: deliver y .................................... | deliver z ...
  // So the store's round trips overlap the sink's. Per-key order holds: z is claimed while y is
  // still leased, so z holds no key of y (ordered claims skip keys in flight), and x is settled
  // before anything after it of its keys can be claimed.
  // Hands `slot` (claimed, its lease already kept) to the delivery thread. Returns whether a
  // delivery was started (not when every event was dead-lettered unseen).
  bool start_delivery(Batch& slot) {
    if (slot.to_deliver().empty()) return false;
    delivery.start(slot);
    return true;
  }

  // Claims into `slot` and keeps its lease; a failing claim is reported, the slot left empty.
  // Claims nothing while a settlement the store refused is held.
  void prefetch(Batch& slot) {
    slot.claimed = ClaimedBatch{};
    const auto started = SteadyClock::now();
    if (held.empty())
      if (auto failure = failure_of([&] {
            slot.claimed = store.claim(options.batch_size, options.lease, options.order);
          }))
        store_error("claim failed: " + *failure);
    prepare(slot, started);
  }

  // Gives a claimed batch that will not be delivered (the relay is stopping) back to the store
  // without counting the attempt.
  void give_back(Batch& slot) {
    keeper.disarm(slot.claimed);
    slot.acks.clear();
    slot.releases.clear();
    for (const auto& e : slot.to_deliver()) slot.releases.push_back(e.id);
    // slot.nacks keeps the unseen dead-letters decided in prepare().
    settle(slot);
    slot.claimed = ClaimedBatch{};
  }

  // Runs a step that claims; if it throws, reports it and backs off. false: it failed.
  template <typename F>
  bool claim_or_back_off(F&& step) {
    auto failure = failure_of(step);
    if (!failure) {
      error_backoff = Duration{0};
      return true;
    }
    store_error("claim failed (backing off): " + *failure);
    sleep_for(next_error_backoff());
    return false;
  }

  void pipelined_run() {
    // Roles rotate over the three slots: `settling` was delivered and is not settled yet,
    // `delivering` is handed to the sink, `claimed` receives the batch after it.
    Batch* settling = &slots[0];
    Batch* delivering = &slots[1];
    Batch* claimed_next = &slots[2];
    for (Batch& s : slots) s.claimed = ClaimedBatch{};
    bool found_nothing = false;  // the last claim came back empty: wait before claiming again
    while (!stopping.load(std::memory_order_acquire)) {
      // Every slot is empty here when the sink is down or a settlement is held (see below).
      if (sink_is_down()) {
        if (!probe()) break;
        continue;
      }
      if (!held.empty() && delivering->claimed.empty()) {
        if (!settling->claimed.empty()) {
          settle(*settling);
          settling->claimed = ClaimedBatch{};
        }
        drain_held();
        continue;
      }
      if (delivering->claimed.empty()) {
        if (!found_nothing && !claim_or_back_off([&] {
              const auto started = SteadyClock::now();
              delivering->claimed = store.claim(options.batch_size, options.lease, options.order);
              prepare(*delivering, started);
            }))
          continue;
        if (delivering->claimed.empty()) {
          found_nothing = false;
          if (!wait_when_idle()) break;
          continue;
        }
        keeper.arm(delivering->claimed);
      }
      found_nothing = false;
      futile_wakeups = 0;

      const bool ahead =
          mode.claim_ahead(delivering->claimed.events.size() == options.batch_size) &&
          !stopping.load(std::memory_order_acquire);
      if (ahead) {
        // The sink works on its own thread while this one settles the previous batch and
        // claims the next.
        const bool started = start_delivery(*delivering);
        if (!settling->claimed.empty()) {
          settle_and_claim(*settling, *claimed_next);
          settling->claimed = ClaimedBatch{};
        } else {
          prefetch(*claimed_next);
        }
        if (options.order == ClaimOrder::ordered &&
            claimed_next->claimed.events.size() < options.batch_size / 2)
          mode.ahead_found_little();
        if (!claimed_next->claimed.empty()) keeper.arm(claimed_next->claimed);
        if (started) delivery.wait();
        finish_delivery(*delivering, started);
      } else {
        // Claiming after the delivery: deliver on this thread (no hand-off to wait for).
        if (!settling->claimed.empty()) {
          settle(*settling);  // only when switching from claiming ahead
          settling->claimed = ClaimedBatch{};
        }
        deliver_and_decide(*delivering);
      }
      mode.batch_done(delivering->claimed.events.size(),
                      delivering->claimed.events.size() == options.batch_size);
      if (sink_is_down()) {
        // Paused (docs/relay.md, "Pauses"): settle what was delivered and give back what was
        // claimed ahead (no attempt counted); the loop probes from an empty hand.
        settle(*delivering);
        delivering->claimed = ClaimedBatch{};
        if (!claimed_next->claimed.empty()) give_back(*claimed_next);
        continue;
      }

      Batch* free_slot = settling;
      settling = delivering;
      delivering = claimed_next;
      claimed_next = free_slot;
      if (delivering->claimed.empty() && !stopping.load(std::memory_order_acquire)) {
        // Nothing was claimed meanwhile: settle and look again in one call.
        settle_and_claim(*settling, *delivering);
        settling->claimed = ClaimedBatch{};
        if (!delivering->claimed.empty()) keeper.arm(delivering->claimed);
        found_nothing = delivering->claimed.empty();
      }
    }
    // Stopping: settle what was delivered, give back what was claimed but not delivered.
    if (!settling->claimed.empty()) settle(*settling);
    if (!delivering->claimed.empty()) give_back(*delivering);
  }

  // Stopping with settlements the store refused: one more (stopping) try each, then they are
  // given up; the lease expiry redelivers those events.
  void abandon_held() {
    if (held.empty()) return;
    retry_held(0);
    held.clear();
  }

  // Idle: returns false when run() should return (until_empty and nothing left).
  bool wait_when_idle() {
    if (stopping.load(std::memory_order_acquire)) return true;
    bool empty = false;
    auto failure = failure_of([&] {
      if (options.until_empty) {
        StoreStats s = store.stats();
        if ((empty = s.pending + s.leased == 0)) return;
      }
      // A store whose wait keeps returning at once while nothing is claimable (e.g. a due
      // event held back behind a leased one of its key) must not make this loop spin.
      if (futile_wakeups >= 3) sleep_for(Duration{std::min<std::int64_t>(futile_wakeups - 2, 10)});
      if (idle_wait())
        ++futile_wakeups;
      else
        futile_wakeups = 0;
    });
    if (failure) {
      store_error("store wait failed (backing off): " + *failure);
      sleep_for(next_error_backoff());
    }
    return !empty;
  }

  void sequential_run() {
    while (!stopping.load(std::memory_order_acquire)) {
      if (sink_is_down()) {
        if (!probe()) break;
        continue;
      }
      if (!held.empty()) {
        drain_held();
        continue;
      }
      std::size_t n = 0;
      if (!claim_or_back_off([&] { n = cycle(options.batch_size); })) continue;
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
    abandon_held();
    if (auto failure = failure_of([&] { sink.close(); })) report("sink close failed: " + *failure);
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
    else if (options.drain_timeout.count() > 0 &&
             options.drain_timeout < std::chrono::hours(24 * 366))
      control.stop(at + options.drain_timeout);
    else
      control.stop();  // deliveries in flight end by their own timeouts
    stopping.store(true, std::memory_order_release);
    {
      std::lock_guard lock(sleep_mu);  // pairs with sleep_for's predicate check
    }
    sleep_cv.notify_all();
    failure_of([&] { store.interrupt(); });  // if it fails, the chunked idle wait notices
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
    pause.fill_counters(c);
    c.lease_expired_undelivered = lease_expired_undelivered.load(std::memory_order_relaxed);
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
  std::string sink_closed;    // guarded by sleep_mu: Sink::closed() once it said so
  Duration error_backoff{0};  // relay thread only
  int futile_wakeups = 0;     // relay thread only: early wake-ups in a row that found nothing
  bool store_failed_while_stopping = false;  // relay thread only: see settle_call
  relay_detail::PipelineMode mode;           // relay thread only
  DeliveryControl control;                   // bounds the deliver() call in progress; set by stop()
  // The batches' lease deadlines and the control's deadline set from them.
  relay_detail::LeaseDeadlines deadlines{control, options.lease, deliver_timeout};
  // Settlements the store refused (settle); relay thread only.
  std::vector<Batch> held;
  // The sink's pause; its counters are read by counters().
  relay_detail::SinkPause pause{options.backoff_max};

  // Relay thread only (the delivery thread touches the one it was handed); reused across batches
  // so the hot path does not allocate per batch.
  Batch slots[3];

  std::atomic<std::uint64_t> batches{0}, claimed{0}, delivered{0}, failed{0}, dead{0}, released{0},
      lease_lost{0}, store_errors{0}, lease_expired_undelivered{0};

  relay_detail::LeaseKeeper keeper;  // its thread reports through the members above
  // Last: destroyed (joined) first.
  relay_detail::DeliveryThread delivery{[this](Batch& b) { deliver(b); }};
};

Relay::Relay(Store& store, Sink& sink, RelayOptions options)
    : impl_(std::make_unique<Impl>(store, sink, std::move(options))) {}

Relay::~Relay() = default;

void Relay::run() {
  impl_->run();
}
std::size_t Relay::run_once() {
  return impl_->run_once();
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
