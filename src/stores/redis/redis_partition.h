#pragma once
// The Redis store's partitions (docs/redis.md, Partitions): with the URL parameter partitions=N
// an outbox is N key spaces {prefix:p0} ... {prefix:pN-1}, each one today's single-writer
// layout (redis_store.cpp) with its own writer lease and fence. The partitioned store
// (redis_partitioned.cpp) routes appends by key hash, claims from the partitions its relay owns
// and reads across all of them.

#include <cstdint>
#include <memory>
#include <string>

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
  // From the last claim that took nothing: ms until something may become claimable (a retry
  // due, a lease or the writer lease expiring); -1: nothing known.
  virtual std::int64_t next_hint_ms() const = 0;
};

// A relay instance's token: random, with the pid (the writer lease's and members' owner name).
std::string instance_token();

// The store of one partition: `prefix` is its key space's name (without braces), `token` the
// writer lease owner ("" makes one; ignored without a writer lease), `owner_tag` goes into every
// claim's LeaseToken::owner after '#' so the partitioned store can route its settlements.
std::unique_ptr<PartitionStore> open_partition(ClientOptions client, std::string prefix,
                                               Duration writer_lease, const StoreOptions& options,
                                               std::string token, std::string owner_tag);

// The partitioned store over `config.partitions` (> 1) partitions.
std::unique_ptr<Store> open_partitioned(StoreConfig config, const StoreOptions& options);

}  // namespace outpost::redis_store
