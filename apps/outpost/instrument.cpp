#include "instrument.h"

#include <algorithm>
#include <cmath>

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

class TimedStore final : public Store {
 public:
  TimedStore(Store& inner, PipelineMetrics& m) : inner_(inner), m_(m) {}
  std::string_view backend() const override { return inner_.backend(); }
  void append(std::span<const Event> events, TxHandle tx) override { inner_.append(events, tx); }
  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    auto start = Clock::now();
    m_.touch();
    auto batch = inner_.claim(max, lease, order);
    m_.claim_seconds.observe(seconds_since(start));
    count(batch);
    return batch;
  }
  std::size_t ack(const ClaimedBatch& b, std::span<const EventId> ids) override {
    return timed_settle([&] { return inner_.ack(b, ids); });
  }
  std::size_t nack(const ClaimedBatch& b, std::span<const Nack> nacks) override {
    return timed_settle([&] { return inner_.nack(b, nacks); });
  }
  std::size_t release(const ClaimedBatch& b, std::span<const EventId> ids) override {
    return timed_settle([&] { return inner_.release(b, ids); });
  }
  bool renew(const ClaimedBatch& b, Duration lease) override {
    m_.touch();
    return inner_.renew(b, lease);
  }
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& s, SettleCounts& counts,
                                std::size_t max, Duration lease, ClaimOrder order) override {
    auto start = Clock::now();
    m_.touch();
    auto batch = inner_.settle_and_claim(done, s, counts, max, lease, order);
    m_.touch();
    m_.settle_seconds.observe(seconds_since(start));
    count(batch);
    return batch;
  }
  StoreStats stats() override { return inner_.stats(); }
  std::vector<StoredEvent> list(std::size_t limit) override { return inner_.list(limit); }
  std::vector<DeadEvent> dead(std::size_t limit) override { return inner_.dead(limit); }
  std::vector<EventState> blocked(std::size_t limit) override { return inner_.blocked(limit); }
  std::vector<EventState> leased(std::size_t limit) override { return inner_.leased(limit); }
  std::size_t retry(std::span<const EventId> ids) override { return inner_.retry(ids); }
  std::size_t retry_all() override { return inner_.retry_all(); }
  std::size_t discard(std::span<const EventId> ids) override { return inner_.discard(ids); }
  std::size_t discard_all() override { return inner_.discard_all(); }
  void wait_for_work(Duration max) override {
    m_.touch();
    inner_.wait_for_work(max);
    m_.touch();
  }
  void interrupt() override { inner_.interrupt(); }

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
  Store& inner_;
  PipelineMetrics& m_;
};

class TimedSink final : public Sink {
 public:
  TimedSink(Sink& inner, PipelineMetrics& m) : inner_(inner), m_(m) {}
  std::string_view name() const override { return inner_.name(); }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    return timed(events, [&] { return inner_.deliver(events); });
  }
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl& control) override {
    return timed(events, [&] { return inner_.deliver_bounded(events, control); });
  }
  void close() override { inner_.close(); }
  // The relay asks after every batch whether the sink is gone for good (Sink::closed): a
  // wrapper that answered the default "no" kept a pipeline whose pipe reader went away failing
  // and dead-lettering under `run`, where `relay` stops and releases. Every virtual of Sink is
  // forwarded: name, deliver, deliver_bounded, close, closed.
  std::string closed() const override { return inner_.closed(); }

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
  Sink& inner_;
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
      batch_size(kBatchBounds) {
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
