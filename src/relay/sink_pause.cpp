// The pause of an unavailable sink (sink_pause.h, docs/relay.md, "Pauses").

#include "sink_pause.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace outpost::relay_detail {
namespace {

// The first probe after 500 ms, then doubling up to 30 s (kMaxProbeWait, outpost/sink.h), or
// backoff_max when that is smaller (but not below 10 ms).
constexpr Duration kProbeFirst{500};
constexpr Duration kProbeCap = kMaxProbeWait;
constexpr Duration kProbeFloor{10};

}  // namespace

SinkPause::SinkPause(Duration backoff_max) : backoff_max_(backoff_max) {}

Duration SinkPause::probe_cap() const {
  return std::clamp(backoff_max_, kProbeFloor, kProbeCap);
}

std::optional<SinkPause::Transition> SinkPause::on_batch(const Batch& b,
                                                         std::string_view sink_name) {
  if (b.n_unavailable > 0) {
    unavailable_.fetch_add(b.n_unavailable, std::memory_order_relaxed);
    const bool was_down = down();
    probe_step_ =
        was_down ? std::min(probe_cap(), probe_step_ * 2) : std::min(kProbeFirst, probe_cap());
    // Retry-After is honoured, capped like the rest; a little jitter so that relays paused by
    // the same outage do not probe in lockstep.
    Duration wait = std::min(probe_cap(), std::max(probe_step_, b.retry_after));
    thread_local std::mt19937 rng{std::random_device{}()};
    std::uniform_int_distribution<std::int64_t> dist(0, wait.count() / 10);
    probe_wait_ = wait + Duration{dist(rng)};
    if (was_down) return std::nullopt;
    down_since_steady_ = SteadyClock::now();
    probes_ = 0;
    const TimePoint since = outpost::now();
    down_since_us_.store(since.time_since_epoch().count(), std::memory_order_relaxed);
    outages_.fetch_add(1, std::memory_order_relaxed);
    down_.store(true, std::memory_order_release);
    return Transition{
        "sink '" + std::string(sink_name) + "' down since " + format_rfc3339(since) + ": " +
            b.unavailable_why + "; its events wait (no attempt counted); probing " +
            "with one event in " + std::to_string(wait.count()) +
            " ms, then backing off to every " + std::to_string(probe_cap().count()) + " ms",
        true};
  }
  if (!b.answered || !down()) return std::nullopt;
  const auto secs = std::chrono::duration<double>(SteadyClock::now() - down_since_steady_).count();
  char took[32];
  std::snprintf(took, sizeof took, "%.1f", secs);
  down_.store(false, std::memory_order_release);
  down_since_us_.store(0, std::memory_order_relaxed);
  return Transition{"sink '" + std::string(sink_name) + "' is back after " + took + " s (" +
                        std::to_string(probes_) + (probes_ == 1 ? " probe" : " probes") +
                        "); delivering again",
                    false};
}

void SinkPause::fill_counters(RelayCounters& c) const {
  c.unavailable = unavailable_.load(std::memory_order_relaxed);
  c.sink_down = down_.load(std::memory_order_acquire);
  c.sink_down_since =
      c.sink_down ? TimePoint(std::chrono::microseconds(down_since_us_.load())) : TimePoint{};
  c.sink_outages = outages_.load(std::memory_order_relaxed);
}

}  // namespace outpost::relay_detail
