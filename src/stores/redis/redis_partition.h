#pragma once
// The Redis store's partitions (docs/redis.md, Partitions): with the URL parameter partitions=N
// an outbox is N key spaces {prefix:p0} ... {prefix:pN-1}, each one today's single-writer
// layout (redis_store.cpp) with its own writer lease and fence. The partitioned store
// (redis_partitioned.cpp) routes appends by key hash, claims from the partitions its relay owns
// and reads across all of them.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/store.h"
#include "stores/redis/redis_client.h"
#include "stores/redis/redis_url.h"

namespace outpost::redis_store {

// One partition's store, as the partitioned store drives it.
class PartitionStore : public Store {
 public:
  // Whether this Store held the partition's writer lease at its last claim.
  virtual bool holds_writer_lease() const = 0;
  // Compare-and-delete of the writer lease: another relay may take the partition at once.
  virtual void give_up_writer_lease() = 0;
  // What an ack prunes (archived events, dead letters past their retention: lua/prune.lua),
  // without an ack, for a partition no ack reaches.
  virtual void prune_retained() = 0;
  // From the last claim that took nothing: ms until something may become claimable (a retry
  // due, a lease or the writer lease expiring); -1: nothing known.
  virtual std::int64_t next_hint_ms() const = 0;

  // This partition's share of the partitioned store's one script over several partitions on a
  // single master (lua/settle_many.lua, run_settle_many): the claim function's arguments for up
  // to `max` events (claim_fn.lua's A; sets batch.lease.owner, as claim does), the reading of
  // its reply into `batch` (as claim), and the arguments settling `done` (settle_body.lua's
  // without the claim's). Fenced by this partition's writer lease exactly as claim and
  // settle_and_claim are.
  virtual std::vector<std::string> claim_call(ClaimedBatch& batch, std::size_t max, Duration lease,
                                              ClaimOrder order) = 0;
  virtual void claim_reply(ClaimedBatch& batch, const redisReply* reply) = 0;
  virtual std::vector<std::string> settle_call(const ClaimedBatch& done,
                                               const Settlement& settlement) = 0;
};

// The documented partition rule (docs/redis.md, Partitions): FNV-1a (32 bit) of the key's bytes
// modulo the partition count.
inline std::uint32_t fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

// The partition in a claim's owner (RedisStore: "<token>#p<K>.<n>"); -1 when none, as for a
// batch combined from several partitions (PartitionedStore::combine, owner "*...").
inline int partition_in(const std::string& owner, int partitions) {
  if (!owner.empty() && owner[0] == '*') return -1;
  const auto hash = owner.rfind('#');
  if (hash == std::string::npos || hash + 1 >= owner.size() || owner[hash + 1] != 'p') return -1;
  int p = 0;
  std::size_t i = hash + 2;
  for (; i < owner.size() && owner[i] >= '0' && owner[i] <= '9' && p <= partitions; ++i)
    p = p * 10 + (owner[i] - '0');
  if (i == hash + 2 || i >= owner.size() || owner[i] != '.' || p >= partitions) return -1;
  return p;
}

// A relay instance's token: random, with the pid (the writer lease's and members' owner name).
std::string instance_token();

// The store of one partition: `prefix` is its key space's name (without braces), `token` the
// writer lease owner ("" makes one; ignored without a writer lease), `owner_tag` goes into every
// claim's LeaseToken::owner after '#' so the partitioned store can route its settlements;
// `durability_once` is shared by the partitions so the durability warning comes once.
std::unique_ptr<PartitionStore> open_partition(
    ClientOptions client, std::string prefix, Duration writer_lease, const StoreOptions& options,
    std::string token, std::string owner_tag, std::shared_ptr<std::once_flag> durability_once = {});

// The partitioned store over `config.partitions` (> 1) partitions.
std::unique_ptr<Store> open_partitioned(StoreConfig config, const StoreOptions& options);

}  // namespace outpost::redis_store
