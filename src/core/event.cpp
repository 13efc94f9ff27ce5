#include "outpost/event.h"

#include "core/id_origin.h"
#include "core/rfc3339.h"
#include "outpost/error.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>

namespace outpost {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// UUIDv7 state: the last millisecond used and a 12-bit sequence in rand_a. When more than
// 4096 ids are made in one millisecond we borrow the next millisecond, so ids stay strictly
// increasing within the process (RFC 9562 §6.2, method 1 and 3).
//
// The low 32 bits of rand_b are a tag keyed with a random per-process key over the id's other
// bits, so generated_in_this_process() can tell this generator's ids (unique by construction)
// from ids a caller brought; for any other process the tag is as random as the bits it replaces.
struct V7State {
  std::mutex mu;
  std::uint64_t last_ms = 0;
  std::uint32_t seq = 0;
  std::mt19937_64 rng{std::random_device{}()};
  const std::uint64_t tag_key = std::random_device{}() * 0x100000001ull ^ std::random_device{}();
};

V7State& v7_state() {
  static V7State state;
  return state;
}

std::uint32_t v7_tag(std::uint64_t key, std::uint64_t ms, std::uint32_t seq, std::uint32_t hi30) {
  std::uint64_t z = key ^ (ms << 12 | seq) ^ (static_cast<std::uint64_t>(hi30) << 34);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64 finaliser
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>(z ^ (z >> 31));
}

std::uint64_t read_be(const std::array<std::uint8_t, 16>& b, int from, int n) {
  std::uint64_t v = 0;
  for (int i = from; i < from + n; ++i) v = v << 8 | b[i];
  return v;
}

}  // namespace

EventId EventId::generate() {
  auto& st = v7_state();
  std::uint64_t ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count());
  std::uint64_t rand_b;
  std::uint32_t seq;
  {
    std::lock_guard lock(st.mu);
    if (ms > st.last_ms) {
      st.last_ms = ms;
      st.seq = static_cast<std::uint32_t>(st.rng() & 0x1FF);  // random start, room to count
    } else {
      ms = st.last_ms;
      if (++st.seq > 0xFFF) {
        st.last_ms = ++ms;
        st.seq = 0;
      }
    }
    seq = st.seq;
    rand_b = st.rng() & 0x3FFFFFFF00000000ull;  // 30 random bits above the tag
  }
  rand_b |= v7_tag(st.tag_key, ms, seq, static_cast<std::uint32_t>(rand_b >> 32));
  EventId id;
  auto& b = id.bytes_;
  for (int i = 0; i < 6; ++i) b[i] = static_cast<std::uint8_t>(ms >> (40 - 8 * i));
  b[6] = static_cast<std::uint8_t>(0x70 | ((seq >> 8) & 0x0F));
  b[7] = static_cast<std::uint8_t>(seq & 0xFF);
  for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<std::uint8_t>(rand_b >> (56 - 8 * i));
  b[8] = static_cast<std::uint8_t>(0x80 | (b[8] & 0x3F));  // RFC 9562 variant
  return id;
}

namespace core {
bool generated_in_this_process(const EventId& id) {
  const auto& b = id.bytes();
  if ((b[6] >> 4) != 7 || (b[8] >> 6) != 2) return false;
  const std::uint64_t ms = read_be(b, 0, 6);
  const auto seq = static_cast<std::uint32_t>(read_be(b, 6, 2) & 0xFFF);
  const auto hi30 = static_cast<std::uint32_t>(read_be(b, 8, 4) & 0x3FFFFFFF);
  return static_cast<std::uint32_t>(read_be(b, 12, 4)) == v7_tag(v7_state().tag_key, ms, seq, hi30);
}
}  // namespace core

std::optional<EventId> EventId::parse(std::string_view text) {
  if (text.size() != 36) return std::nullopt;
  EventId id;
  std::size_t out = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      ++i;
      continue;
    }
    int hi = hex_value(text[i]);
    int lo = hex_value(text[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id.bytes_[out++] = static_cast<std::uint8_t>(hi << 4 | lo);
    i += 2;
  }
  return id;
}

EventId EventId::from_bytes(const std::uint8_t* bytes16) {
  EventId id;
  std::memcpy(id.bytes_.data(), bytes16, 16);
  return id;
}

std::string EventId::str() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(36);
  for (std::size_t i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(kHex[bytes_[i] >> 4]);
    s.push_back(kHex[bytes_[i] & 0xF]);
  }
  return s;
}

bool EventId::is_nil() const {
  for (auto b : bytes_)
    if (b != 0) return false;
  return true;
}

std::size_t EventIdHash::operator()(const EventId& id) const noexcept {
  std::uint64_t a, b;
  std::memcpy(&a, id.bytes().data(), 8);
  std::memcpy(&b, id.bytes().data() + 8, 8);
  return static_cast<std::size_t>(a * 0x9E3779B97F4A7C15ULL ^ b);
}

Event Event::make(std::string type, std::string payload, std::string key) {
  Event e;
  e.id = EventId::generate();
  e.type = std::move(type);
  e.payload = std::move(payload);
  e.key = std::move(key);
  e.occurred_at = now();
  return e;
}

std::string_view Event::content_type() const {
  auto it = headers.find(header::kContentType);
  return it == headers.end() ? kJsonContentType : std::string_view(it->second);
}

PayloadKind payload_kind(std::string_view content_type) {
  // The media type without parameters, trimmed and lowercased: "Text/Plain; charset=x" -> text.
  std::string_view type = content_type.substr(0, content_type.find(';'));
  while (!type.empty() && (type.front() == ' ' || type.front() == '\t')) type.remove_prefix(1);
  while (!type.empty() && (type.back() == ' ' || type.back() == '\t')) type.remove_suffix(1);
  std::string t(type);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t.empty() || t == "application/json" || t.ends_with("+json")) return PayloadKind::json;
  if (t.starts_with("text/")) return PayloadKind::text;
  return PayloadKind::binary;
}

TimePoint now() {
  return std::chrono::time_point_cast<std::chrono::microseconds>(Clock::now());
}

std::string format_rfc3339(TimePoint t) {
  core::Rfc3339Formatter f;
  return std::string(f.format(t));
}

namespace core {

std::string_view Rfc3339Formatter::format(TimePoint t) {
  auto us = t.time_since_epoch().count();
  std::int64_t secs = us / 1'000'000;
  std::int64_t frac = us % 1'000'000;
  if (frac < 0) {
    frac += 1'000'000;
    --secs;
  }
  if (!filled_ || secs != secs_) {
    std::time_t tt = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&tt, &tm);
    int n = std::snprintf(text_, sizeof text_, "%04d-%02d-%02dT%02d:%02d:%02d.000000Z",
                          tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                          tm.tm_sec);
    size_ = n > 0 && static_cast<std::size_t>(n) < sizeof text_ ? static_cast<std::size_t>(n) : 0;
    secs_ = secs;
    filled_ = true;
  }
  if (size_ < 8) return {text_, size_};  // out of range year: nothing sensible to patch
  char* digits = text_ + size_ - 7;      // the 6 digits before the Z
  for (int i = 5; i >= 0; --i) {
    digits[i] = static_cast<char>('0' + frac % 10);
    frac /= 10;
  }
  return {text_, size_};
}

}  // namespace core

std::optional<TimePoint> parse_rfc3339(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)
  auto digits = [&](std::size_t pos, std::size_t n, int& out) {
    if (pos + n > s.size()) return false;
    out = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      out = out * 10 + (s[i] - '0');
    }
    return true;
  };
  int Y, M, D, h, m, sec;
  if (!digits(0, 4, Y) || s.size() < 20 || s[4] != '-' || !digits(5, 2, M) || s[7] != '-' ||
      !digits(8, 2, D) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !digits(11, 2, h) ||
      s[13] != ':' || !digits(14, 2, m) || s[16] != ':' || !digits(17, 2, sec))
    return std::nullopt;
  if (M < 1 || M > 12 || D < 1 || D > 31 || h > 23 || m > 59 || sec > 60) return std::nullopt;
  std::size_t pos = 19;
  std::int64_t micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    int n = 0;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      if (n < 6) micros = micros * 10 + (s[pos] - '0');
      ++n;
      ++pos;
    }
    if (n == 0) return std::nullopt;
    for (int i = n; i < 6; ++i) micros *= 10;
  }
  int offset_min = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!digits(pos + 1, 2, oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(pos + 4, 2, om) || oh > 23 || om > 59)  // -23:59..+23:59 (RFC 3339 §5.6)
      return std::nullopt;
    offset_min = (oh * 60 + om) * (s[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  std::chrono::year_month_day ymd{std::chrono::year{Y}, std::chrono::month{unsigned(M)},
                                  std::chrono::day{unsigned(D)}};
  if (!ymd.ok()) return std::nullopt;
  auto days = std::chrono::sys_days{ymd};
  auto t = std::chrono::time_point_cast<std::chrono::microseconds>(days) + std::chrono::hours{h} +
           std::chrono::minutes{m} + std::chrono::seconds{sec} - std::chrono::minutes{offset_min} +
           std::chrono::microseconds{micros};
  return TimePoint{t.time_since_epoch()};
}

// ---- Trace context (W3C Trace Context, https://www.w3.org/TR/trace-context/) ----

namespace {

bool lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return !s.empty();
}

bool all_zero(std::string_view s) {
  return s.find_first_not_of('0') == std::string_view::npos;
}

// Empty when `v` is a traceparent a W3C parser takes (trace-context §3.2.2); else why not.
std::string traceparent_problem(std::string_view v) {
  // version "-" trace-id "-" parent-id "-" trace-flags: 2 + 1 + 32 + 1 + 16 + 1 + 2
  constexpr std::size_t kLength = 55;
  if (v.size() < kLength || v[2] != '-' || v[35] != '-' || v[52] != '-')
    return "is not VERSION-TRACEID-PARENTID-FLAGS (" + std::to_string(kLength) +
           " characters for version 00)";
  const std::string_view version = v.substr(0, 2), trace_id = v.substr(3, 32),
                         parent_id = v.substr(36, 16), flags = v.substr(53, 2);
  if (!lower_hex(version) || !lower_hex(trace_id) || !lower_hex(parent_id) || !lower_hex(flags))
    return "has a field that is not lowercase hex";
  if (version == "ff") return "has the invalid version ff";
  if (version == "00" && v.size() != kLength)
    return "is " + std::to_string(v.size()) + " characters; version 00 has exactly " +
           std::to_string(kLength);
  if (v.size() > kLength && v[kLength] != '-')
    return "has no '-' after its flags (character " + std::to_string(kLength) + ")";
  if (all_zero(trace_id)) return "has an all-zero trace id";
  if (all_zero(parent_id)) return "has an all-zero parent id";
  return {};
}

// Empty when `v` fits the W3C tracestate list (§3.3.1) closely enough to travel as an HTTP
// header: at most 512 printable ASCII characters, at most 32 members, each key=value.
std::string tracestate_problem(std::string_view v) {
  if (v.size() > 512) return "is " + std::to_string(v.size()) + " characters, over 512";
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0x20 || v[i] > 0x7e)
      return "has a character that is not printable ASCII at byte " + std::to_string(i);
  std::size_t members = 0;
  for (std::size_t at = 0; at <= v.size();) {
    std::size_t end = v.find(',', at);
    if (end == std::string_view::npos) end = v.size();
    std::string_view member = v.substr(at, end - at);
    const auto first = member.find_first_not_of(" \t");
    if (first != std::string_view::npos) {
      member = member.substr(first, member.find_last_not_of(" \t") - first + 1);
      const auto eq = member.find('=');
      if (eq == 0 || eq == std::string_view::npos || eq + 1 == member.size())
        return "has the member '" + std::string(member) + "', which is not KEY=VALUE";
      ++members;
    }
    at = end + 1;
  }
  if (members > 32) return "has " + std::to_string(members) + " members, over 32";
  return {};
}

thread_local const Event* t_handled = nullptr;

}  // namespace

std::string trace_context_problem(const Headers& headers) {
  for (const auto& [name, value] : headers) {
    for (std::string_view standard : {header::kTraceparent, header::kTracestate})
      if (name != standard && name.size() == standard.size() &&
          std::equal(name.begin(), name.end(), standard.begin(), [](char a, char b) {
            return std::tolower(static_cast<unsigned char>(a)) == b;
          }))
        return "header '" + name + "': write the trace context header as '" +
               std::string(standard) + "' (tracing libraries read the lowercase name)";
  }
  const auto parent = headers.find(header::kTraceparent);
  if (parent != headers.end())
    if (auto p = traceparent_problem(parent->second); !p.empty())
      return "header 'traceparent' " + p +
             ", e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01; got '" +
             parent->second + "'";
  const auto state = headers.find(header::kTracestate);
  if (state != headers.end()) {
    if (parent == headers.end())
      return "header 'tracestate' is given without a 'traceparent' (it only qualifies one)";
    if (auto p = tracestate_problem(state->second); !p.empty()) return "header 'tracestate' " + p;
  }
  return {};
}

void check_trace_context(const Event& event, std::string_view where) {
  if (auto p = trace_context_problem(event.headers); !p.empty())
    throw ConfigError(where.empty() ? p : std::string(where) + ": " + p);
}

HandlingScope::HandlingScope(const Event& handled) noexcept : previous_(t_handled) {
  t_handled = &handled;
}

HandlingScope::~HandlingScope() {
  t_handled = previous_;
}

const Event* handled_event() noexcept {
  return t_handled;
}

void inherit_from_handled(Event& event) {
  const Event* h = t_handled;
  if (!h) return;
  const std::string handled_id = h->id.is_nil() ? std::string() : h->id.str();
  if (!event.headers.contains(header::kCorrelationId)) {
    auto it = h->headers.find(header::kCorrelationId);
    if (it != h->headers.end())
      event.headers.emplace(header::kCorrelationId, it->second);
    else if (!handled_id.empty())
      event.headers.emplace(header::kCorrelationId, handled_id);
  }
  if (!event.headers.contains(header::kCausationId) && !handled_id.empty())
    event.headers.emplace(header::kCausationId, handled_id);
  // The trace goes on only as a whole: an event with a trace context of its own keeps it.
  if (!event.headers.contains(header::kTraceparent) &&
      !event.headers.contains(header::kTracestate)) {
    if (auto it = h->headers.find(header::kTraceparent); it != h->headers.end()) {
      event.headers.emplace(header::kTraceparent, it->second);
      if (auto st = h->headers.find(header::kTracestate); st != h->headers.end())
        event.headers.emplace(header::kTracestate, st->second);
    }
  }
}

}  // namespace outpost
