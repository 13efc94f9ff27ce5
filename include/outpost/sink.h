#pragma once
// The Sink interface: where the relay delivers.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"

namespace outpost {

struct DeliveryResult {
  enum class Status {
    delivered,  // the destination confirmed (handler returned, fsync, 2xx, broker ack)
    failed,     // not delivered; `error` says why; the relay reschedules or dead-letters it
    skipped,    // not attempted (an earlier event of its key failed in this call, or stopping)
  };
  Status status = Status::delivered;
  std::string error;

  bool ok() const { return status == Status::delivered; }
  static DeliveryResult delivered() { return {}; }
  static DeliveryResult failed(std::string why) { return {Status::failed, std::move(why)}; }
  static DeliveryResult skipped(std::string why = {}) { return {Status::skipped, std::move(why)}; }
};

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

  // Waits for anything buffered to be confirmed; called before the relay stops. Never throws.
  virtual void close() {}
};

}  // namespace outpost
