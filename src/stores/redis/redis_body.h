#pragma once
// An event's body as the Redis store keeps it (one field of the B.."body" hash, redis_scripts.h):
// key, type, occurred_at (us) and headers as "<decimal length>:<bytes>" fields, then the
// payload as the rest. Packed and unpacked here, by the client, so the server's scripts move
// one string per event; the key comes first because the scripts read it on their rare paths
// (dead-lettering, retry) with one string.find.

#include <charconv>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"

namespace outpost::redis_store {

namespace body_detail {

inline void put(std::string& out, std::string_view v) {
  char len[24];
  auto end = std::to_chars(len, len + sizeof len, v.size()).ptr;
  out.append(len, static_cast<std::size_t>(end - len));
  out += ':';
  out += v;
}

// Takes one "<len>:<bytes>" field off the front of `s`; false when malformed.
inline bool take(std::string_view& s, std::string_view& out) {
  auto colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  std::size_t len = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + colon, len);
  if (ec != std::errc() || p != s.data() + colon || len > s.size() - colon - 1) return false;
  out = s.substr(colon + 1, len);
  s.remove_prefix(colon + 1 + len);
  return true;
}

}  // namespace body_detail

// Headers as "<len>:<bytes>" pairs: binary-safe and cheap to parse.
inline std::string encode_headers(const Headers& headers) {
  std::string out;
  for (const auto& [k, v] : headers) {
    body_detail::put(out, k);
    body_detail::put(out, v);
  }
  return out;
}

inline bool decode_headers(std::string_view s, Headers& h) {
  while (!s.empty()) {
    std::string_view k, v;
    if (!body_detail::take(s, k) || !body_detail::take(s, v)) return false;
    h.emplace(std::string(k), std::string(v));
  }
  return true;
}

inline std::string pack_body(const Event& e) {
  std::string out;
  const std::string occurred = std::to_string(e.occurred_at.time_since_epoch().count());
  out.reserve(e.key.size() + e.type.size() + occurred.size() + e.payload.size() + 64);
  body_detail::put(out, e.key);
  body_detail::put(out, e.type);
  body_detail::put(out, occurred);
  body_detail::put(out, encode_headers(e.headers));
  out += e.payload;
  return out;
}

// Fills key, type, occurred_at, headers and payload of `e`; false when `body` is malformed.
inline bool unpack_body(std::string_view body, Event& e) {
  std::string_view key, type, occurred, headers;
  if (!body_detail::take(body, key) || !body_detail::take(body, type) ||
      !body_detail::take(body, occurred) || !body_detail::take(body, headers))
    return false;
  std::int64_t us = 0;
  auto [p, ec] = std::from_chars(occurred.data(), occurred.data() + occurred.size(), us);
  if (ec != std::errc() || p != occurred.data() + occurred.size()) return false;
  Headers h;
  if (!decode_headers(headers, h)) return false;
  e.key.assign(key);
  e.type.assign(type);
  e.occurred_at = TimePoint(std::chrono::microseconds(us));
  e.headers = std::move(h);
  e.payload.assign(body);
  return true;
}

// The append script's ARGV after B (append.lua): the count, then id, key, body of each event,
// then (only when any event is scheduled) each one's deliver_at in ms or "". `argv` points into
// `owned` (reserved up front, never reallocated) and into the events' keys.
struct AppendArgv {
  std::vector<std::string> owned;
  std::vector<std::string_view> argv;
};
inline void append_argv(std::span<const Event> prepared, std::string_view base, AppendArgv& out) {
  out.owned.reserve(prepared.size() * 3 + 1);
  out.argv.reserve(prepared.size() * 4 + 2);
  out.argv.push_back(base);
  out.owned.push_back(std::to_string(prepared.size()));
  out.argv.push_back(out.owned.back());
  for (const auto& e : prepared) {
    out.owned.push_back(e.id.str());
    std::string_view id = out.owned.back();
    out.owned.push_back(pack_body(e));
    out.argv.insert(out.argv.end(), {id, e.key, out.owned.back()});
  }
  bool scheduled = false;
  for (const auto& e : prepared) scheduled = scheduled || e.deliver_at.has_value();
  if (!scheduled) return;
  for (const auto& e : prepared) {
    out.owned.push_back(e.deliver_at
                            ? std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 e.deliver_at->time_since_epoch())
                                                 .count())
                            : std::string());
    out.argv.push_back(out.owned.back());
  }
}

}  // namespace outpost::redis_store
