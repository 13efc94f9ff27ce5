#pragma once
// The relay: one loop for every store and sink. Claims a batch under a lease, delivers it,
// then acks/nacks/releases each event by its own outcome. While a batch runs long the lease is
// renewed, up to the delivery deadline; if renewal fails the batch is abandoned (its events will
// be redelivered by whoever holds them now). Memory is bounded by batch_size whatever the backlog.
//
// A sink that reports a delivery `unavailable` (the destination is down or busy) is paused, not
// its events: the relay releases what it holds, waits, probes with one event, and resumes when the
// destination answers (docs/relay.md, "Pauses"). No delivery starts once the lease of its batch
// has run out on the relay's own clock (docs/relay.md, "The lease deadline").
//
// Thread safety: run() on one thread; stop(), abort() and counters() from any thread. With
// pipelining (the default) the sink's deliver() runs on a thread of the relay's own, never two at
// once.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "outpost/error.h"
#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost {

struct RelayOptions {
  std::size_t batch_size = 100;  // events per claim (>= 1)
  Duration lease{30'000};        // lease per claim; renewed every lease/3 while delivering
  // Deliveries the destination refused (DeliveryResult::failed), the first included, before the
  // event is dead-lettered (>= 1). With the backoff below the retries span hours (the schedule:
  // docs/relay.md, "Retry schedule"). An unavailable destination spends no attempt.
  int max_attempts = 20;
  Duration backoff_base{1'000};     // first retry waits up to this (full jitter)
  Duration backoff_max{3'600'000};  // cap on any retry delay (also caps the pause's probe wait)
  // Claims of an event whose lease expired with no outcome recorded (StoredEvent::crashes: the
  // relay died or hung while delivering it) before it is dead-lettered unseen (>= 1;
  // docs/relay.md, "Crash counting").
  int max_crashes = 5;
  ClaimOrder order = ClaimOrder::ordered;
  Duration poll_interval{1'000};  // fallback wait when the store's wake-up is missed
  bool until_empty = false;       // run() returns when nothing is pending or leased
  // How long stop() lets deliveries in flight go on; past it they are given up and their events
  // released (sinks that can be bounded: handlers, HTTP). 0: each ends by its own timeout (for
  // HTTP one request timeout).
  Duration drain_timeout{0};
  // Deadline of one deliver() call; 0: the lease. Past it, events still being delivered fail
  // with "timed out after N ms" (attempt counted), those not started are released, and the
  // lease is no longer renewed (docs/relay.md, "Deadlines and stopping").
  Duration deliver_timeout{0};
  // While a backlog lasts, run() may deliver one batch (on a delivery thread) while the store
  // settles the previous batch and claims the next, so store and sink round trips overlap; it
  // measures whether that is faster than claiming after each delivery and keeps the faster way
  // (docs/relay.md). Per-key order and fencing are the same either way; false runs claim ->
  // deliver -> settle strictly in turn with separate settle calls.
  bool pipeline = true;
  // Called for store errors the relay survives (it backs off and retries) and for each failed
  // delivery (unless on_delivery_error is set). Must not throw. Runs on the relay's threads.
  std::function<void(const std::string& message)> on_error;
  // When set, failed deliveries are reported here, with the event, instead of to on_error.
  std::function<void(const std::string& message, const StoredEvent& event)> on_delivery_error;
  // When set, the sink's pauses are reported here instead of to on_error: once when it goes
  // down (`down` true: "sink 'http' down since <RFC 3339>: <why>; probing ...") and once when it
  // is back (`down` false: "sink 'http' is back after N s ..."). Must not throw.
  std::function<void(const std::string& message, bool down)> on_sink_state;
  // The store's transitions, as a consumer's on_notice: once per outage, when the store answers
  // again after failed calls ("the store works again after N s (M failed calls)"; `warning`
  // false). Unset: not said (the failures themselves go to on_error). Must not throw.
  std::function<void(const std::string& message, bool warning)> on_notice;
};

// Counters since start; safe to read while running.
struct RelayCounters {
  std::uint64_t batches = 0;
  std::uint64_t claimed = 0;
  std::uint64_t delivered = 0;
  std::uint64_t failed = 0;      // delivery attempts that failed (retried or dead)
  std::uint64_t dead = 0;        // moved to dead letters
  std::uint64_t released = 0;    // skipped / released without counting an attempt
  std::uint64_t lease_lost = 0;  // batches abandoned because renew failed or acks were fenced
  std::uint64_t store_errors = 0;
  // Events whose delivery found the sink unavailable (released, no attempt counted).
  std::uint64_t unavailable = 0;
  // The sink's pause (docs/relay.md, "Pauses"): down now, since when (wall clock; the epoch when
  // up), and how many outages began since start.
  bool sink_down = false;
  TimePoint sink_down_since{};
  std::uint64_t sink_outages = 0;
  // Batches not delivered because their lease deadline had passed before the delivery could
  // start (the relay was paused: docs/relay.md, "The lease deadline").
  std::uint64_t lease_expired_undelivered = 0;
};

class Relay {
 public:
  // `store` and `sink` must outlive the relay.
  Relay(Store& store, Sink& sink, RelayOptions options = {});
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Runs on the calling thread until stop() (or, with until_empty, until no event is pending or
  // leased); then the sink is closed. Store and delivery errors are reported and survived, but
  // two: a store error with ErrorCode::corrupt (a row the store cannot read, docs/emit-contract.md:
  // retrying cannot help) stops the relay as stop() does and run() throws that error; a sink
  // that says it is closed for good (Sink::closed()) stops the relay, the events it holds are
  // released, and run() throws ConnectionError naming why.
  void run();

  // One claim -> deliver -> settle cycle. Returns the number of events claimed. A failing claim
  // throws (run() instead reports it and backs off); failing acks are retried a few times, then
  // reported and kept: the next call tries them once first and claims nothing (returns 0) while
  // the store still refuses them (run() retries them with backoff). While the sink is down it
  // claims one event (a probe) and does not wait.
  std::size_t run_once();

  // Asks run() to return soon: no new claim and no new delivery; deliveries in flight get up to
  // drain_timeout (0: their own timeout); every event not confirmed is released without counting
  // an attempt. Safe from any thread (it sets flags and wakes the relay's waits). Not
  // async-signal-safe: call it from a thread that waits for the signal (sigwait), not from
  // inside a signal handler.
  void stop();
  // stop() that gives up on deliveries in flight at once (a second SIGTERM).
  void abort();

  RelayCounters counters() const;
  const RelayOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Full-jitter exponential backoff: a uniform delay in [0, min(max, base * 2^(attempt-1))].
Duration backoff_cap(int attempt, Duration base, Duration max);
Duration backoff_delay(int attempt, Duration base, Duration max);

}  // namespace outpost
