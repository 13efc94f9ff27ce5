#pragma once
// Helpers shared by the sinks: failure texts that name their class, and for the broker sinks
// (kafka, redis_stream, nats), which send a whole batch and then turn the broker's
// confirmations into per-event results, the hold-back rule.

#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cloudevents.h"
#include "outpost/event.h"
#include "outpost/sink.h"

namespace outpost::core {

// Every failure a sink reports names its class first (docs/sinks.md, "Failure classes"), so the
// event's last error and the logs say whether the destination was down or refused the event:
// "unavailable: connection refused (POST http://...)", "refused: HTTP 404: no such hook".
inline DeliveryResult unavailable(const std::string& why, Duration retry_after = Duration{0}) {
  return DeliveryResult::unavailable("unavailable: " + why, retry_after);
}
inline DeliveryResult refused(const std::string& why) {
  return DeliveryResult::failed("refused: " + why);
}
// An event a sink did not send because an earlier delivery of the same call found the
// destination unavailable: trying it too would only wait for the same timeout again.
inline DeliveryResult not_sent_while_unavailable(const DeliveryResult& first) {
  return DeliveryResult::unavailable(
      "unavailable: not sent, the destination was found unavailable earlier in this batch",
      first.retry_after);
}

// Replaces every "{type}" in a topic/stream/subject template, e.g. "events.{type}".
inline std::string render_type_template(const std::string& tpl, const std::string& type) {
  auto pos = tpl.find("{type}");
  if (pos == std::string::npos) return tpl;
  std::string out = tpl;
  while (pos != std::string::npos) {
    out.replace(pos, 6, type);
    pos = out.find("{type}", pos + type.size());
  }
  return out;
}

// Sink contract (sink.h): once an event of a key failed, was unavailable or skipped, the later
// events of that key in the same call are reported `skipped`, so the relay releases them instead
// of acking them out of order.
inline void hold_back_failed_keys(std::span<const StoredEvent> events,
                                  std::vector<DeliveryResult>& results) {
  std::set<std::string_view> failed;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& key = events[i].key;
    if (key.empty()) continue;
    if (failed.contains(key))
      results[i] = DeliveryResult::held_back(key);
    else if (!results[i].ok())
      failed.insert(key);
  }
}

}  // namespace outpost::core
