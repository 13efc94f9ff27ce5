// The consumer's pure decisions (decisions.h).

#include "consume/decisions.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "outpost/sink.h"

namespace outpost::consume {
namespace {

// docs/relay.md, "Pauses": the relay's probe schedule (src/relay/sink_pause.cpp).
constexpr Duration kProbeFirst{500};
constexpr Duration kProbeCap = kMaxProbeWait;
constexpr Duration kProbeFloor{10};

}  // namespace

InboxIds inbox_ids(std::span<const Message> msgs, std::span<const std::size_t> idx) {
  InboxIds out;
  out.ids.reserve(idx.size());
  out.index.reserve(idx.size());
  for (std::size_t i : idx)
    if (msgs[i].parse_error.empty() && !msgs[i].event.id.is_nil()) {
      out.ids.push_back(msgs[i].event.id);
      out.index.push_back(i);
    }
  return out;
}

Sorted sort_out(std::span<const Message> msgs, std::span<const std::size_t> idx,
                const InboxIds& ids, const std::vector<bool>& fresh, bool ordered,
                std::set<std::string>& held) {
  Sorted out;
  for (std::size_t k = 0; k < ids.index.size() && k < fresh.size(); ++k)
    if (!fresh[k]) out.duplicates.insert(ids.index[k]);
  out.work.reserve(idx.size());
  for (std::size_t i : idx) {
    const Message& m = msgs[i];
    const std::string& key = m.event.key;
    if (!m.parse_error.empty()) {
      out.park.emplace_back(i, m.parse_error);
    } else if (out.duplicates.count(i)) {
      continue;
    } else if (ordered && !key.empty() && held.count(key)) {
      out.park.emplace_back(i, "held behind an earlier parked message of key '" + key + "'");
    } else {
      out.work.push_back(i);
      continue;
    }
    if (ordered && !key.empty()) held.insert(key);  // parked: later messages of its key wait
  }
  return out;
}

Judgement judge(std::span<const Message> msgs, std::span<const std::size_t> work,
                const std::vector<std::pair<std::size_t, std::string>>& failures,
                const std::vector<ConsumerBatch::Unavailable>& unavailable,
                std::vector<int>& attempts, int max_attempts) {
  Judgement out;
  for (const auto& u : unavailable)
    if (u.index < work.size() && out.down.insert(work[u.index]).second) {
      if (out.why.empty()) out.why = u.why;
      out.retry_after = std::max(out.retry_after, u.retry_after);
    }
  std::vector<std::pair<std::size_t, std::string>> failed;
  for (const auto& [k, why] : failures)
    if (k < work.size() && !out.down.count(work[k])) failed.emplace_back(work[k], why);
  std::sort(failed.begin(), failed.end());
  failed.erase(std::unique(failed.begin(), failed.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               failed.end());
  out.answered = work.size() > out.down.size();
  out.handled = work.size() - failed.size() - out.down.size();
  for (auto& [i, why] : failed) {
    const int attempt = ++attempts[i];
    if (attempt >= max_attempts) {
      out.park.emplace_back(i, why);
    } else {
      out.retry.push_back(i);
      if (!msgs[i].event.id.is_nil()) out.forget.push_back(msgs[i].event.id);
    }
    out.failed.push_back({i, attempt, std::move(why)});
  }
  // Not an attempt: taken again after the pause, in log order with the failed ones.
  for (std::size_t i : out.down) {
    out.retry.push_back(i);
    if (!msgs[i].event.id.is_nil()) out.forget.push_back(msgs[i].event.id);
  }
  std::sort(out.retry.begin(), out.retry.end());
  return out;
}

Duration DestinationPause::probe_cap() const {
  return std::clamp(backoff_max_, kProbeFloor, kProbeCap);
}

std::optional<std::string> DestinationPause::unavailable(const std::string& why,
                                                         Duration retry_after) {
  const bool was_down = down_;
  step_ = was_down ? std::min(probe_cap(), step_ * 2) : std::min(kProbeFirst, probe_cap());
  const Duration wait = std::min(probe_cap(), std::max(step_, retry_after));
  thread_local std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<std::int64_t> jitter(0, wait.count() / 10);
  wait_ = wait + Duration{jitter(rng)};
  if (was_down) return std::nullopt;
  down_ = true;
  since_ = SteadyClock::now();
  probes_ = 0;
  why_ = why;
  return "destination down since " + format_rfc3339(outpost::now()) + ": " + why +
         "; its messages wait (no attempt counted, nothing parked); probing with one message in " +
         std::to_string(wait.count()) + " ms, then backing off to every " +
         std::to_string(probe_cap().count()) + " ms";
}

std::optional<std::string> DestinationPause::answered() {
  if (!down_) return std::nullopt;
  down_ = false;
  char took[32];
  std::snprintf(took, sizeof took, "%.1f",
                std::chrono::duration<double>(SteadyClock::now() - since_).count());
  return "destination back after " + std::string(took) + " s (" + std::to_string(probes_) +
         (probes_ == 1 ? " probe" : " probes") + "); consuming again";
}

}  // namespace outpost::consume
