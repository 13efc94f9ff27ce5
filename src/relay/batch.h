#pragma once
// One claimed batch on its way through the relay, and the pure rules that turn it into store
// calls (no store, no sink, no threads: unit-testable on their own):
//   prepare(): events whose lease expired unsettled max_crashes times are dead-lettered unseen;
//   decide():  the sink's results become acks, nacks (retry with backoff, or dead) and releases,
//              and say whether the sink was unavailable (the relay then pauses it).

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost::relay_detail {

// Reuses its buffers across batches so the hot path does not allocate per batch.
struct Batch {
  ClaimedBatch claimed;
  std::vector<StoredEvent> subset;  // events to deliver when some were dead-lettered unseen
  bool use_subset = false;
  std::vector<DeliveryResult> results;  // the sink's, one per to_deliver() event
  std::vector<EventId> acks, releases;
  std::vector<Nack> nacks;
  std::uint64_t n_failed = 0, n_dead = 0;
  bool abandoned = false;  // the lease was lost while delivering: settle nothing
  // Set by decide(): some event found the sink unavailable (the first one's error and the
  // longest Retry-After), and whether the destination answered any event (delivered or refused).
  std::uint64_t n_unavailable = 0;
  std::string unavailable_why;
  Duration retry_after{0};
  bool answered = false;
  // On the relay's monotonic clock: no delivery of this batch may start from then on, as its lease
  // may have run out (claim time + lease - margin, moved on by each renewal; docs/relay.md, "The
  // lease deadline"). Guarded by the relay's deadline mutex while the batch is leased.
  std::chrono::steady_clock::time_point lease_deadline =
      std::chrono::steady_clock::time_point::max();
  bool lease_ran_out = false;   // deliver() found the deadline passed: nothing was delivered
  bool settle_retried = false;  // a settle call of this batch was retried (short counts are moot)

  bool empty() const { return claimed.empty(); }
  std::span<const StoredEvent> to_deliver() const {
    return use_subset ? std::span<const StoredEvent>(subset)
                      : std::span<const StoredEvent>(claimed.events);
  }
  Settlement settlement() const { return Settlement{acks, nacks, releases}; }
  // Forgets the previous batch's decisions (keeps `claimed`).
  void reset_decisions();
};

// "event ID (type 'T', key 'K')"
std::string describe(const StoredEvent& e);

using DeliveryErrorFn = std::function<void(const std::string& message, const StoredEvent& event)>;

// After a claim: dead-letters (as nacks without retry) the events whose lease expired unsettled
// at least `max_crashes` times (StoredEvent::crashes: their relay died or hung while delivering
// them), and delivers the rest. Delivery attempts play no part here (decide() limits those).
void prepare(Batch& batch, int max_crashes, const DeliveryErrorFn& report);

struct DecideRules {
  int max_attempts = 5;
  Duration backoff_base{100};
  Duration backoff_max{60'000};
  std::string_view sink_name;
  // The relay is stopping: a failure was cut short by the stop, so it is released (no attempt
  // counted) instead of nacked.
  bool stopping = false;
};

// After delivery: delivered -> ack, skipped and unavailable -> release (no attempt counted;
// unavailable also sets the batch's n_unavailable / unavailable_why / retry_after), failed ->
// nack with a backoff retry or dead at max_attempts (reported through `report`). A result count
// that does not match the events fails them all, naming the sink.
void decide(Batch& batch, const DecideRules& rules, const DeliveryErrorFn& report);

}  // namespace outpost::relay_detail
