// A claim over several partitions of a partitioned Redis outbox as one ClaimedBatch, and back
// (docs/redis.md, "Partitions": Batches). The batch's lease owner is kCombined, then
// "<owner>|<fence>|" of each partition's claim, so every settlement and renewal goes to each
// partition under that partition's own lease.
#pragma once

#include <vector>

#include "outpost/store.h"

namespace outpost::redis_store {

inline constexpr char kCombined = '*';  // as partition_in's (redis_partition.h)

// The parts' events in (composed) seq order, under one lease naming every part's.
ClaimedBatch combine(std::vector<ClaimedBatch>& parts);

// A combined batch's parts: {partition, the part's batch (its events and lease)}. A batch of
// one partition (not combined) has none. A part's partition is its composed seq mod
// `partitions` (redis_partitioned.cpp, with_seqs).
struct PartBatch {
  int p;
  ClaimedBatch batch;
};
std::vector<PartBatch> split(const ClaimedBatch& batch, int partitions);

bool contains(const ClaimedBatch& batch, const EventId& id);

}  // namespace outpost::redis_store
