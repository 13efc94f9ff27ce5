#pragma once
// One claimed batch on its way through the relay, and the pure rules that turn it into store
// calls (no store, no sink, no threads: unit-testable on their own):
//   prepare(): events whose lease expired more than max_attempts times are dead-lettered unseen;
//   decide():  the sink's results become acks, nacks (retry with backoff, or dead) and releases.

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

// After a claim: dead-letters (as nacks without retry) the events claimed more than
// `max_attempts` times, whose relay died or hung while delivering them, and delivers the rest.
void prepare(Batch& batch, int max_attempts, const DeliveryErrorFn& report);

struct DecideRules {
  int max_attempts = 5;
  Duration backoff_base{100};
  Duration backoff_max{60'000};
  std::string_view sink_name;
  // The relay is stopping: a failure was cut short by the stop, so it is released (no attempt
  // counted) instead of nacked.
  bool stopping = false;
};

// After delivery: delivered -> ack, skipped -> release, failed -> nack with a backoff retry or
// dead at max_attempts (reported through `report`). A result count that does not match the
// events fails them all, naming the sink.
void decide(Batch& batch, const DecideRules& rules, const DeliveryErrorFn& report);

}  // namespace outpost::relay_detail
