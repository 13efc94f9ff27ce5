// A claim over several partitions of a partitioned Redis outbox as one ClaimedBatch, and back
// (docs/redis.md, "Partitions": Batches). The batch's lease owner is kCombined, then
// "<owner>|<fence>|" of each partition's claim, so every settlement and renewal goes to each
// partition under that partition's own lease.
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "outpost/store.h"
#include "stores/redis/redis_client.h"

namespace outpost::redis_store {

inline constexpr char kCombined = '*';  // as partition_in's (redis_partition.h)

// The parts' events in (composed) seq order, under one lease naming every part's.
ClaimedBatch combine(std::vector<ClaimedBatch>& parts);

// A combined batch's parts: {partition, the part's batch (its events and lease)}. A batch of
// one partition (not combined) has none. A part's partition is its composed seq mod
// `partitions` (redis_partitioned.cpp, with_seqs). A part's events carry only their id, key and
// seq: what a settlement and a renewal read (the payloads are not copied on every settle).
struct PartBatch {
  int p;
  ClaimedBatch batch;
};
std::vector<PartBatch> split(const ClaimedBatch& batch, int partitions);

bool contains(const ClaimedBatch& batch, const EventId& id);

// The part of a settlement that concerns one part of a combined batch, owning its ids.
struct PartSettlement {
  std::vector<EventId> acks;
  std::vector<Nack> nacks;
  std::vector<EventId> releases;
  Settlement view() const { return {acks, nacks, releases}; }
  std::size_t size() const { return acks.size() + nacks.size() + releases.size(); }
};
// The events of `settlement` that are among `part`'s.
PartSettlement settlement_of(const ClaimedBatch& part, const Settlement& settlement);

// An append over several partitions (docs/redis.md, Partitions: Routing); groups[p]: the
// prepared events of partition p. On a single master (`one_script`) one EVALSHA of `many`
// (lua/append_many.lua: every part checked, then every part written, one wake): one round trip
// and one script call whatever the number of partitions. Else one EVALSHA of `one` per
// partition, all sent before any reply is read (the partitions on other masters answer MOVED).
// Returns the partitions whose pipelined reply was an error (a redirect, NOSCRIPT: it did not
// run), to append again on their own store; throws as Client::eval for `many`.
std::vector<std::size_t> append_partitions(Client& client, const Script& many, const Script& one,
                                           const std::string& prefix, const std::string& base,
                                           const std::string& key,
                                           const std::vector<std::vector<Event>>& groups,
                                           bool one_script);

class PartitionStore;

// One EVALSHA of lua/settle_many.lua on a single master (not a cluster: the partitions are in
// other slots): settles each part in `settles` in its partition, then claims from `claims` in
// their order until `max` events are taken, so one round trip serves every owned partition
// (docs/redis.md, Partitions: Batches). Fills each settle's counts and each claim's batch (and
// `asked`: the partitions after the one that filled the batch are not asked). A part that
// failed in the script has its `error` (as the part's own call would have thrown) and the others
// went on; otherwise throws as Client::eval: then any part may or may not be settled (store.h).
struct ManySettle {
  PartitionStore* store;
  const ClaimedBatch* batch;
  Settlement mine;  // views into the caller's PartSettlement, or the whole settlement
  SettleCounts counts;
  std::exception_ptr error;
};
struct ManyClaim {
  PartitionStore* store;
  ClaimedBatch batch;
  bool asked = false;
  std::exception_ptr error;
};
void run_settle_many(Client& client, const Script& script, const std::string& key,
                     const std::string& base, std::vector<ManySettle>& settles,
                     std::vector<ManyClaim>& claims, std::size_t max, Duration lease,
                     ClaimOrder order);

}  // namespace outpost::redis_store
