// The relay's loops (Relay::Impl, relay_impl.h): claim, deliver, decide, one batch at a time
// (sequential, run_once) or pipelined over three batches, and the probe of a sink that is down
// (docs/relay.md, "Pauses"). The pure rules are in batch.{h,cpp} and sink_pause.{h,cpp}.

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "guarded.h"
#include "relay_impl.h"

namespace outpost {
namespace {

using relay_detail::failure_of;

}  // namespace

void Relay::Impl::prepare(Batch& b, SteadyClock::time_point claim_started) {
  relay_detail::prepare(b, options.max_crashes, [this](const std::string& m, const StoredEvent& e) {
    delivery_error(m, e);
  });
  deadlines.claimed(b, claim_started);
  if (b.empty()) return;
  batches.fetch_add(1, std::memory_order_relaxed);
  claimed.fetch_add(b.claimed.events.size(), std::memory_order_relaxed);
}

void Relay::Impl::deliver(Batch& b) {
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
  if (failure) b.results.assign(events.size(), DeliveryResult::failed(failure->text));
  if (std::string why = sink.closed(); !why.empty()) {
    // The destination is gone for good: stop; decide() releases what was not delivered.
    {
      std::lock_guard lock(sleep_mu);
      sink_closed = std::move(why);
    }
    stop(true);
  }
}

void Relay::Impl::finish_delivery(Batch& b, bool started) {
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

void Relay::Impl::note_sink_state(const Batch& b) {
  if (auto change = pause.on_batch(b, sink.name())) sink_state(change->message, change->down);
}

void Relay::Impl::sink_state(const std::string& message, bool down) {
  if (options.on_sink_state)
    failure_of([&] { options.on_sink_state(message, down); });  // must not throw
  else
    report(message);
}

bool Relay::Impl::probe() {
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

void Relay::Impl::deliver_and_decide(Batch& b) {
  const bool started = !b.to_deliver().empty();
  if (started) deliver(b);
  finish_delivery(b, started);
}

std::size_t Relay::Impl::cycle(std::size_t max) {
  if (!held.empty()) {
    retry_held(1);
    if (!held.empty()) return 0;
  }
  Batch& b = slots[0];
  const auto started = SteadyClock::now();
  b.claimed = store.claim(max, options.lease, options.order);
  store_answered();
  prepare(b, started);
  if (b.empty()) return 0;
  const std::size_t n = b.claimed.events.size();
  if (!b.to_deliver().empty()) keeper.arm(b.claimed);  // renewed while the sink works
  deliver_and_decide(b);
  settle(b);
  return n;
}

std::size_t Relay::Impl::run_once() {
  return cycle(sink_is_down() ? 1 : options.batch_size);
}

bool Relay::Impl::start_delivery(Batch& slot) {
  if (slot.to_deliver().empty()) return false;
  delivery.start(slot);
  return true;
}

void Relay::Impl::prefetch(Batch& slot) {
  slot.claimed = ClaimedBatch{};
  const auto started = SteadyClock::now();
  if (held.empty()) {
    auto failure = failure_of(
        [&] { slot.claimed = store.claim(options.batch_size, options.lease, options.order); });
    if (!failure) {
      store_answered();
    } else if (!stop_if_fatal("claim failed", *failure)) {
      store_failed();
      store_error("claim failed: " + failure->text);
    }
  }
  prepare(slot, started);
}

void Relay::Impl::give_back(Batch& slot) {
  keeper.disarm(slot.claimed);
  slot.acks.clear();
  slot.releases.clear();
  for (const auto& e : slot.to_deliver()) slot.releases.push_back(e.id);
  // slot.nacks keeps the unseen dead-letters decided in prepare().
  settle(slot);
  slot.claimed = ClaimedBatch{};
}

template <typename F>
bool Relay::Impl::claim_or_back_off(F&& step) {
  auto failure = failure_of(step);
  if (!failure) {
    error_backoff = Duration{0};
    return true;
  }
  if (stop_if_fatal("claim failed", *failure)) return false;
  store_failed();
  store_error("claim failed (backing off): " + failure->text);
  sleep_for(next_error_backoff());
  return false;
}

void Relay::Impl::pipelined_run() {
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
            store_answered();
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

    const bool ahead = mode.claim_ahead(delivering->claimed.events.size() == options.batch_size) &&
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
      if (options.order != ClaimOrder::unordered &&
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

// Under ClaimOrder::strict the events of a key behind a dead letter stay pending until an
// operator retries or discards it, so "nothing left" for --until-empty means: every pending
// event waits behind a dead letter of its key (docs/cli.md, relay --until-empty). Decided from
// the store's own lists; when either is longer than we read, we keep running. The lists are
// read at most once a second, so a relay idling on a long retry backoff does not re-read them
// every poll. (An event retried by hand while a later event of its key is dead counts as held.)
bool Relay::Impl::all_pending_held_by_dead_letters(const StoreStats& stats) {
  constexpr std::size_t kMaxScan = 10000;
  if (options.order != ClaimOrder::strict || stats.dead == 0 ||
      stats.pending > std::int64_t{kMaxScan} || stats.dead > std::int64_t{kMaxScan})
    return false;
  const auto now = SteadyClock::now();
  if (now < next_held_check) return false;
  next_held_check = now + std::chrono::seconds(1);
  std::set<std::string> dead_keys;
  for (const auto& d : store.dead(kMaxScan))
    if (!d.key.empty()) dead_keys.insert(d.key);
  auto pending = store.list(kMaxScan);
  if (pending.size() >= kMaxScan) return false;
  return std::all_of(pending.begin(), pending.end(),
                     [&](const StoredEvent& e) { return dead_keys.count(e.key) > 0; });
}

bool Relay::Impl::wait_when_idle() {
  if (stopping.load(std::memory_order_acquire)) return true;
  bool empty = false;
  auto failure = failure_of([&] {
    if (options.until_empty) {
      StoreStats s = store.stats();
      // Scheduled events are still to deliver: they keep it running (docs/cli.md).
      if ((empty = s.pending + s.scheduled + s.leased == 0)) return;
      if ((empty = s.scheduled + s.leased == 0 && all_pending_held_by_dead_letters(s))) return;
    }
    // A store whose wait keeps returning at once while nothing is claimable (e.g. a due
    // event held back behind a leased one of its key) must not make this loop spin.
    if (futile_wakeups >= 3) sleep_for(Duration{std::min<std::int64_t>(futile_wakeups - 2, 10)});
    if (idle_wait())
      ++futile_wakeups;
    else
      futile_wakeups = 0;
  });
  if (failure && !stop_if_fatal("store wait failed", *failure)) {
    store_failed();
    store_error("store wait failed (backing off): " + failure->text);
    sleep_for(next_error_backoff());
  }
  return !empty;
}

void Relay::Impl::sequential_run() {
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

}  // namespace outpost
