#pragma once
// The limits of a pipeline's settings, one place for the flags of `outpost relay` and
// `outpost consume` and the keys of their [[relay]] / [[consume]] tables in the config file.

#include <cstdint>
#include <string>
#include <string_view>

namespace outpost::cli::limits {

inline constexpr std::int64_t kMaxBatch = 100'000;       // --batch, batch
inline constexpr std::int64_t kMaxAttempts = 1'000'000;  // --max-attempts, max_attempts
inline constexpr std::int64_t kMaxConcurrency = 1024;    // --concurrency, concurrency
inline constexpr std::int64_t kMinLeaseMs = 10;          // --lease-ms, lease_ms
inline constexpr std::int64_t kMaxMs = 86'400'000;       // every *-ms / *_ms setting: a day

// The one rule across two settings: the largest retry delay is not below the first one. Empty
// when it holds, else "<max_name> (N) must be >= <base_name> (M)" for the caller's message.
inline std::string backoff_order_error(std::int64_t base_ms, std::int64_t max_ms,
                                       const std::string& base_name, const std::string& max_name) {
  if (max_ms >= base_ms) return {};
  return max_name + " (" + std::to_string(max_ms) + ") must be >= " + base_name + " (" +
         std::to_string(base_ms) + ")";
}

// on_dead = hold keeps a key's order behind its dead letter: it needs per-key order.
inline std::string on_dead_error(bool unordered, const std::string& on_dead,
                                 const std::string& on_dead_name,
                                 const std::string& unordered_name) {
  if (!unordered || on_dead != "hold") return {};
  return on_dead_name + " hold keeps each key's order behind its dead letter: it cannot go with " +
         unordered_name;
}

// Text an operator's terminal shows (a consumer group's name, an event type): no control
// character (C0, DEL). Empty when it is fine, else what is wrong.
inline std::string control_error(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return "must not contain control characters";
  return {};
}
// A consumer group's name: it is stored in the checkpoint store and printed by `consumers list`,
// the dashboard and every log line of the pipeline, so 1-200 bytes and no control character.
// Empty when it is fine, else what is wrong (`consume` and `consumers` alike).
inline std::string group_error(const std::string& group) {
  if (group.empty() || group.size() > 200) return "must be 1-200 bytes";
  return control_error(group);
}

}  // namespace outpost::cli::limits
