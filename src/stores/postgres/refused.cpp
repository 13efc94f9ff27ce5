#include "stores/postgres/refused.h"

#include <algorithm>

namespace outpost::pg {
namespace {

// PostgreSQL's largest B-tree index row (a third of an 8 kB page, less overhead).
constexpr std::size_t kIndexRowMax = 2704;

std::string event_at(std::size_t i, const Event& e) {
  return "event " + std::to_string(i) + " (type '" + as_text(e.type) + "')";
}

bool is_text(std::string_view s) {
  return as_text(s) == s;
}

}  // namespace

std::string as_text(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    auto c = static_cast<unsigned char>(bytes[i]);
    std::size_t n = c < 0x80                 ? 1
                    : c >= 0xC2 && c <= 0xDF ? 2
                    : c >= 0xE0 && c <= 0xEF ? 3
                    : c >= 0xF0 && c <= 0xF4 ? 4
                                             : 0;
    bool ok = c != 0 && n > 0 && i + n <= bytes.size();
    if (ok && n > 1) {
      // The second byte's range excludes overlong forms, surrogates and code points > U+10FFFF.
      unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
      unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
      auto c1 = static_cast<unsigned char>(bytes[i + 1]);
      ok = c1 >= lo && c1 <= hi;
      for (std::size_t k = 2; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(bytes[i + k]) & 0xC0) == 0x80;
    }
    if (!ok) {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(bytes.substr(i, n));
    i += n;
  }
  return out;
}

void throw_if_refused_value(const Error& e, std::span<const Event> events) {
  const std::string& code = e.native_code();
  if (code == "54000" && !events.empty()) {
    // program_limit_exceeded: the only index over a value of variable length is (key, seq).
    auto it = std::max_element(events.begin(), events.end(), [](const Event& a, const Event& b) {
      return a.key.size() < b.key.size();
    });
    throw ConfigError(event_at(static_cast<std::size_t>(it - events.begin()), *it) + ": key of " +
                          std::to_string(it->key.size()) +
                          " bytes is too long for the outbox's (key, seq) index (PostgreSQL "
                          "indexes at most " +
                          std::to_string(kIndexRowMax) + " bytes per entry); nothing was written",
                      "postgres");
  }
  if (code == "22021" || code == "22P05") {
    // Not UTF-8, or NUL (as a byte in text, or \u0000 in the headers' jsonb).
    const std::string why = " is not valid UTF-8 or contains NUL; nothing was written";
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Event& ev = events[i];
      if (!is_text(ev.type)) throw ConfigError(event_at(i, ev) + ": type" + why, "postgres");
      if (!is_text(ev.key)) throw ConfigError(event_at(i, ev) + ": key" + why, "postgres");
      for (const auto& [k, v] : ev.headers)
        if (!is_text(k) || !is_text(v))
          throw ConfigError(event_at(i, ev) + ": header '" + as_text(k) + "'" + why, "postgres");
    }
    throw ConfigError("an event's type, key or headers" + why, "postgres");
  }
  if (code == "23505") {
    // unique_violation on the id; the server's detail names it: Key (id)=(...) already exists.
    std::string_view m = e.what();
    auto at = m.find("Key (id)=(");
    std::string id = at == std::string_view::npos ? "" : std::string(m.substr(at + 10, 36)) + " ";
    throw Error(ErrorCode::conflict, "postgres",
                "duplicate event id " + id +
                    "(an undelivered event or another event of this call has it); nothing was "
                    "written",
                code);
  }
}

}  // namespace outpost::pg
