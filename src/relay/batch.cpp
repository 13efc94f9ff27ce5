#include "batch.h"

#include <algorithm>
#include <optional>

#include "outpost/relay.h"

namespace outpost::relay_detail {

void Batch::reset_decisions() {
  use_subset = false;
  subset.clear();
  results.clear();
  acks.clear();
  nacks.clear();
  releases.clear();
  n_failed = n_dead = 0;
  abandoned = false;
  n_unavailable = 0;
  unavailable_why.clear();
  retry_after = Duration{0};
  answered = false;
  lease_ran_out = false;
  settle_retried = false;
}

std::string describe(const StoredEvent& e) {
  std::string s = "event " + e.id.str() + " (type '" + e.type + "'";
  if (!e.key.empty()) s += ", key '" + e.key + "'";
  return s + ")";
}

void prepare(Batch& batch, int max_crashes, const DeliveryErrorFn& report) {
  batch.reset_decisions();
  const auto& events = batch.claimed.events;
  if (std::none_of(events.begin(), events.end(),
                   [&](const StoredEvent& e) { return e.crashes >= max_crashes; }))
    return;
  batch.use_subset = true;
  for (const auto& e : events) {
    if (e.crashes < max_crashes) {
      batch.subset.push_back(e);
      continue;
    }
    std::string why = "dead-lettered after " + std::to_string(e.crashes) +
                      " claims whose lease expired unsettled (max_crashes " +
                      std::to_string(max_crashes) + "): the relay died or hung while delivering it";
    report(describe(e) + " " + why, e);
    batch.nacks.push_back(Nack{e.id, std::move(why), std::nullopt});
    ++batch.n_dead;
  }
}

void decide(Batch& batch, const DecideRules& rules, const DeliveryErrorFn& report) {
  auto events = batch.to_deliver();
  if (events.empty()) return;
  if (batch.results.size() != events.size()) {
    std::string why = "sink '" + std::string(rules.sink_name) + "' returned " +
                      std::to_string(batch.results.size()) + " results for " +
                      std::to_string(events.size()) + " events";
    batch.results.assign(events.size(), DeliveryResult::failed(why));
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const StoredEvent& e = events[i];
    DeliveryResult& r = batch.results[i];
    switch (r.status) {
      case DeliveryResult::Status::delivered:
        batch.answered = true;
        batch.acks.push_back(e.id);
        break;
      case DeliveryResult::Status::skipped:
        batch.releases.push_back(e.id);
        break;
      case DeliveryResult::Status::unavailable:
        // Not this event's fault: no attempt counted; the relay pauses the sink (docs/relay.md,
        // "Pauses").
        if (batch.n_unavailable++ == 0) batch.unavailable_why = r.error;
        batch.retry_after = std::max(batch.retry_after, r.retry_after);
        batch.releases.push_back(e.id);
        break;
      case DeliveryResult::Status::failed: {
        if (rules.stopping) {
          // Cut short by the stop (a request given up, or timing out while draining): not
          // this event's fault, so no attempt is counted (docs/relay.md).
          batch.releases.push_back(e.id);
          break;
        }
        batch.answered = true;  // refused: the destination is there
        ++batch.n_failed;
        std::optional<Duration> retry_in;
        std::string note;
        if (e.attempts < rules.max_attempts) {
          retry_in = backoff_delay(e.attempts, rules.backoff_base, rules.backoff_max);
          note = "; retry in " + std::to_string(retry_in->count()) + " ms";
        } else {
          ++batch.n_dead;
          note = "; dead-lettered";
        }
        report(describe(e) + " attempt " + std::to_string(e.attempts) + "/" +
                   std::to_string(rules.max_attempts) + " failed: " + r.error + note,
               e);
        batch.nacks.push_back(Nack{e.id, std::move(r.error), retry_in});
        break;
      }
    }
  }
}

}  // namespace outpost::relay_detail
