#pragma once
// CloudEvents 1.0 binary-mode mapping, written once: the event's attributes travel as transport
// headers and the payload as the body. Used by the HTTP sink (as HTTP headers) and the broker
// sinks (as Kafka/NATS headers).
//   ce-specversion: 1.0        ce-id: <event id>       ce-type: <type>
//   ce-source: <source>        ce-time: <occurred_at>  ce-partitionkey: <key> (when non-empty)
//   content-type: <datacontenttype>: the event's content_type header, application/json when
//                              absent (outpost/event.h, PayloadKind); HTTP sends it as Content-Type
//   ce-<name>: <value>         for each other outpost header; the name is lowercased and reduced
//                              to [a-z0-9] as CloudEvents requires (correlation_id ->
//                              correlationid)
//   traceparent, tracestate    the W3C trace context headers as tracing libraries read them
//                              (OpenTelemetry's propagators), right after their ce- attribute:
//                              the CloudEvents distributed tracing extension carries the same
//                              value in ce-traceparent and the transport's traceparent for a
//                              single hop (docs/sinks.md, "Trace context")

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/rfc3339.h"
#include "outpost/event.h"

namespace outpost::core {

inline constexpr std::string_view kDefaultCloudEventsSource = "outpost";
inline constexpr std::string_view kCloudEventsContentType = "content-type";

// Lowercase [a-z0-9] only; empty result means the header is not representable.
std::string cloudevents_attribute_name(std::string_view header);

// True for attribute names a user header must never overwrite (id, type, source, time,
// specversion, partitionkey, datacontenttype) or cannot take (empty).
bool reserved_cloudevents_attribute(std::string_view attribute);

// True for the event headers that also travel under their own W3C name (traceparent,
// tracestate): the transport header a consumer's tracing library reads.
inline bool trace_context_header(std::string_view header) {
  return header == header::kTraceparent || header == header::kTracestate;
}

// EventId::str() into a caller's buffer: canonical lowercase 8-4-4-4-12, NUL-terminated.
std::string_view format_event_id(const EventId& id, char (&out)[37]);

// Calls add(name, value) for each binary-mode header of `event`, in the order above, without
// building strings per event. Both views are NUL-terminated and valid only during the call.
// `id` is the event id as formatted by format_event_id; `scratch` holds the user header names.
template <class Add>
void for_each_cloudevents_header(const Event& event, std::string_view id, Rfc3339Formatter& time,
                                 std::string& scratch, Add&& add,
                                 std::string_view source = kDefaultCloudEventsSource) {
  add(std::string_view("ce-specversion"), std::string_view("1.0"));
  add(std::string_view("ce-id"), id);
  add(std::string_view("ce-type"), std::string_view(event.type));
  add(std::string_view("ce-source"), source);
  add(std::string_view("ce-time"), time.format(event.occurred_at));
  if (!event.key.empty()) add(std::string_view("ce-partitionkey"), std::string_view(event.key));
  add(kCloudEventsContentType, event.content_type());
  for (const auto& [name, value] : event.headers) {
    if (name == header::kContentType) continue;  // sent as content-type above
    scratch = "ce-";
    scratch += cloudevents_attribute_name(name);
    if (reserved_cloudevents_attribute(std::string_view(scratch).substr(3)))
      continue;  // never let a user header overwrite a required attribute
    add(std::string_view(scratch), std::string_view(value));
    if (trace_context_header(name)) add(std::string_view(name), std::string_view(value));
  }
}

// The same headers as a list (tests, the HTTP sink).
std::vector<std::pair<std::string, std::string>> cloudevents_headers(
    const Event& event, std::string_view source = kDefaultCloudEventsSource);

}  // namespace outpost::core
