#include "outpost/event.h"

#include "core/id_origin.h"
#include "core/rfc3339.h"

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
        !digits(pos + 4, 2, om))
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

}  // namespace outpost
