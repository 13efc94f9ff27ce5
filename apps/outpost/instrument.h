#pragma once
// Measuring a pipeline from outside the relay: a Store and a Sink decorator that time every call
// the relay makes (claim, deliver, settle) into histograms, count batch sizes, time each acked
// event's stay in the outbox, and remember the last activity and the last delivery outcome, which
// /metrics and /readyz report. The relay itself is unchanged; the decorators forward every call
// (outpost/store_wrapper.h, outpost/sink_wrapper.h).
//
// Thread safety: Histogram and PipelineMetrics are updated with atomics and may be read (by the
// HTTP server) while the relay runs.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "outpost/sink.h"
#include "outpost/store.h"

namespace outpost::cli {

// A Prometheus-style histogram with fixed upper bounds (le) and a sum.
class Histogram {
 public:
  static constexpr std::size_t kMaxBuckets = 16;
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> cumulative;  // per bound, then +Inf (== count)
    double sum = 0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::array<std::atomic<std::uint64_t>, kMaxBuckets + 1> counts_{};  // last: above every bound
  std::atomic<std::uint64_t> sum_micros_{0};  // sum in millionths, to stay lock-free
};

// Everything measured about one pipeline.
struct PipelineMetrics {
  PipelineMetrics();
  Histogram claim_seconds;    // claim() and the claim part of settle_and_claim()
  Histogram deliver_seconds;  // one deliver() call (a batch)
  Histogram settle_seconds;   // ack/nack/release, and settle_and_claim() as a whole
  Histogram batch_size;       // events per claimed batch (non-empty ones)
  // Per acked event: from its occurred_at (set at emit unless the application gave one) to the
  // ack, on this host's clock; the figure operators alert on (docs/operations.md, "Metrics").
  Histogram outbox_seconds;
  std::atomic<std::int64_t> last_activity_ms{0};  // steady clock ms of the last store/sink call
  std::atomic<int> delivering{0};                 // deliver() calls in progress
  std::atomic<bool> last_delivery_failed{false};  // every event of the last batch failed

  void touch();
  std::chrono::milliseconds idle_for() const;  // since the last store/sink call
  void set_last_error(const std::string& error);
  std::string last_error() const;

 private:
  mutable std::mutex mu_;
  std::string last_error_;  // guarded by mu_
};

// Decorators that measure into `metrics`; `inner` and `metrics` must outlive them.
std::unique_ptr<Store> instrument_store(Store& inner, PipelineMetrics& metrics);
std::unique_ptr<Sink> instrument_sink(Sink& inner, PipelineMetrics& metrics);

}  // namespace outpost::cli
