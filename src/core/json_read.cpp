// The JSON encoding of events, reading (docs/cli.md, "JSON encoding"): event_from_json, the
// payload kind check and is_json_value (json.h). Writing it is json.cpp.

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/edit_distance.h"
#include "core/json_read.h"
#include "core/json_text.h"
#include "core/utf8.h"
#include "outpost/error.h"
#include "outpost/json.h"

namespace outpost {
namespace {

using nlohmann::json;

// The text of the value of the last member `name` of the object `s` (valid JSON, checked by the
// caller), as written: a JSON value payload is kept byte for byte (numbers of any precision).
std::string_view raw_member(std::string_view s, std::string_view name) {
  std::size_t i = 0;
  const std::size_t n = s.size();
  auto skip_space = [&] {
    while (i < n && core::is_json_space(s[i])) ++i;
  };
  auto skip_string = [&] {  // at the opening quote
    for (++i; i < n && s[i] != '"'; ++i)
      if (s[i] == '\\') ++i;
    ++i;
  };
  auto skip_value = [&] {
    if (i < n && s[i] == '"') return skip_string();
    if (i < n && (s[i] == '{' || s[i] == '[')) {
      int depth = 0;
      while (i < n) {
        if (s[i] == '"') {
          skip_string();
          continue;
        }
        if (s[i] == '{' || s[i] == '[') ++depth;
        if (s[i] == '}' || s[i] == ']') --depth;
        ++i;
        if (depth == 0) return;
      }
      return;
    }
    while (i < n && s[i] != ',' && s[i] != '}' && !core::is_json_space(s[i])) ++i;
  };
  std::string_view found;
  skip_space();
  ++i;  // '{'
  while (i < n) {
    skip_space();
    if (i >= n || s[i] != '"') break;
    std::size_t k0 = i;
    skip_string();
    std::string_view key = s.substr(k0, std::min(i, n) - k0);
    skip_space();
    ++i;  // ':'
    skip_space();
    std::size_t v0 = i;
    skip_value();
    std::string_view value = s.substr(std::min(v0, n), std::min(i, n) - std::min(v0, n));
    bool match = key.find('\\') == std::string_view::npos
                     ? key.size() >= 2 && key.substr(1, key.size() - 2) == name
                     : json::parse(key, nullptr, false) == std::string(name);
    if (match) found = value;
    skip_space();
    if (i < n && s[i] == ',') ++i;
  }
  return found;
}

// The fields of the JSON encoding (docs/cli.md), in one place: a new field is one line here
// (and its reading in event_from_json). `read`: taken from input. The others are printed for
// stored events (`events list|dead`, the file sink) and accepted on input without being read,
// so that a printed line can be emitted again.
struct Field {
  std::string_view name;
  bool read;
};
constexpr Field kFields[] = {
    {"archived_at", false}, {"attempts", false},   {"dead_at", false}, {"deliver_at", true},
    {"headers", true},      {"id", true},          {"key", true},      {"key_seq", false},
    {"last_error", false},  {"occurred_at", true}, {"payload", true},  {"payload_base64", true},
    {"type", true},
};

// A name from the input as it can be shown in a message: escaped as in JSON, at most 64 bytes.
std::string shown(std::string_view name) {
  std::string out;
  core::append_json_string(out, name.substr(0, 64));
  out = "'" + out.substr(1, out.size() - 2) + (name.size() > 64 ? "...'" : "'");
  return out;
}

// JsonInput::strict: every field of `object` is a field of the encoding. A misspelt field would
// otherwise be dropped in silence ("kye": an event without a key, so without order).
void refuse_unknown_fields(const json& object) {
  std::vector<std::string> unknown;
  bool all_close = true;
  for (const auto& item : object.items()) {
    const std::string& name = item.key();  // not a structured binding: clang 14 cannot capture one
    if (std::any_of(std::begin(kFields), std::end(kFields),
                    [&](const Field& f) { return f.name == name; }))
      continue;
    // The closest field that is read, when it is close: one edit for short names, two else.
    const std::size_t limit = name.size() <= 3 ? 1 : 2;
    std::string_view close;
    std::size_t best = limit + 1;
    for (const Field& f : kFields) {
      if (!f.read) continue;
      if (std::size_t d = core::edit_distance(name, f.name, core::Case::ignored); d < best)
        best = d, close = f.name;
    }
    unknown.push_back(shown(name) +
                      (close.empty() ? "" : " (did you mean '" + std::string(close) + "'?)"));
    all_close = all_close && !close.empty();
  }
  if (unknown.empty()) return;
  std::string message =
      unknown.size() == 1 ? "event JSON: unknown field " : "event JSON: unknown fields ";
  for (std::size_t i = 0; i < unknown.size(); ++i) message += (i ? ", " : "") + unknown[i];
  if (!all_close) {
    message += "; the fields are";
    const char* sep = " ";
    for (const Field& f : kFields)
      if (f.read) message += sep + std::string(f.name), sep = ", ";
  }
  throw ConfigError(message);
}

// Where and why `text` is not JSON, from the parser's error: "at byte N: <its words>", N from 0
// as in every other message naming a byte.
std::string where_not_json(const json::parse_error& e, std::string_view text) {
  const std::size_t at = e.byte > 0 ? e.byte - 1 : 0;
  const std::string where = "at byte " + std::to_string(at);
  // The parser reads a NUL byte as the end of the text: say what is there.
  if (at < text.size() && text[at] == '\0')
    return where + ": a NUL byte (JSON text cannot hold one; in a string it is written \\u0000)";
  // "[json.exception.parse_error.101] parse error at line 1, column 7: syntax error while ..."
  std::string_view words = e.what();
  if (auto p = words.find("parse error at "); p != std::string_view::npos)
    if (auto colon = words.find(": ", p); colon != std::string_view::npos)
      words.remove_prefix(colon + 2);
  return where + (at >= text.size() ? " (the end): " : ": ") + std::string(words);
}

// `text` parsed; discarded when it is not JSON, and then `why` (when given) says where and why.
// A number beyond double range is a ConfigError naming it (is_json_value in json.h says why).
json parse_json(std::string_view text, std::string_view what, std::string* why = nullptr) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    if (why) *why = where_not_json(e, text);
    return json(json::value_t::discarded);
  } catch (const json::out_of_range& e) {
    // Any other out_of_range is "not JSON" like every parse error (a rethrow here would escape
    // the json::exception handler below, which does not see exceptions from its siblings).
    if (e.id != 406) return json(json::value_t::discarded);
    // nlohmann: "[json.exception.out_of_range.406] number overflow parsing '1e400'"
    std::string_view msg = e.what();
    auto quote = msg.find('\'');
    std::string number(quote == std::string_view::npos ? msg : msg.substr(quote));
    throw ConfigError(std::string(what) + "number " + number.substr(0, 40) +
                      " is beyond the range of a JSON number (IEEE 754 double): give it as a "
                      "string, or with a text content_type, to keep it as text");
  } catch (const json::exception&) {
    return json(json::value_t::discarded);
  }
}

// A payload parsed as JSON: as parse_json, but a leading UTF-8 byte order mark is not JSON here
// (core::starts_with_utf8_bom says why).
json parse_payload_json(std::string_view payload, std::string_view what, std::string* why) {
  if (core::starts_with_utf8_bom(payload)) {
    if (why) *why = "at byte 0: a UTF-8 byte order mark (EF BB BF) before the JSON";
    return json(json::value_t::discarded);
  }
  return parse_json(payload, what, why);
}

std::size_t first_non_space(std::string_view s, std::size_t from = 0) {
  while (from < s.size() && core::is_json_space(s[from])) ++from;
  return from;
}

// Where the object or array that `s` starts with (after whitespace) ends: the index after its
// closing bracket, found by counting brackets outside strings; npos when `s` does not start with
// one or it never closes. Only where it ends: whether it is JSON is the parser's to say.
std::size_t end_of_first_value(std::string_view s) {
  // The parser skips a UTF-8 byte order mark before the text; so does this.
  std::size_t i = first_non_space(s, s.starts_with("\xEF\xBB\xBF") ? 3 : 0);
  if (i == s.size() || (s[i] != '{' && s[i] != '[')) return std::string_view::npos;
  std::size_t depth = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      if (i >= s.size()) break;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// The byte at s[i] as a message shows it.
std::string shown_byte(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c == 0) return "a NUL byte";
  if (c > 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", c);
  return std::string("byte value ") + hex;
}

// Whether a text content_type names a charset other than UTF-8 ("text/plain; charset=latin1"):
// its bytes are then that charset's, not UTF-8.
bool names_other_charset(std::string_view content_type) {
  std::string t(content_type);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto p = t.find("charset=");
  if (p == std::string::npos) return false;
  std::string v = t.substr(p + 8, t.find(';', p) - (p + 8));
  std::erase_if(v, [](char c) { return c == '"' || c == ' ' || c == '\t'; });
  return !v.empty() && v != "utf-8" && v != "utf8";
}

}  // namespace

bool is_json_value(std::string_view text) {
  return !parse_json(text, "").is_discarded();
}

void check_payload_kind(Event& e, std::string_view what) {
  const std::string w(what);
  const auto said = e.headers.find(header::kContentType);
  const std::size_t bad_utf8 = core::utf8_invalid_at(e.payload);
  auto not_utf8 = [&] {
    return w + " is not UTF-8 (" + shown_byte(e.payload, bad_utf8) + " at byte " +
           std::to_string(bad_utf8) + ")";
  };
  std::string why;
  if (said == e.headers.end()) {
    if (!parse_payload_json(e.payload, w + ": ", &why).is_discarded()) return;  // JSON, default
    const std::size_t first = first_non_space(e.payload);
    if (first < e.payload.size() && (e.payload[first] == '{' || e.payload[first] == '['))
      throw ConfigError(w + " starts like JSON but is not JSON " + why +
                        " (to store it as text, say so: --header content_type=text/plain)");
    if (bad_utf8 != e.payload.size())
      throw ConfigError(not_utf8() +
                        ", so it is neither JSON nor text: bytes are stored with a content type "
                        "that says what they are, e.g. --header "
                        "content_type=application/octet-stream, or on stdin (emit -) as "
                        "\"payload_base64\"");
    e.headers.emplace(header::kContentType, kTextContentType);
    return;
  }
  const std::string& type = said->second;
  switch (payload_kind(type)) {
    case PayloadKind::json:
      if (parse_payload_json(e.payload, w + ": ", &why).is_discarded())
        throw ConfigError(w + " is not JSON " + why + " but content_type '" + type +
                          "' says it is");
      return;
    case PayloadKind::text:
      if (bad_utf8 != e.payload.size() && !names_other_charset(type))
        throw ConfigError(not_utf8() + " but content_type '" + type +
                          "' says it is text, which is UTF-8 unless a charset says otherwise: "
                          "give the charset, or a binary type (application/octet-stream)");
      return;
    case PayloadKind::binary:
      return;
  }
}

Event event_from_json(std::string_view line, JsonInput input) {
  return core::event_from_json(line, input, nullptr);
}

}  // namespace outpost

namespace outpost::core {

Event event_from_json(std::string_view line, JsonInput input, std::int64_t* key_seq) {
  // One line, one object: what follows it must not be dropped in silence. The parser itself
  // would stop at a NUL byte and take the object before it for the whole line.
  std::string_view text = line;
  std::size_t after = std::string_view::npos;
  if (std::size_t end = end_of_first_value(line); end != std::string_view::npos) {
    after = first_non_space(line, end);
    if (after < line.size()) text = line.substr(0, end);
  }
  std::string why;
  json j = parse_json(text, "event JSON: ", &why);
  if (j.is_discarded()) throw ConfigError("event JSON: not valid JSON " + why);
  if (text.size() < line.size())
    throw ConfigError("event JSON: byte " + std::to_string(after) + " is " +
                      shown_byte(line, after) +
                      " after the JSON value: a line holds one event and nothing else");
  if (!j.is_object()) throw ConfigError("event JSON: expected an object");
  if (input == JsonInput::strict) refuse_unknown_fields(j);
  Event e;
  auto type = j.find("type");
  if (type == j.end() || !type->is_string() || type->get<std::string>().empty())
    throw ConfigError("event JSON: field 'type' is required and must be a non-empty string");
  e.type = type->get<std::string>();
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
  if (auto it = j.find("deliver_at"); it != j.end() && !it->is_null()) {
    if (!it->is_string()) throw ConfigError("event JSON: field 'deliver_at' must be a string");
    auto t = parse_rfc3339(it->get<std::string>());
    if (!t) throw ConfigError("event JSON: field 'deliver_at' is not RFC 3339");
    e.deliver_at = *t;
  }
  // The key position (outpost/key_seq.h), for the consumers of a log: only a keyed event has one.
  if (auto it = j.find("key_seq"); key_seq && it != j.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 1)
      throw ConfigError("event JSON: field 'key_seq' must be a positive integer");
    if (!e.key.empty()) *key_seq = it->get<std::int64_t>();
  }
  if (auto it = j.find("headers"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw ConfigError("event JSON: field 'headers' must be an object");
    for (auto& [k, v] : it->items()) {
      if (!v.is_string())
        throw ConfigError("event JSON: header '" + k + "' must have a string value");
      e.headers.emplace(k, v.get<std::string>());
    }
  }

  const auto payload = j.find("payload");
  const auto base64 = j.find("payload_base64");
  const bool said = e.headers.contains(header::kContentType);
  if (payload != j.end() && base64 != j.end())
    throw ConfigError("event JSON: give 'payload' or 'payload_base64', not both");
  if (base64 != j.end()) {
    if (!base64->is_string() ||
        !core::decode_base64(base64->get_ref<const std::string&>(), e.payload))
      throw ConfigError(
          "event JSON: field 'payload_base64' must be standard base64 (A-Z a-z 0-9 "
          "+ /, padded with =)");
    if (!said)
      e.headers.emplace(header::kContentType, kBinaryContentType);
    else if (input == JsonInput::strict)
      check_payload_kind(e, "event JSON: field 'payload_base64'");
    // JSON bytes are stored as every listing prints them, as a "payload" value is (below).
    if (said && e.payload_kind() == PayloadKind::json && !core::starts_with_utf8_bom(e.payload) &&
        json::accept(e.payload))
      core::line_breaks_to_spaces(e.payload);
    return e;
  }
  if (payload == j.end())
    throw ConfigError("event JSON: field 'payload' (or 'payload_base64') is required");
  const PayloadKind kind = e.payload_kind();
  if (payload->is_string() && !(said && kind == PayloadKind::json)) {
    e.payload = payload->get<std::string>();  // text: the string's characters, nothing else
    if (!said) e.headers.emplace(header::kContentType, kTextContentType);
    return e;
  }
  if (kind != PayloadKind::json)
    throw ConfigError("event JSON: field 'payload' is a JSON value but header 'content_type' is '" +
                      e.headers.at(std::string(header::kContentType)) +
                      "' (give a string, or payload_base64)");
  // The value exactly as written; the parser skipped a byte order mark, and so must the scan.
  std::string_view object = line;
  if (object.starts_with("\xEF\xBB\xBF")) object.remove_prefix(3);
  e.payload = std::string(raw_member(object, "payload"));
  core::line_breaks_to_spaces(
      e.payload);  // only a lone CR can be in a line: whitespace, kept as ' '
  return e;
}

}  // namespace outpost::core
