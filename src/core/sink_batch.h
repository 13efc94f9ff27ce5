#pragma once
// Helpers shared by the broker sinks (kafka, redis_stream, nats), which send a whole batch and
// then turn the broker's confirmations into per-event results.

#include <chrono>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cloudevents.h"
#include "outpost/event.h"
#include "outpost/sink.h"

namespace outpost::core {

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

// Sink contract (sink.h): once an event of a key failed, the later events of that key in the
// same call are reported `skipped`, so the relay releases them instead of acking them out of order.
inline void hold_back_failed_keys(std::span<const StoredEvent> events,
                                  std::vector<DeliveryResult>& results) {
  std::set<std::string_view> failed;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& key = events[i].key;
    if (key.empty()) continue;
    if (failed.contains(key))
      results[i] =
          DeliveryResult::skipped("an earlier event of key '" + key + "' failed in this batch");
    else if (!results[i].ok())
      failed.insert(key);
  }
}

// format_rfc3339() without an allocation and a snprintf per event: the date and time up to the
// seconds are formatted once per second of occurred_at, the microseconds by hand. The view stays
// valid (and NUL-terminated) until the next call.
class Rfc3339Formatter {
 public:
  std::string_view format(TimePoint t) {
    auto us = t.time_since_epoch().count();
    std::int64_t secs = us / 1'000'000;
    std::int64_t frac = us % 1'000'000;
    if (frac < 0) {
      frac += 1'000'000;
      --secs;
    }
    if (secs != secs_ || text_.empty()) {
      text_ = format_rfc3339(TimePoint{std::chrono::seconds{secs}});  // "...SS.000000Z"
      secs_ = secs;
    }
    if (text_.size() < 8) return text_;              // not the expected shape: leave it alone
    char* digits = text_.data() + text_.size() - 7;  // the 6 digits before the Z
    for (int i = 5; i >= 0; --i) {
      digits[i] = static_cast<char>('0' + frac % 10);
      frac /= 10;
    }
    return text_;
  }

 private:
  std::int64_t secs_ = 0;
  std::string text_;
};

// EventId::str() into a caller's buffer: canonical lowercase 8-4-4-4-12, NUL-terminated.
inline std::string_view format_event_id(const EventId& id, char (&out)[37]) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto& b = id.bytes();
  std::size_t n = 0;
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out[n++] = '-';
    out[n++] = kHex[b[i] >> 4];
    out[n++] = kHex[b[i] & 0xF];
  }
  out[n] = '\0';
  return {out, n};
}

// Calls add(name, value) for each CloudEvents binary-mode header of `event`: the same names,
// values and order as core::cloudevents_headers(event), without building strings per event.
// Both views are NUL-terminated and valid only during the call. `id` is the event id as
// formatted by format_event_id; `scratch` holds the user header names.
template <class Add>
void for_each_cloudevents_header(const Event& event, std::string_view id, Rfc3339Formatter& time,
                                 std::string& scratch, Add&& add) {
  add(std::string_view("ce-specversion"), std::string_view("1.0"));
  add(std::string_view("ce-id"), id);
  add(std::string_view("ce-type"), std::string_view(event.type));
  add(std::string_view("ce-source"), kDefaultCloudEventsSource);
  add(std::string_view("ce-time"), time.format(event.occurred_at));
  if (!event.key.empty()) add(std::string_view("ce-partitionkey"), std::string_view(event.key));
  for (const auto& [name, value] : event.headers) {
    scratch = "ce-";
    scratch += cloudevents_attribute_name(name);
    const std::string_view attr = std::string_view(scratch).substr(3);
    if (attr.empty() || attr == "id" || attr == "type" || attr == "source" || attr == "time" ||
        attr == "specversion" || attr == "partitionkey")
      continue;  // never let a user header overwrite a required attribute
    add(std::string_view(scratch), std::string_view(value));
  }
}

}  // namespace outpost::core
