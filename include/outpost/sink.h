#pragma once
// The Sink interface: where the relay delivers.

#include <atomic>
#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"

namespace outpost {

struct DeliveryResult {
  enum class Status {
    delivered,  // the destination confirmed (handler returned, fsync, 2xx, broker ack)
    failed,     // refused: the destination answered and rejected this event (HTTP 4xx, a record
                // the broker rejects, a handler's ordinary exception); `error` says why; an
                // attempt: the relay reschedules or dead-letters it
    skipped,    // not attempted (an earlier event of its key failed in this call, or stopping)
    // The destination is down or busy, not refusing this event: connection refused or reset,
    // connect/request timeout, DNS, TLS handshake, HTTP 429/502/503/504, broker not available,
    // message timeout, no space on the sink's disk. No attempt is counted: the relay pauses the
    // sink, probes it, and delivers again once it answers (docs/relay.md, "Failure classes").
    unavailable,
  };
  Status status = Status::delivered;
  std::string error;
  // With `unavailable`: how long the destination asked us to wait (HTTP Retry-After); 0: unknown.
  Duration retry_after{0};

  bool ok() const { return status == Status::delivered; }
  static DeliveryResult delivered() { return {}; }
  static DeliveryResult failed(std::string why) { return {Status::failed, std::move(why)}; }
  static DeliveryResult skipped(std::string why = {}) { return {Status::skipped, std::move(why)}; }
  static DeliveryResult unavailable(std::string why, Duration retry_after = Duration{0}) {
    return {Status::unavailable, std::move(why), retry_after};
  }
  // The hold-back rule of the Sink contract below, in one place: once an event of a non-empty key
  // failed, the later events of that key in the same call are not delivered but reported this.
  static DeliveryResult held_back(std::string_view key) {
    return skipped("an earlier event of key '" + std::string(key) + "' failed in this batch");
  }
};

// The longest a paused sink waits before its next probe (docs/relay.md, "Pauses"): an event whose
// delivery came back unavailable (e.g. a broker ack that never came) is sent again within this.
inline constexpr Duration kMaxProbeWait{30'000};

// Options shared by every sink; backends take theirs from the URL as well.
struct SinkOptions {
  std::size_t concurrency = 1;  // parallel deliveries (HTTP requests) with per-key order kept
  Duration timeout{10'000};     // per-request / per-flush timeout
  // The relay's lease and longest retry delay (RelayOptions::lease / backoff_max), for sinks
  // that deduplicate within a window (JetStream): they warn when the window is shorter than
  // lease + backoff_max. 0 = unknown, no check.
  Duration lease{0};
  Duration backoff_max{0};
};

// The bounds a relay puts on one deliver() call (docs/relay.md, "Deadlines and stopping"). The
// relay changes them from other threads while the call runs; sinks that can bound their work
// read them before starting each delivery and at least every kPollInterval while they wait:
//  - past deadline(): start nothing more (those events `skipped`) and give up on deliveries in
//    flight (`failed` with timed_out_error(): the attempt counts);
//  - once stopping(): start nothing more (`skipped`); past abandon_at(), give up on deliveries
//    in flight too (`skipped`: not confirmed, the relay releases them).
// Sinks that cannot be bounded ignore it (the default deliver_bounded() does); their own
// timeouts then bound the call.
class DeliveryControl {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Duration kPollInterval{50};

  Clock::time_point deadline() const {
    return Clock::time_point(Clock::duration(deadline_.load()));
  }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }
  Clock::time_point abandon_at() const {
    return Clock::time_point(Clock::duration(abandon_at_.load()));
  }
  // Whether a new delivery may start now.
  bool may_start(Clock::time_point now = Clock::now()) const {
    return !stopping() && now < deadline();
  }
  // "timed out after N ms (deliver timeout)"
  std::string timed_out_error() const {
    return "timed out after " + std::to_string(timeout_.load()) + " ms (deliver timeout)";
  }
  // The `skipped` outcomes above, worded the same by every sink: an event never started (past
  // the deadline or stopping), and a delivery in flight given up past abandon_at().
  static DeliveryResult not_started() {
    return DeliveryResult::skipped("not started (relay stopping or deliver timeout)");
  }
  static DeliveryResult abandoned() {
    return DeliveryResult::skipped("abandoned unconfirmed: the relay is stopping");
  }

  // The relay's side. begin(): a new call with `timeout` (0, or more than a year: no deadline).
  void begin(Duration timeout, Clock::time_point now = Clock::now()) {
    const bool none = timeout.count() <= 0 || timeout > std::chrono::hours(24 * 366);
    timeout_.store(timeout.count());
    deadline_.store(none ? kNever : (now + timeout).time_since_epoch().count());
  }
  // Stop starting deliveries; give up on those in flight at `abandon_at` (only ever moves earlier).
  void stop(Clock::time_point abandon_at = Clock::time_point::max()) {
    auto t = abandon_at.time_since_epoch().count();
    auto cur = abandon_at_.load();
    while (t < cur && !abandon_at_.compare_exchange_weak(cur, t)) {
    }
    stopping_.store(true, std::memory_order_release);
  }

 private:
  static constexpr Clock::rep kNever = Clock::time_point::max().time_since_epoch().count();
  std::atomic<Clock::rep> deadline_{kNever};
  std::atomic<Clock::rep> abandon_at_{kNever};
  std::atomic<std::int64_t> timeout_{0};
  std::atomic<bool> stopping_{false};
};

class Sink {
 public:
  virtual ~Sink() = default;

  // "handlers", "file", "http", "kafka", "redis-stream", "nats".
  virtual std::string_view name() const = 0;

  // Delivers `events` (in store sequence order) and returns exactly one result per event, in
  // the same order. Contract:
  //  - `delivered` only after the destination confirmed (guarantee 3).
  //  - events of one non-empty key are delivered in the given order and never concurrently;
  //    once one fails, the later events of that key in this call are not delivered but
  //    reported `skipped`.
  //  - per-event problems are results, not exceptions; a throw means the whole call failed
  //    and every event is treated as failed with the exception text.
  // Called by one relay thread at a time.
  virtual std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) = 0;

  // The same, bounded by `control` (see DeliveryControl); the relay calls this one. Sinks that
  // can stop early override it; the default runs deliver(events) to its end.
  virtual std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                                      const DeliveryControl& control) {
    (void)control;
    return deliver(events);
  }

  // Waits for anything buffered to be confirmed; called before the relay stops. Never throws.
  virtual void close() {}

  // Non-empty (why) once the destination is gone for good, e.g. the reader of the file sink's
  // stdout pipe went away: no later delivery can succeed. The relay then stops, releases what it
  // holds without counting attempts, and run() throws a ConnectionError saying so.
  virtual std::string closed() const { return {}; }
};

}  // namespace outpost
