#include "stores/postgres/refused.h"

#include <algorithm>

#include "core/utf8.h"

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
    std::size_t n = bytes[i] == '\0' ? 0 : core::utf8_sequence_length(bytes, i);
    if (n == 0) {
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
