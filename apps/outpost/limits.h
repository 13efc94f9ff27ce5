#pragma once
// The limits of a pipeline's settings, one place for the flags of `outpost relay` and
// `outpost consume` and the keys of their [[relay]] / [[consume]] tables in the config file.

#include <cstdint>

namespace outpost::cli::limits {

inline constexpr std::int64_t kMaxBatch = 100'000;       // --batch, batch
inline constexpr std::int64_t kMaxAttempts = 1'000'000;  // --max-attempts, max_attempts
inline constexpr std::int64_t kMaxConcurrency = 1024;    // --concurrency, concurrency
inline constexpr std::int64_t kMinLeaseMs = 10;          // --lease-ms, lease_ms
inline constexpr std::int64_t kMaxMs = 86'400'000;       // every *-ms / *_ms setting: a day

}  // namespace outpost::cli::limits
