#pragma once
// The pause of a sink that is unavailable (docs/relay.md, "Pauses"): whether the sink is down,
// since when, how long to wait before the next probe (one event), and the counters the relay
// reports. Pure decisions on a delivered batch's outcome (no store, no sink, no threads: unit-
// testable on their own); the relay does the waiting and the probing.
//
// Thread safety: on_batch() and count_probe() from the relay thread only; down() and
// fill_counters() from any thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "batch.h"
#include "outpost/relay.h"

namespace outpost::relay_detail {

class SinkPause {
 public:
  using SteadyClock = std::chrono::steady_clock;

  // The probe waits back off up to `backoff_max` (RelayOptions), within [10 ms, 30 s].
  explicit SinkPause(Duration backoff_max);

  // The sink went down (down) or came back (!down): what to report.
  struct Transition {
    std::string message;
    bool down = false;
  };

  // After a delivered batch (relay_detail::decide set its n_unavailable, unavailable_why,
  // retry_after and answered): an unavailable result takes the sink down (or keeps it down, the
  // next probe further off); an answer from the destination (delivered or refused) while down
  // brings it back. Reads the clocks only on a transition (this runs once per batch).
  std::optional<Transition> on_batch(const Batch& b, std::string_view sink_name);

  bool down() const { return down_.load(std::memory_order_acquire); }
  // The wait before the next probe while down (relay thread only).
  Duration probe_wait() const { return probe_wait_; }
  // The largest wait between probes.
  Duration probe_cap() const;
  // A probe is made (counted for the "back after N probes" message).
  void count_probe() { ++probes_; }

  // Sets unavailable, sink_down, sink_down_since and sink_outages.
  void fill_counters(RelayCounters& c) const;

 private:
  const Duration backoff_max_;
  // Read by fill_counters() from any thread.
  std::atomic<bool> down_{false};
  std::atomic<std::int64_t> down_since_us_{0};
  std::atomic<std::uint64_t> unavailable_{0}, outages_{0};
  // Relay thread only.
  Duration probe_step_{0}, probe_wait_{0};
  SteadyClock::time_point down_since_steady_;
  int probes_ = 0;
};

}  // namespace outpost::relay_detail
