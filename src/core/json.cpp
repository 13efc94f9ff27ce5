// The JSON encoding of events, writing (docs/cli.md, "JSON encoding"): to_json and append_json
// (json.h). Reading it is json_read.cpp; the string escaping and base64 that both use are in
// json_text.cpp.

#include "outpost/json.h"

#include <string>

#include <nlohmann/json.hpp>

#include "core/json_text.h"
#include "core/utf8.h"

namespace outpost {
namespace {

using nlohmann::json;

enum class PayloadForm { value, string, base64 };

// How the payload goes out (json.h): the nearest form that keeps the bytes.
PayloadForm payload_form(const Event& e) {
  switch (e.payload_kind()) {
    case PayloadKind::json:
      // accept() checks UTF-8 in strings too; a leading byte order mark it would skip. Bytes
      // that a JSON content type calls JSON but are not (another program's row) go as base64:
      // under that type a string would read back as the JSON text of the string.
      if (!core::starts_with_utf8_bom(e.payload) && json::accept(e.payload))
        return PayloadForm::value;
      if (e.headers.contains(header::kContentType)) return PayloadForm::base64;
      [[fallthrough]];
    case PayloadKind::text:
      return core::valid_utf8(e.payload) ? PayloadForm::string : PayloadForm::base64;
    case PayloadKind::binary:
      break;
  }
  return PayloadForm::base64;
}

// key_seq: the key position of a stored event (outpost/key_seq.h, kKeySeqField), written when the
// event has a key and key_seq > 0.
void append_event(std::string& out, const Event& e, const int* attempts, const DeadEvent* dead,
                  const TimePoint* archived_at = nullptr, std::int64_t key_seq = 0) {
  const PayloadForm form = payload_form(e);
  // A JSON string value with no content_type would read back as text: say it is JSON.
  bool mark_json = false;
  if (form == PayloadForm::value && !e.headers.contains(header::kContentType)) {
    std::size_t first = 0;
    while (first < e.payload.size() && core::is_json_space(e.payload[first])) ++first;
    mark_json = first < e.payload.size() && e.payload[first] == '"';
  }
  out += '{';
  if (archived_at) {
    out += "\"archived_at\":\"";
    out += format_rfc3339(*archived_at);
    out += "\",";
  }
  if (attempts) {
    out += "\"attempts\":";
    out += std::to_string(*attempts);
    out += ',';
  }
  if (dead) {
    out += "\"dead_at\":\"";
    out += format_rfc3339(dead->dead_at);
    out += "\",";
  }
  if (e.deliver_at) {
    out += "\"deliver_at\":\"";
    out += format_rfc3339(*e.deliver_at);
    out += "\",";
  }
  out += "\"headers\":{";
  bool first = true;
  auto header = [&](std::string_view k, std::string_view v) {
    if (!first) out += ',';
    first = false;
    core::append_json_string(out, k);
    out += ':';
    core::append_json_string(out, v);
  };
  for (const auto& [k, v] : e.headers) {
    if (mark_json && k > header::kContentType) {
      header(header::kContentType, kJsonContentType);
      mark_json = false;
    }
    header(k, v);
  }
  if (mark_json) header(header::kContentType, kJsonContentType);
  out += "},\"id\":\"";
  out += e.id.str();
  out += "\",\"key\":";
  core::append_json_string(out, e.key);
  if (key_seq > 0 && !e.key.empty()) {
    out += ",\"key_seq\":";
    out += std::to_string(key_seq);
  }
  if (dead) {
    out += ",\"last_error\":";
    core::append_json_string(out, dead->last_error);
  }
  out += ",\"occurred_at\":\"";
  out += format_rfc3339(e.occurred_at);
  out += '"';
  switch (form) {
    case PayloadForm::value: {
      out += ",\"payload\":";
      std::size_t at = out.size();
      out += e.payload;
      core::line_breaks_to_spaces(out, at);  // a payload appended through the library may have them
      break;
    }
    case PayloadForm::string:
      out += ",\"payload\":";
      core::append_json_string(out, e.payload);
      break;
    case PayloadForm::base64:
      out += ",\"payload_base64\":\"";
      core::append_base64(out, e.payload);
      out += '"';
      break;
  }
  out += ",\"type\":";
  core::append_json_string(out, e.type);
  out += '}';
}

}  // namespace

std::string to_json(const Event& event) {
  std::string out;
  append_event(out, event, nullptr, nullptr);
  return out;
}

std::string to_json(const StoredEvent& event) {
  std::string out;
  append_json(out, event);
  return out;
}

std::string to_json(const ArchivedEvent& event) {
  std::string out;
  append_event(out, event, &event.attempts, nullptr, &event.archived_at);
  return out;
}

std::string to_json(const DeadEvent& event) {
  std::string out;
  append_event(out, event, &event.attempts, &event);
  return out;
}

void append_json(std::string& out, const StoredEvent& event) {
  append_event(out, event, &event.attempts, nullptr, nullptr, event.seq);
}

}  // namespace outpost
