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
}

std::string describe(const StoredEvent& e) {
  std::string s = "event " + e.id.str() + " (type '" + e.type + "'";
  if (!e.key.empty()) s += ", key '" + e.key + "'";
  return s + ")";
}

void prepare(Batch& batch, int max_attempts, const DeliveryErrorFn& report) {
  batch.reset_decisions();
  const auto& events = batch.claimed.events;
  if (std::none_of(events.begin(), events.end(),
                   [&](const StoredEvent& e) { return e.attempts > max_attempts; }))
    return;
  batch.use_subset = true;
  for (const auto& e : events) {
    if (e.attempts <= max_attempts) {
      batch.subset.push_back(e);
      continue;
    }
    std::string why = "gave up after " + std::to_string(e.attempts - 1) + " attempts (max " +
                      std::to_string(max_attempts) +
                      "): its lease expired while it was being delivered (the relay died or hung)";
    report(describe(e) + " dead-lettered: " + why, e);
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
        batch.acks.push_back(e.id);
        break;
      case DeliveryResult::Status::skipped:
      case DeliveryResult::Status::unavailable:  // not this event's fault: no attempt counted
        batch.releases.push_back(e.id);
        break;
      case DeliveryResult::Status::failed: {
        if (rules.stopping) {
          // Cut short by the stop (a request given up, or timing out while draining): not
          // this event's fault, so no attempt is counted (docs/relay.md).
          batch.releases.push_back(e.id);
          break;
        }
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
