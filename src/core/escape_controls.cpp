#include "escape_controls.h"

#include <cstdio>

namespace outpost {

// A text log line carries text from outside (event types, a webhook's error body, a broker's
// message): a newline there would forge a log line and an escape sequence would reach the
// operator's terminal. C0 controls, DEL and C1 controls are written as escapes (\n, \r, \t,
// \xHH, \u0080-\u009f; a byte that is not UTF-8 as \xHH); JSON logs escape them already.
std::string escape_controls(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [&out](unsigned value, const char* prefix, int digits) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%s%0*x", prefix, digits, value);
    out += buf;
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7f) {
      hex(c, "\\x", 2);
      ++i;
    } else if (c < 0x80) {
      out += char(c);
      ++i;
    } else {
      // A whole UTF-8 sequence is kept, but for U+0080-U+009F (C1, e.g. CSI U+009B).
      std::size_t n = c >= 0xF0 && c <= 0xF4   ? 4
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xC2 && c <= 0xDF ? 2
                                               : 0;
      bool valid = n > 0 && i + n <= text.size();
      for (std::size_t k = 1; valid && k < n; ++k)
        valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
      if (!valid) {
        hex(c, "\\x", 2);
        ++i;
      } else if (c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {
        hex(static_cast<unsigned char>(text[i + 1]), "\\u00", 2);
        i += 2;
      } else {
        out.append(text, i, n);
        i += n;
      }
    }
  }
  return out;
}

}  // namespace outpost
