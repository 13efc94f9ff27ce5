#pragma once
// CloudEvents 1.0 binary-mode mapping: the event's attributes travel as transport headers and
// the payload as the body. Used by the HTTP sink (as HTTP headers) and broker sinks (as
// Kafka/NATS headers).
//   ce-specversion: 1.0        ce-id: <event id>       ce-type: <type>
//   ce-source: <source>        ce-time: <occurred_at>  ce-partitionkey: <key> (when non-empty)
//   ce-<name>: <value>         for each outpost header; the name is lowercased and reduced to
//                              [a-z0-9] as CloudEvents requires (correlation_id -> correlationid)

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outpost/event.h"

namespace outpost::core {

inline constexpr std::string_view kDefaultCloudEventsSource = "outpost";

std::vector<std::pair<std::string, std::string>> cloudevents_headers(
    const Event& event, std::string_view source = kDefaultCloudEventsSource);

// Lowercase [a-z0-9] only; empty result means the header is not representable.
std::string cloudevents_attribute_name(std::string_view header);

}  // namespace outpost::core
