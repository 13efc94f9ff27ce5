#include "consume/message.h"

#include <charconv>
#include <cstdint>

#include "core/cloudevents.h"
#include "core/json_read.h"
#include "outpost/error.h"
#include "outpost/json.h"
#include "outpost/key_seq.h"

namespace outpost::consume {

Message decode_message(std::string raw, std::string position) {
  Message m;
  m.position = std::move(position);
  try {
    // The key position comes along (outpost/key_seq.h): a handler tells an inversion by it.
    Event e = core::event_from_json(raw, JsonInput::tolerant, &m.event.seq);
    static_cast<Event&>(m.event) = std::move(e);
  } catch (const Error& e) {
    m.parse_error = std::string("not an outpost event: ") + e.what();
  }
  m.raw = std::move(raw);
  return m;
}

void apply_cloudevents_header(Message& m, std::string_view name, std::string_view value,
                              std::string& id_text) {
  if (name == "outpost-id" || (name == "ce-id" && id_text.empty())) {
    id_text = value;
  } else if (name == "ce-type") {
    m.event.type = value;
  } else if (name == "ce-time") {
    if (auto t = parse_rfc3339(value)) m.event.occurred_at = *t;
  } else if (name == "ce-partitionkey") {
    m.event.key = value;
  } else if (name == "content-type") {
    // The payload's kind; application/json is what an event without the header means.
    if (value != "application/json") m.event.headers[std::string(header::kContentType)] = value;
  } else if (name == kKeySeqHeader) {
    std::int64_t seq = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), seq);
    if (ec == std::errc{} && end == value.data() + value.size() && seq > 0) m.event.seq = seq;
  } else if (core::trace_context_header(name)) {
    // The transport's W3C header, for a message that lacks the ce- attribute (which wins).
    m.event.headers.emplace(std::string(name), value);
  } else if (name.starts_with("ce-") && name != "ce-specversion" && name != "ce-source" &&
             name != "ce-id") {
    m.event.headers[std::string(name.substr(3))] = value;
  }
}

void finish_cloudevents_message(Message& m, const std::string& id_text,
                                const std::function<std::string()>& where) {
  if (auto id = EventId::parse(id_text)) m.event.id = *id;
  if (m.event.key.empty()) m.event.seq = 0;  // only a keyed event has a key position
  if (m.event.type.empty() || m.event.id.is_nil())
    m.parse_error = "not an outpost event: " + where() + " has no ce-type or event id";
}

std::string dead_letter_payload(const Message& m) {
  return m.raw.empty() ? to_json(m.event) : m.raw;
}

}  // namespace outpost::consume
