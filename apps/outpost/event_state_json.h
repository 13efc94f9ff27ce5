#pragma once
// One EventState (Store::blocked / Store::leased) as JSON, the same for `outpost events
// blocked|leased` (one object per line) and the dashboard's /api/blocked and /api/leases: times as
// RFC 3339 and as seconds from `at`, the moment the store was asked (negative: in the past).
// The error text goes through redact().

#include <nlohmann/json.hpp>

#include "cli.h"
#include "outpost/store.h"

namespace outpost::cli {

inline nlohmann::json event_state_json(const EventState& e, TimePoint at) {
  auto in_s = [at](TimePoint t) { return double((t - at).count()) / 1e6; };
  nlohmann::json j{{"id", e.id.str()},       {"seq", e.seq},
                   {"type", e.type},         {"key", e.key},
                   {"attempts", e.attempts}, {"last_error", redact(e.last_error)}};
  if (!e.reason.empty()) j["reason"] = e.reason;  // blocked: "failing" or "dead"
  if (e.next_attempt) {
    j["next_attempt"] = format_rfc3339(*e.next_attempt);
    j["next_attempt_in_s"] = in_s(*e.next_attempt);
  }
  if (e.lease_until) {
    j["lease_owner"] = e.lease_owner;
    j["fence"] = e.fence;
    j["lease_until"] = format_rfc3339(*e.lease_until);
    j["lease_expires_in_s"] = in_s(*e.lease_until);
  }
  return j;
}

}  // namespace outpost::cli
