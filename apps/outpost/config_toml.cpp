// See config_toml.h.

#include "config_toml.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string_view>
#include <vector>

#include "core/redact.h"

namespace outpost::cli {

// "FILE:LINE: " for a value of the parsed file.
std::string at(const std::string& file, const toml::value& v) {
  return file + ":" + std::to_string(v.location().line()) + ": ";
}

// An integer value as the file wrote it: toml11 saturates one beyond the 64-bit range at its
// limit, which a message must not show as if the user had written it.
std::string integer_as_written(const toml::value& v) {
  const auto n = v.as_integer();
  if (n != std::numeric_limits<std::int64_t>::max() &&
      n != std::numeric_limits<std::int64_t>::min())
    return std::to_string(n);
  const auto& loc = v.location();
  const std::string& line = loc.line_str();
  if (loc.column() < 1 || loc.column() - 1 + loc.region() > line.size()) return std::to_string(n);
  return line.substr(loc.column() - 1, loc.region());
}

// toml11's error text without the source lines it quotes: the quoted line may hold a secret
// (`store = "redis://PASSWORD@host"`, `admin_token = "..."`), and an error message must never
// print one (docs/cli.md, "Secrets"). Kept: toml11's message and the comments it attaches to each
// underlined location ("expected value", "defined here"), and its hints. toml11's own text names
// no values, but any URL left in it still goes through redact_url.
std::string toml_error_without_source(const std::string& what) {
  std::istringstream lines(what);
  std::string line;
  std::vector<std::string> parts;
  while (std::getline(lines, line)) {
    std::string_view l(line);
    if (l.starts_with("[error]")) {
      l.remove_prefix(7);
    } else if (l.starts_with("Hint:")) {
    } else {
      // " 3 | <source line>" is dropped; "   |    ^--- comment" / "   |  ~~~ comment" keeps
      // the comment; " --> file", " |" and " ..." are layout.
      auto bar = l.find(" | ");
      if (bar == std::string_view::npos) continue;
      auto head = l.substr(0, bar);
      if (head.find_first_not_of(' ') != std::string_view::npos) continue;  // a numbered line
      l.remove_prefix(bar + 3);
      auto mark = l.find_first_not_of(' ');
      if (mark == std::string_view::npos || (l[mark] != '^' && l[mark] != '~')) continue;
      l.remove_prefix(mark);
      l.remove_prefix(std::min(l.size(), l.find_first_not_of("^-~")));
    }
    while (!l.empty() && l.front() == ' ') l.remove_prefix(1);
    while (!l.empty() && (l.back() == ' ' || l.back() == '\r')) l.remove_suffix(1);
    if (!l.empty()) parts.emplace_back(l);
  }
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += "; ";
    std::istringstream words(part);
    std::string word;
    bool first = true;
    while (words >> word) {
      if (!first) out += ' ';
      first = false;
      out += word.find("://") != std::string::npos || word.find('@') != std::string::npos
                 ? core::redact_url(word)
                 : word;
    }
  }
  return out;
}

// Offset of the first byte that is not valid UTF-8, or npos. A TOML file is UTF-8, and toml11
// 3.7 reads past the end of its buffer on some invalid UTF-8 (a heap-buffer-overflow found by
// fuzz/config_fuzz.cpp), so the text is checked before toml11 sees it.
std::size_t invalid_utf8_at(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;                   // continuation bytes
    unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
    if (c >= 0xC2 && c <= 0xDF)
      n = 1;
    else if (c == 0xE0)
      n = 2, lo = 0xA0;  // no overlong forms
    else if (c == 0xED)
      n = 2, hi = 0x9F;  // no surrogates
    else if (c >= 0xE1 && c <= 0xEF)
      n = 2;
    else if (c == 0xF0)
      n = 3, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
      n = 3;
    else if (c == 0xF4)
      n = 3, hi = 0x8F;  // nothing above U+10FFFF
    else
      return i;
    if (s.size() - i <= n) return i;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return i;
    }
    i += n + 1;
  }
  return std::string::npos;
}

}  // namespace outpost::cli
