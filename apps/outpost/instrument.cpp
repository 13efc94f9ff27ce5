#include "instrument.h"

#include <algorithm>
#include <cmath>

#include "outpost/sink_wrapper.h"
#include "outpost/store_wrapper.h"

namespace outpost::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

const std::vector<double> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10};
const std::vector<double> kBatchBounds = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000};
// From a healthy relay's milliseconds to a day-long outage (sixteen bounds: Histogram's limit).
const std::vector<double> kOutboxBounds = {0.01, 0.05, 0.1, 0.25, 0.5, 1,    2.5,   5,
                                           10,   30,   60,  300,  900, 3600, 21600, 86400};

// Overrides what it measures; StoreWrapper forwards the rest (archived() included).
class TimedStore final : public StoreWrapper {
 public:
  TimedStore(Store& inner, PipelineMetrics& m) : StoreWrapper(inner), m_(m) {}
  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    auto start = Clock::now();
    m_.touch();
    auto batch = target().claim(max, lease, order);
    m_.claim_seconds.observe(seconds_since(start));
    count(batch);
    return batch;
  }
  std::size_t ack(const ClaimedBatch& b, std::span<const EventId> ids) override {
    auto n = timed_settle([&] { return target().ack(b, ids); });
    if (n == ids.size()) observe_acked(b, ids);
    return n;
  }
  std::size_t nack(const ClaimedBatch& b, std::span<const Nack> nacks) override {
    return timed_settle([&] { return target().nack(b, nacks); });
  }
  std::size_t release(const ClaimedBatch& b, std::span<const EventId> ids) override {
    return timed_settle([&] { return target().release(b, ids); });
  }
  bool renew(const ClaimedBatch& b, Duration lease) override {
    m_.touch();
    return target().renew(b, lease);
  }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& s, SettleCounts& counts,
                                std::size_t max, Duration lease, ClaimOrder order) override {
    auto start = Clock::now();
    m_.touch();
    auto batch = target().settle_and_claim(done, s, counts, max, lease, order);
    m_.touch();
    m_.settle_seconds.observe(seconds_since(start));
    if (counts.acked == s.acks.size()) observe_acked(done, s.acks);
    count(batch);
    return batch;
  }
  void wait_for_work(Duration max) override {
    m_.touch();
    target().wait_for_work(max);
    m_.touch();
  }

 private:
  template <typename F>
  std::size_t timed_settle(F f) {
    auto start = Clock::now();
    m_.touch();
    auto n = f();
    m_.settle_seconds.observe(seconds_since(start));
    return n;
  }
  void count(const ClaimedBatch& batch) {
    if (!batch.events.empty()) m_.batch_size.observe(double(batch.events.size()));
  }
  // Each acked event's time in the outbox. Only when the store confirmed every ack: a fenced
  // one (another relay holds the event now) is that relay's to count. The relay acks in batch
  // order, so one pass over the batch finds them; the search wraps for any other order.
  void observe_acked(const ClaimedBatch& batch, std::span<const EventId> ids) {
    if (ids.empty() || batch.events.empty()) return;
    const TimePoint t = now();
    const std::size_t n = batch.events.size();
    std::size_t at = 0;
    for (const auto& id : ids) {
      for (std::size_t tried = 0; tried < n; ++tried, at = (at + 1) % n) {
        if (batch.events[at].id != id) continue;
        const auto stay = std::chrono::duration<double>(t - batch.events[at].occurred_at).count();
        m_.outbox_seconds.observe(std::max(stay, 0.0));  // an occurred_at ahead of this clock: 0
        break;
      }
    }
  }
  PipelineMetrics& m_;
};

// Overrides what it measures; SinkWrapper forwards the rest (close() and closed(): the relay asks
// after every batch whether the sink is gone for good, and a wrapper that answered the default
// "no" kept a pipeline whose pipe reader went away failing under `run`).
class TimedSink final : public SinkWrapper {
 public:
  TimedSink(Sink& inner, PipelineMetrics& m) : SinkWrapper(inner), m_(m) {}
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return timed(events, [&] { return target().deliver(events); });
  }
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    return timed(events, [&] { return target().deliver_bounded(events, control); });
  }

 private:
  template <typename F>
  std::vector<DeliveryResult> timed(std::span<const StoredEvent> events, F f) {
    auto start = Clock::now();
    m_.touch();
    m_.delivering.fetch_add(1);
    struct Done {
      PipelineMetrics& m;
      ~Done() {
        m.delivering.fetch_sub(1);
        m.touch();
      }
    } done{m_};
    std::vector<DeliveryResult> results;
    try {
      results = f();
    } catch (const std::exception& e) {
      m_.deliver_seconds.observe(seconds_since(start));
      m_.last_delivery_failed.store(true);
      m_.set_last_error(e.what());
      throw;
    }
    m_.deliver_seconds.observe(seconds_since(start));
    if (!events.empty()) {
      bool all_failed = std::none_of(results.begin(), results.end(),
                                     [](const DeliveryResult& r) { return r.ok(); });
      m_.last_delivery_failed.store(all_failed);
      if (all_failed) {
        for (const auto& r : results)
          if (r.status == DeliveryResult::Status::failed ||
              r.status == DeliveryResult::Status::unavailable) {
            m_.set_last_error(r.error);
            break;
          }
      }
    }
    return results;
  }
  PipelineMetrics& m_;
};

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {
  if (bounds_.size() > kMaxBuckets) bounds_.resize(kMaxBuckets);
}

void Histogram::observe(double value) {
  std::size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  if (value > 0) sum_micros_.fetch_add(std::llround(value * 1e6), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = double(sum_micros_.load(std::memory_order_relaxed)) / 1e6;
  return s;
}

PipelineMetrics::PipelineMetrics()
    : claim_seconds(kLatencyBounds),
      deliver_seconds(kLatencyBounds),
      settle_seconds(kLatencyBounds),
      batch_size(kBatchBounds),
      outbox_seconds(kOutboxBounds) {
  touch();
}

void PipelineMetrics::touch() {
  last_activity_ms.store(now_ms(), std::memory_order_relaxed);
}

std::chrono::milliseconds PipelineMetrics::idle_for() const {
  return std::chrono::milliseconds(now_ms() - last_activity_ms.load(std::memory_order_relaxed));
}

void PipelineMetrics::set_last_error(const std::string& error) {
  std::lock_guard lock(mu_);
  last_error_ = error.substr(0, 500);
}

std::string PipelineMetrics::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

std::unique_ptr<Store> instrument_store(Store& inner, PipelineMetrics& metrics) {
  return std::make_unique<TimedStore>(inner, metrics);
}

std::unique_ptr<Sink> instrument_sink(Sink& inner, PipelineMetrics& metrics) {
  return std::make_unique<TimedSink>(inner, metrics);
}

}  // namespace outpost::cli
