#pragma once
// `outpost partitions` on a partitioned Redis outbox (URL parameter partitions=N, docs/redis.md
// "Partitions"; apps/outpost/partitions.cpp prints it as it prints PostgreSQL's): per partition
// the relay holding its writer lease, the fence, the lease's time left, how long that relay has
// held it, whether it is moving to another relay, and its backlog; then the live members.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace outpost::redis_store {

struct PartitionView {
  int partition = 0;
  std::string owner;                          // holder of the writer lease; "" = none
  std::int64_t fence = 0;                     // 0: never held
  std::optional<std::int64_t> lease_left_ms;  // none when not held
  std::optional<std::int64_t> moved_ms_ago;   // since the holder took it; none: not recorded
  bool handing_over = false;                  // held, but assigned to another live member
  std::int64_t backlog = 0;                   // undelivered events (pending, scheduled, leased)
  std::int64_t leased = 0;                    // events leased now
};

struct MemberView {
  std::string member;
  std::optional<std::int64_t> joined_ms_ago;  // none: not recorded (a relay of an older build)
  std::int64_t expires_in_ms = 0;
  std::int64_t partitions = 0;  // partitions whose writer lease it holds
};

struct PartitionsView {
  std::string outbox;  // the prefix
  std::vector<PartitionView> partitions;
  std::vector<MemberView> members;  // sorted by token, as the relays assign partitions
};

// Checks the URL (ConfigError naming the part, before anything is connected; a URL without
// partitions=N is one), then reads. ConfigError when the outbox records another partition
// count, Error(not_found) when it records none (no relay or emit opened it partitioned).
void check_partitions_url(std::string_view url);
PartitionsView read_partitions_view(std::string_view url);

}  // namespace outpost::redis_store
