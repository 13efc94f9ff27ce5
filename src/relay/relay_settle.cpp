// Settling a batch (Relay::Impl, relay_impl.h): the acks, nacks and releases the relay decided,
// in one settle-and-claim call on the hot path or in separate calls retried a few times; what the
// store still refuses is held and retried before anything new is claimed (docs/relay.md,
// "Crash counting").

#include <chrono>
#include <thread>

#include "guarded.h"
#include "relay_impl.h"

namespace outpost {
namespace {

constexpr int kSettleTries = 4;            // an ack/nack/release is tried this many times
constexpr int kSettleTriesStopping = 2;    // ... while stopping (see settle_call)
constexpr Duration kSettleRetryFirst{50};  // then 100, 200 ms: bounded, also while stopping
// While stopping, a combined settle-and-claim that failed after this long means a store that
// does not answer (each further try would cost as long): the stop's other settle calls are
// skipped. One that failed sooner (a dropped connection) still gets the separate tries.
constexpr Duration kStoreHungAfter{1'000};

using relay_detail::failure_of;

}  // namespace

template <typename F>
std::optional<std::size_t> Relay::Impl::settle_call(const char* what, std::size_t count, F&& call,
                                                    bool& retried, int tries) {
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
    if (stop_if_fatal(std::string(what) + " of " + std::to_string(count) + " events failed",
                      *failure))
      return std::nullopt;  // the lease expiry redelivers them, to a relay that can read them
    store_failed();
    const char* next = attempt < tries ? " (retrying): "
                       : stopping_now  ? " (giving up; the lease expiry will redeliver them): "
                                       : " (kept: retried with backoff before anything new is "
                                         "claimed): ";
    store_error(std::string(what) + " of " + std::to_string(count) + " events failed" + next +
                failure->text);
    if (attempt >= tries) {
      if (stopping.load(std::memory_order_acquire)) store_failed_while_stopping = true;
      return std::nullopt;
    }
    retried = true;
    std::this_thread::sleep_for(wait);  // not cut short by stop(): settling is part of draining
    wait *= 2;
  }
}

bool Relay::Impl::still_leased(Batch& slot) {
  if (keeper.disarm(slot.claimed)) return true;
  slot.abandoned = true;
  lease_lost.fetch_add(1, std::memory_order_relaxed);
  report("lease lost while delivering a batch of " + std::to_string(slot.claimed.events.size()) +
         " events: the batch is abandoned (its new owner delivers it)");
  return false;
}

void Relay::Impl::note_fenced(const Batch& slot) {
  lease_lost.fetch_add(1, std::memory_order_relaxed);
  report("some events of a batch of " + std::to_string(slot.claimed.events.size()) +
         " were no longer leased by this relay when settled (lease expired)");
}

void Relay::Impl::count_settled(const Batch& slot, bool fenced) {
  if (fenced) note_fenced(slot);
  delivered.fetch_add(slot.acks.size(), std::memory_order_relaxed);
  failed.fetch_add(slot.n_failed, std::memory_order_relaxed);
  dead.fetch_add(slot.n_dead, std::memory_order_relaxed);
  released.fetch_add(slot.releases.size(), std::memory_order_relaxed);
}

bool Relay::Impl::settle_parts(Batch& slot, int tries) {
  bool fenced = false;
  bool& retried = slot.settle_retried;
  // One kind of settlement: tried (settle_call), and once recorded counted and cleared.
  auto part = [&](const char* what, auto& list, auto call, auto count) {
    if (list.empty()) return;
    auto done = settle_call(what, list.size(), call, retried, tries);
    if (!done) return;
    fenced |= *done < list.size();
    count();
    list.clear();
  };
  part(
      "ack", slot.acks, [&] { return store.ack(slot.claimed, slot.acks); },
      [&] { delivered.fetch_add(slot.acks.size(), std::memory_order_relaxed); });
  part(
      "nack", slot.nacks, [&] { return store.nack(slot.claimed, slot.nacks); },
      [&] {
        failed.fetch_add(slot.n_failed, std::memory_order_relaxed);
        dead.fetch_add(slot.n_dead, std::memory_order_relaxed);
        slot.n_failed = slot.n_dead = 0;
      });
  part(
      "release", slot.releases, [&] { return store.release(slot.claimed, slot.releases); },
      [&] { released.fetch_add(slot.releases.size(), std::memory_order_relaxed); });
  // After a retried call a short count may just mean the first try did take effect.
  if (fenced && !retried) note_fenced(slot);
  return slot.settlement().empty();
}

void Relay::Impl::settle(Batch& slot) {
  if (slot.abandoned) return;
  if (settle_parts(slot) || stopping.load(std::memory_order_acquire)) return;
  held.push_back(std::move(slot));
  slot = Batch{};
}

void Relay::Impl::drain_held() {
  while (!held.empty() && !stopping.load(std::memory_order_acquire)) {
    sleep_for(next_error_backoff());
    if (stopping.load(std::memory_order_acquire)) break;
    retry_held(1);
  }
  if (held.empty()) error_backoff = Duration{0};
}

void Relay::Impl::retry_held(int tries) {
  std::erase_if(held, [&](Batch& b) { return settle_parts(b, tries); });
}

void Relay::Impl::settle_and_claim(Batch& done, Batch& next) {
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
    if (stopping.load(std::memory_order_acquire) && SteadyClock::now() - started >= kStoreHungAfter)
      store_failed_while_stopping = true;
    next.claimed = ClaimedBatch{};
    // A claim that reached a row the store cannot read: settle `done` on its own, then stop.
    if (!stop_if_fatal("settle and claim failed", *failure)) {
      store_failed();
      store_error("settle and claim failed (settling again on its own): " + failure->text);
    }
    prepare(next, started);
    settle(done);
    return;
  }
  store_answered();
  prepare(next, started);
  bool fenced = counts.acked < done.acks.size() || counts.nacked < done.nacks.size() ||
                counts.released < done.releases.size();
  count_settled(done, fenced);
}

void Relay::Impl::abandon_held() {
  if (held.empty()) return;
  retry_held(0);
  held.clear();
}

}  // namespace outpost
