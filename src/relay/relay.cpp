// The relay loop. Per batch: one claim, one deliver, then at most one ack, one nack and one
// release call (each one round trip on every store); pipelined (the default), the settling of
// one batch and the claim of the next are one Store::settle_and_claim call, made while the sink
// delivers the batch in between. Per-event work is a few vector pushes into buffers reused
// across batches.

#include "outpost/relay.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "core/works_again.h"
#include "guarded.h"
#include "relay_impl.h"

namespace outpost {
namespace {

constexpr Duration kErrorBackoffFirst{50};
constexpr Duration kErrorBackoffMax{5'000};
constexpr Duration kIdleWaitChunk{200};  // bounds the stop() vs wait_for_work() race

void validate(const RelayOptions& o) {
  if (o.batch_size < 1) throw ConfigError("relay batch size must be at least 1");
  if (o.lease.count() < 3) throw ConfigError("relay lease must be at least 3 ms");
  if (o.max_attempts < 1) throw ConfigError("relay max attempts must be at least 1");
  if (o.max_crashes < 1) throw ConfigError("relay max crashes must be at least 1");
  if (o.backoff_base.count() < 0) throw ConfigError("relay backoff base must not be negative");
  if (o.backoff_max.count() < 0) throw ConfigError("relay backoff max must not be negative");
  if (o.poll_interval.count() < 1) throw ConfigError("relay poll interval must be at least 1 ms");
  if (o.drain_timeout.count() < 0) throw ConfigError("relay drain timeout must not be negative");
  if (o.deliver_timeout.count() < 0)
    throw ConfigError("relay deliver timeout must not be negative");
}

// The lease the relay asks for: its own, capped by the store's (Store::max_lease; docs/relay.md,
// "The lease deadline"), so claims, renewals and the delivery deadline agree.
RelayOptions capped(const OutboxStore& s, RelayOptions o) {
  if (auto cap = s.max_lease(); cap && *cap < o.lease) o.lease = *cap;
  return o;
}

Duration deliver_timeout_of(const RelayOptions& asked) {
  return asked.deliver_timeout.count() > 0 ? asked.deliver_timeout : asked.lease;
}

using relay_detail::failure_of;

}  // namespace

Relay::Impl::Impl(Store& s, Sink& k, RelayOptions o)
    : store(s),
      sink(k),
      options((validate(o), capped(s, o))),
      deliver_timeout(deliver_timeout_of(o)),
      keeper(
          s, options.lease, [this](const std::string& m) { store_error(m); },
          [this](const ClaimedBatch& b, SteadyClock::time_point started, Duration lease) {
            deadlines.renewed(slots, b, started, lease);
          }) {}

void Relay::Impl::report(const std::string& message) {
  if (options.on_error) failure_of([&] { options.on_error(message); });  // must not throw
}

void Relay::Impl::store_error(const std::string& message) {
  store_errors.fetch_add(1, std::memory_order_relaxed);
  report(message);
}

bool Relay::Impl::stop_if_fatal(const std::string& what, const relay_detail::Failure& f) {
  if (!f.fatal()) return false;
  // The store's error says what to fix (a row it cannot read, a file replaced underneath);
  // docs/emit-contract.md, docs/sqlite.md.
  store_error(what + ": " + f.text +
              ": the relay stops (retrying cannot help: fix what the error names, e.g. a row "
              "the store cannot read, docs/emit-contract.md)");
  {
    std::lock_guard lock(sleep_mu);
    if (!fatal) fatal = f.error;
  }
  stop(false);
  return true;
}

void Relay::Impl::store_failed() {
  if (store_failures_in_row++ == 0) store_failing_since = SteadyClock::now();
}

void Relay::Impl::store_answered() {
  if (store_failures_in_row == 0) return;
  const std::string message =
      core::works_again("the store works", SteadyClock::now() - store_failing_since,
                        store_failures_in_row, "failed calls");
  store_failures_in_row = 0;
  if (options.on_notice) failure_of([&] { options.on_notice(message, false); });  // must not throw
}

void Relay::Impl::delivery_error(const std::string& message, const StoredEvent& e) {
  if (options.on_delivery_error)
    failure_of([&] { options.on_delivery_error(message, e); });  // must not throw
  else
    report(message);
}

void Relay::Impl::sleep_for(Duration d) {
  std::unique_lock lock(sleep_mu);
  sleep_cv.wait_for(lock, d, [&] { return stopping.load(std::memory_order_acquire); });
}

Duration Relay::Impl::next_error_backoff() {
  error_backoff = error_backoff.count() == 0 ? kErrorBackoffFirst
                                             : std::min(kErrorBackoffMax, error_backoff * 2);
  // Half fixed, half jitter: relays that lost the same database do not return in lockstep.
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<std::int64_t> dist(0, error_backoff.count() / 2);
  return error_backoff / 2 + Duration{dist(rng)};
}

bool Relay::Impl::idle_wait() {
  auto deadline = SteadyClock::now() + options.poll_interval;
  while (!stopping.load(std::memory_order_acquire)) {
    auto left = std::chrono::duration_cast<Duration>(deadline - SteadyClock::now());
    if (left.count() <= 0) return false;
    Duration chunk = std::min(left, kIdleWaitChunk);
    auto started = SteadyClock::now();
    store.wait_for_work(chunk);
    // Woken before the chunk ran out: the store signalled work (or spuriously): claim again.
    if (SteadyClock::now() - started + Duration{1} < chunk) return true;
  }
  return false;
}

void Relay::Impl::run() {
  if (options.pipeline)
    pipelined_run();
  else
    sequential_run();
  abandon_held();
  if (auto failure = failure_of([&] { sink.close(); }))
    report("sink close failed: " + failure->text);
  std::lock_guard lock(sleep_mu);
  if (fatal) std::rethrow_exception(fatal);  // the store's own error (code, backend, text)
  if (!sink_closed.empty())
    throw ConnectionError(std::string(sink.name()),
                          "sink closed for good (" + sink_closed +
                              "): the relay stopped; the events it held were released");
}

void Relay::Impl::stop(bool now) {
  const auto at = DeliveryControl::Clock::now();
  if (now)
    control.stop(at);
  else if (options.drain_timeout.count() > 0 &&
           options.drain_timeout < std::chrono::hours(24 * 366))
    control.stop(at + options.drain_timeout);
  else
    control.stop();  // deliveries in flight end by their own timeouts
  stopping.store(true, std::memory_order_release);
  {
    std::lock_guard lock(sleep_mu);  // pairs with sleep_for's predicate check
  }
  sleep_cv.notify_all();
  failure_of([&] { store.interrupt(); });  // if it fails, the chunked idle wait notices
}

RelayCounters Relay::Impl::snapshot() const {
  RelayCounters c;
  c.batches = batches.load(std::memory_order_relaxed);
  c.claimed = claimed.load(std::memory_order_relaxed);
  c.delivered = delivered.load(std::memory_order_relaxed);
  c.failed = failed.load(std::memory_order_relaxed);
  c.dead = dead.load(std::memory_order_relaxed);
  c.released = released.load(std::memory_order_relaxed);
  c.lease_lost = lease_lost.load(std::memory_order_relaxed);
  c.store_errors = store_errors.load(std::memory_order_relaxed);
  pause.fill_counters(c);
  c.lease_expired_undelivered = lease_expired_undelivered.load(std::memory_order_relaxed);
  return c;
}

Relay::Relay(Store& store, Sink& sink, RelayOptions options)
    : impl_(std::make_unique<Impl>(store, sink, std::move(options))) {}

Relay::~Relay() = default;

void Relay::run() {
  impl_->run();
}
std::size_t Relay::run_once() {
  return impl_->run_once();
}
void Relay::stop() {
  impl_->stop(false);
}
void Relay::abort() {
  impl_->stop(true);
}
RelayCounters Relay::counters() const {
  return impl_->snapshot();
}
const RelayOptions& Relay::options() const {
  return impl_->options;
}

}  // namespace outpost
