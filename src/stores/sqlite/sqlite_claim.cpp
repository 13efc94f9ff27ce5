#include "stores/sqlite/sqlite_claim.h"

#include <algorithm>
#include <functional>
#include <string_view>
#include <unordered_set>

#include "outpost/error.h"

namespace outpost::sqlite_store {
namespace {

// A claim that may stop early reads at most this many state rows plus 1.5 x its batch size (the
// previous batch, in flight at the head, plus half a batch of held-back rows).
constexpr std::size_t kScanWindow = 256;

// Hash for a set of keys that is probed with string_views (no allocation per row).
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view k) const noexcept {
    return std::hash<std::string_view>{}(k);
  }
};

}  // namespace

bool claim_in_txn(Conn& c, const SqlText& sql, ClaimedBatch& batch, std::int64_t owner,
                  std::int64_t now, std::size_t max, Duration lease, ClaimOrder order,
                  bool may_stop_early) {
  const bool ordered = order != ClaimOrder::unordered;
  const std::size_t capped = std::min<std::size_t>(max, 1 << 24);
  const std::size_t window = kScanWindow + capped + capped / 2;

  struct Picked {
    std::int64_t seq;
    int attempts;
    int crashes;
    bool expired;  // still owned by an earlier claim whose lease expired: a crash (store.h)
    std::string key;
  };
  std::vector<Picked> picked;
  picked.reserve(std::min<std::size_t>(max, 4096));
  std::unordered_set<std::string, KeyHash, std::equal_to<>> blocked;
  // A claimable row held back behind its key lies between two picked rows: the range UPDATE
  // would lease it too, so the picked rows are leased one by one.
  bool skip_after_pick = false;  // a row was held back after the first pick
  bool skip_inside = false;      // ... and another row was picked after it
  bool truncated = false;
  std::size_t scanned = 0;
  if (order == ClaimOrder::strict) {  // keys with a dead letter wait (store.h, ClaimOrder)
    Use d(c.prepare(sql.dead_keys));
    while (step_row(c.db(), d, "reading dead keys"))
      blocked.emplace(reinterpret_cast<const char*>(sqlite3_column_text(d, 0)),
                      static_cast<std::size_t>(sqlite3_column_bytes(d, 0)));
  }
  {
    Use s(c.prepare(sql.scan));
    while (step_row(c.db(), s, "claiming events")) {
      ++scanned;
      const bool owned = sqlite3_column_type(s, 4) != SQLITE_NULL;
      const bool leased = owned && sqlite3_column_int64(s, 5) > now;
      const bool claimable = !leased && sqlite3_column_int64(s, 3) <= now;
      const auto* key_text = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
      std::string_view key =
          key_text
              ? std::string_view(key_text, static_cast<std::size_t>(sqlite3_column_bytes(s, 1)))
              : std::string_view();
      if (!claimable) {
        // Leased, waiting to retry, or scheduled (attempts 0, due later): its key waits.
        if (ordered && !key.empty() && !blocked.contains(key)) blocked.emplace(key);
      } else if (ordered && !key.empty() && !blocked.empty() && blocked.contains(key)) {
        skip_after_pick = !picked.empty();
      } else {
        skip_inside = skip_inside || skip_after_pick;
        picked.push_back({sqlite3_column_int64(s, 0), sqlite3_column_int(s, 2),
                          sqlite3_column_int(s, 6), owned, std::string(key)});
        if (picked.size() >= max) break;
      }
      if (may_stop_early && scanned >= window) {
        truncated = true;
        break;
      }
    }
  }
  if (picked.empty()) return truncated;

  const std::int64_t first = picked.front().seq, last = picked.back().seq;
  if (skip_inside) {
    // A held-back row lies inside the range: update the picked rows one by one.
    Use u(c.prepare(sql.claim_one));
    for (const auto& p : picked) {
      sqlite3_bind_int64(u, 1, owner);
      sqlite3_bind_int64(u, 2, now + lease.count());
      sqlite3_bind_int64(u, 3, p.seq);
      if (run(c.db(), u, "claiming events") != 1)
        throw Error(ErrorCode::corrupt, "sqlite", "outbox '" + sql.table + "': claim out of step");
      sqlite3_reset(u);
    }
  } else {
    // Every claimable row in [first, last] was picked.
    Use u(c.prepare(sql.claim_range));
    sqlite3_bind_int64(u, 1, owner);
    sqlite3_bind_int64(u, 2, now + lease.count());
    sqlite3_bind_int64(u, 3, first);
    sqlite3_bind_int64(u, 4, last);
    sqlite3_bind_int64(u, 5, now);
    if (static_cast<std::size_t>(run(c.db(), u, "claiming events")) != picked.size())
      throw Error(ErrorCode::corrupt, "sqlite", "outbox '" + sql.table + "': claim out of step");
  }

  // Mostly a contiguous run of seqs: read the range and skip the few rows of other batches;
  // a sparse set is looked up through a JSON list instead.
  const bool dense = last - first < 2 * static_cast<std::int64_t>(picked.size()) + 16;
  std::string list;
  if (!dense) {
    std::vector<std::int64_t> seqs;
    seqs.reserve(picked.size());
    for (const auto& p : picked) seqs.push_back(p.seq);
    list = json_seqs(seqs);
  }
  Use b(c.prepare(dense ? sql.bodies_range : sql.bodies));
  if (dense) {
    sqlite3_bind_int64(b, 1, first);
    sqlite3_bind_int64(b, 2, last);
  } else {
    bind_text(b, 1, list);
  }
  batch.events.reserve(picked.size());
  std::size_t next = 0;
  while (next < picked.size() && step_row(c.db(), b, "reading claimed events")) {
    if (sqlite3_column_int64(b, 0) != picked[next].seq) continue;  // another batch's row
    StoredEvent& e = batch.events.emplace_back();
    read_event(b, e);
    // As the UPDATE counted it: a fresh claim is an attempt, an expired one a crash.
    e.attempts = picked[next].attempts + (picked[next].expired ? 0 : 1);
    e.crashes = picked[next].crashes + (picked[next].expired ? 1 : 0);
    e.key = std::move(picked[next].key);
    ++next;
  }
  // Rows come in seq order, so the first picked row without a body row is where reading stopped:
  // a writer's second INSERT that never came (docs/emit-contract.md). Named, to be fixed.
  if (batch.events.size() != picked.size())
    throw Error(ErrorCode::corrupt, "sqlite",
                "outbox '" + sql.table + "': claimed events without a row in '" + sql.table +
                    "_body' (row seq " + std::to_string(picked[next].seq) +
                    "; give it its body row or delete it)");
  return truncated;
}

}  // namespace outpost::sqlite_store
