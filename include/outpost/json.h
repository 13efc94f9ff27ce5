#pragma once
// The one JSON encoding of an event (docs/cli.md, "JSON encoding"), used by the file sink,
// `outpost emit -`, `outpost events list|dead` and the consumers:
//   {"attempts":N,"headers":{…},"id":"…","key":"…","occurred_at":"RFC 3339",
//    "payload":<JSON value or string> | "payload_base64":"…","type":"…"}
// The payload keeps its kind (event.h, PayloadKind, from the `content_type` header):
//   json    "payload": the JSON value, its text embedded as stored (numbers keep every digit);
//   text    "payload": a JSON string;
//   binary  "payload_base64": standard base64 with padding.
// A json payload whose bytes are not JSON, or a text payload that is not UTF-8, goes out in the
// nearest form that keeps the bytes (a string, else base64). A json payload that is a JSON
// string carries "content_type":"application/json" in its headers so it does not read back as
// text. Invalid UTF-8 in type, key or headers (possible only in stores written by older
// versions) is shown as U+FFFD.
//
// Input (event_from_json): only `type` and `payload` (or `payload_base64`) are required; a given
// `id` must be a UUID and is kept. A JSON string payload is text (header content_type set to
// text/plain; charset=utf-8 unless the event says otherwise); any other JSON value is json and
// keeps its exact text; payload_base64 is binary (application/octet-stream unless said).
// What cannot be kept faithfully is refused (ConfigError naming the field): a JSON value payload
// under a content_type that is not JSON, invalid base64, both payload fields or neither. A line
// is one JSON object and nothing else: anything after it but whitespace (a NUL byte included,
// which JSON parsers take for the end of the text) is refused, naming the byte.
#include <string>
#include <string_view>

#include "outpost/event.h"

namespace outpost {

std::string to_json(const StoredEvent& event);
std::string to_json(const Event& event);          // attempts omitted
std::string to_json(const DeadEvent& event);      // plus "dead_at" and "last_error"
std::string to_json(const ArchivedEvent& event);  // plus "archived_at"

// to_json(event) appended to `out`, without building temporaries (the file sink's hot path).
void append_json(std::string& out, const StoredEvent& event);

// How event_from_json treats input that outpost itself would not write (docs/cli.md):
//   tolerant  reading outpost's own output (the consumers of a log): a field it does not know is
//             ignored, so a log written by a newer version stays readable;
//   strict    new input (`emit -`): a field it does not know is refused, naming it and the known
//             field it is close to ("kye": did you mean 'key'?), since a misspelt `key` would
//             store the event without its order; and the bytes of `payload_base64` under a
//             content_type must be what it says (check_payload_kind).
// The fields printed for stored events but not read back (`attempts`, `dead_at`, `last_error`)
// are known fields: a line printed by `events list|dead` is accepted by both.
enum class JsonInput { tolerant, strict };

// Throws ConfigError naming the bad field.
Event event_from_json(std::string_view line, JsonInput input = JsonInput::tolerant);

// One rule for payload bytes given without the JSON encoding around them (`emit --payload`) or
// with a content_type of their own (`payload_base64` on stdin): the bytes must be what their
// kind says (outpost/event.h, PayloadKind). `what` starts each message ("emit: --payload").
//   no content_type  the kind is read from the bytes: JSON when they are one JSON value (nothing
//                    added); refused when they start like JSON (`{` or `[` after whitespace) and
//                    do not parse, naming where (a truncated object stored as text would reach
//                    every consumer as a string); refused when they are not UTF-8 (text is
//                    UTF-8; the message says how to give bytes); otherwise text, and the header
//                    content_type: text/plain; charset=utf-8 is added;
//   json             must be one JSON value;
//   text             must be UTF-8, unless the content_type names another charset;
//   binary           any bytes.
// A number beyond double range is a ConfigError either way (is_json_value).
void check_payload_kind(Event& event, std::string_view what);

// Whether `text` is one JSON value that outpost carries as a JSON payload (`emit --payload`).
// One rule with event_from_json: a number beyond the range of an IEEE 754 double (`1e400`) is a
// ConfigError, not JSON and not text. RFC 8259 lets parsers refuse such numbers and the readers
// of outpost's JSON do (its own consumers, most libraries), so keeping it would write lines
// nobody can read, and storing it as text would change its kind; given as a string (or with a
// text content_type) it is kept as text.
bool is_json_value(std::string_view text);

}  // namespace outpost
