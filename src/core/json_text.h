#pragma once
// The text-level pieces of the JSON encoding of events (docs/cli.md, "JSON encoding"), shared by
// its writer (json.cpp) and its reader (json_read.cpp): string escaping, base64 and whitespace.

#include <cstddef>
#include <string>
#include <string_view>

namespace outpost::core {

// Appends `s` as a JSON string, escaped the way nlohmann::json::dump does; bytes that are not
// valid UTF-8 become U+FFFD.
void append_json_string(std::string& out, std::string_view s);

// Appends the standard base64 of `bytes`, padded with '='.
void append_base64(std::string& out, std::string_view bytes);

// Strict: the standard alphabet, padding required, no whitespace, no stray bits. false when
// `text` is not the base64 of anything.
bool decode_base64(std::string_view text, std::string& out);

// A payload is JSON as given. The parser skips a UTF-8 byte order mark before the text, but the
// stored bytes would keep it, and a listing writing the payload as a JSON value would then write
// a line that is not JSON: a payload that starts with one is not JSON (text, if it is UTF-8).
inline bool starts_with_utf8_bom(std::string_view s) {
  return s.starts_with("\xEF\xBB\xBF");
}

inline bool is_json_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// The JSON encoding is one event per line. In valid JSON a line break can only be whitespace
// between tokens (inside strings it is escaped), so turning it into a space changes no value.
// Applied where a JSON value payload is read (emit -) and where it is written, so what is stored
// is what every listing prints and a printed line re-emitted gives back the same line.
void line_breaks_to_spaces(std::string& s, std::size_t from = 0);

}  // namespace outpost::core
