#include "outpost/json.h"

#include <nlohmann/json.hpp>

#include "outpost/error.h"

namespace outpost {
namespace {

using nlohmann::json;

json payload_value(const std::string& payload) {
  // Embed JSON payloads as values so consumers read them without a second decode; anything else
  // travels as a string.
  json v = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return json(payload);
  return v;
}

json base_object(const Event& e) {
  json j = json::object();
  j["id"] = e.id.str();
  j["type"] = e.type;
  j["key"] = e.key;
  j["payload"] = payload_value(e.payload);
  j["occurred_at"] = format_rfc3339(e.occurred_at);
  json h = json::object();
  for (const auto& [k, v] : e.headers) h[k] = v;
  j["headers"] = std::move(h);
  return j;
}

std::string dump(const json& j) {
  // Invalid UTF-8 in a string payload or header is replaced rather than throwing mid-batch.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string to_json(const Event& event) { return dump(base_object(event)); }

std::string to_json(const StoredEvent& event) {
  json j = base_object(event);
  j["attempts"] = event.attempts;
  return dump(j);
}

Event event_from_json(std::string_view line) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded()) throw ConfigError("event JSON: not valid JSON");
  if (!j.is_object()) throw ConfigError("event JSON: expected an object");
  Event e;
  auto type = j.find("type");
  if (type == j.end() || !type->is_string() || type->get<std::string>().empty())
    throw ConfigError("event JSON: field 'type' is required and must be a non-empty string");
  e.type = type->get<std::string>();
  auto payload = j.find("payload");
  if (payload == j.end()) throw ConfigError("event JSON: field 'payload' is required");
  e.payload = payload->is_string() ? payload->get<std::string>() : dump(*payload);
  if (auto it = j.find("id"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw ConfigError("event JSON: field 'id' must be a UUID string");
    auto id = EventId::parse(it->get<std::string>());
    if (!id) throw ConfigError("event JSON: field 'id' is not a UUID: " + it->get<std::string>());
    e.id = *id;
  }
  if (auto it = j.find("key"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw ConfigError("event JSON: field 'key' must be a string");
    e.key = it->get<std::string>();
  }
  if (auto it = j.find("occurred_at"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw ConfigError("event JSON: field 'occurred_at' must be a string");
    auto t = parse_rfc3339(it->get<std::string>());
    if (!t) throw ConfigError("event JSON: field 'occurred_at' is not RFC 3339");
    e.occurred_at = *t;
  }
  if (auto it = j.find("headers"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw ConfigError("event JSON: field 'headers' must be an object");
    for (auto& [k, v] : it->items()) {
      if (!v.is_string())
        throw ConfigError("event JSON: header '" + k + "' must have a string value");
      e.headers.emplace(k, v.get<std::string>());
    }
  }
  return e;
}

}  // namespace outpost
