#pragma once
// The Redis store's URLs (include/outpost/stores/redis.h, docs/redis.md):
//   redis://[:password@]host:port[,host:port...]/db?prefix=...          server or cluster seeds
//   redis-sentinel://[:password@]host:port[,host:port...]/MASTER?prefix=...   sentinels
// Every bad part is a ConfigError naming it, before anything is connected.

#include <optional>
#include <string>
#include <string_view>

#include "outpost/store.h"
#include "stores/redis/redis_client.h"

namespace outpost::redis_store {

// How long a crashed writer's lease keeps a standby waiting (URL parameter writer_lease_ms).
inline constexpr Duration kDefaultWriterLease{4000};

struct StoreConfig {
  ClientOptions client;
  std::string prefix;       // without braces
  Duration writer_lease{};  // 0: no writer lease (writer_lease=false)
  // archive=1 and archive_retention=DURATION (as PostgreSQL's): they override StoreOptions.
  std::optional<bool> archive;
  std::optional<Duration> archive_retention;
  std::optional<Duration> dead_retention;  // dead_retention=DURATION (StoreOptions)
  // partitions=N, 1-1024 (docs/redis.md, Partitions): 1 is the unpartitioned layout.
  int partitions = 1;
};

StoreConfig parse_store_url(std::string_view url);

// The append script exactly as the store sends it (the prologue, then append.lua): what
// `outpost schema` prints for applications that emit with EVAL inside their own MULTI
// (docs/emit-contract.md). Defined here, not in redis_store.cpp, to keep that file small.
std::string append_script();

}  // namespace outpost::redis_store
