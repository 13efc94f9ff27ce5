// A claim over several partitions as one batch, and back: see redis_combined_batch.h.
#include "stores/redis/redis_combined_batch.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "stores/redis/redis_partition.h"

namespace outpost::redis_store {

ClaimedBatch combine(std::vector<ClaimedBatch>& parts) {
  ClaimedBatch out;
  out.lease.owner = kCombined;
  for (auto& b : parts) {
    out.lease.owner += b.lease.owner + "|" + std::to_string(b.lease.fence) + "|";
    std::move(b.events.begin(), b.events.end(), std::back_inserter(out.events));
  }
  std::sort(out.events.begin(), out.events.end(),
            [](const StoredEvent& a, const StoredEvent& b) { return a.seq < b.seq; });
  return out;
}

std::vector<PartBatch> split(const ClaimedBatch& batch, int partitions) {
  std::vector<PartBatch> out;
  const std::string& o = batch.lease.owner;
  if (o.empty() || o[0] != kCombined) return out;
  for (std::size_t at = 1; at < o.size();) {
    const auto bar = o.find('|', at), bar2 = o.find('|', bar + 1);
    if (bar == std::string::npos || bar2 == std::string::npos) break;
    PartBatch pb;
    pb.batch.lease.owner = o.substr(at, bar - at);
    pb.batch.lease.fence = std::stoll(o.substr(bar + 1, bar2 - bar - 1));
    pb.p = partition_in(pb.batch.lease.owner, partitions);
    at = bar2 + 1;
    if (pb.p < 0) continue;
    for (const auto& e : batch.events)
      if (static_cast<int>(e.seq % partitions) == pb.p) pb.batch.events.push_back(e);
    out.push_back(std::move(pb));
  }
  return out;
}

bool contains(const ClaimedBatch& batch, const EventId& id) {
  return std::any_of(batch.events.begin(), batch.events.end(),
                     [&](const StoredEvent& e) { return e.id == id; });
}

}  // namespace outpost::redis_store
