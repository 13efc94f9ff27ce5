#pragma once
// The store sequence numbers of a claimed batch's events, for the stores that settle by seq.

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "outpost/store.h"

namespace outpost::core {

// The seqs of `ids` that belong to `batch`, in the order of `ids`; ids not in the batch were
// never leased under it and are left out (they cannot count).
inline std::vector<std::int64_t> seqs_of(const ClaimedBatch& batch, std::span<const EventId> ids) {
  std::vector<std::int64_t> seqs;
  seqs.reserve(ids.size());
  if (ids.size() == batch.events.size()) {  // usually the whole batch, in order
    bool same = true;
    for (std::size_t i = 0; i < ids.size() && same; ++i) same = ids[i] == batch.events[i].id;
    if (same) {
      for (const auto& e : batch.events) seqs.push_back(e.seq);
      return seqs;
    }
  }
  if (ids.size() < 16 || ids.size() * 4 < batch.events.size()) {  // a few: no table
    for (const auto& id : ids)
      for (const auto& e : batch.events)
        if (e.id == id) {
          seqs.push_back(e.seq);
          break;
        }
    return seqs;
  }
  std::unordered_map<EventId, std::int64_t, EventIdHash> seq_of;
  for (const auto& e : batch.events) seq_of.emplace(e.id, e.seq);
  for (const auto& id : ids)
    if (auto it = seq_of.find(id); it != seq_of.end()) seqs.push_back(it->second);
  return seqs;
}

}  // namespace outpost::core
