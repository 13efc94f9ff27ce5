#include "stores/sqlite/sqlite_settle.h"

#include <algorithm>
#include <charconv>
#include <unordered_map>

namespace outpost::sqlite_store {

// The owner of a batch's lease; -1 (never an owner) when the token is not ours.
std::int64_t owner_of(const ClaimedBatch& batch) {
  const std::string& o = batch.lease.owner;
  std::int64_t v = -1;
  auto [p, ec] = std::from_chars(o.data(), o.data() + o.size(), v);
  if (ec != std::errc{} || p != o.data() + o.size() || v < 0) return -1;
  return v;
}

std::size_t ack_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch, const AckPlan& p,
                       const StoreOptions& options) {
  auto bind_set = [&](sqlite3_stmt* st) {
    sqlite3_bind_int64(st, 1, owner_of(batch));
    if (p.whole) {
      sqlite3_bind_int64(st, 2, p.first);
      sqlite3_bind_int64(st, 3, p.last);
    } else {
      bind_text(st, 2, p.list);
    }
  };
  if (options.archive) {
    Use a(c.prepare(p.whole ? sql.ack_archive_range : sql.ack_archive));
    bind_set(a);
    run(c.db(), a, "archiving acked events");
  }
  std::size_t n;
  {
    Use d(c.prepare(p.whole ? sql.ack_range : sql.ack));
    bind_set(d);
    n = static_cast<std::size_t>(run(c.db(), d, "acking events"));
  }
  if (n > 0) {
    // A whole, gap-free batch that was still leased: every seq in [first, last] was one of its
    // rows, so all bodies in the range go. Otherwise: the bodies in the range whose state row
    // is gone, exactly the ones acked just now (state and body rows are only ever written
    // together, in one transaction).
    const bool all_in_range =
        p.whole && n == p.seqs.size() && p.last - p.first + 1 == static_cast<std::int64_t>(n);
    Use db(c.prepare(all_in_range ? sql.delete_bodies_range : sql.delete_orphan_bodies));
    sqlite3_bind_int64(db, 1, p.first);
    sqlite3_bind_int64(db, 2, p.last);
    run(c.db(), db, "acking events");
  }
  if (p.prune && options.archive && options.archive_retention.count() > 0) {
    Use pr(c.prepare(sql.prune));
    sqlite3_bind_int64(pr, 1, options.archive_retention.count());
    run(c.db(), pr, "pruning the archive");
  }
  if (p.prune && options.dead_retention.count() > 0) {
    Use pr(c.prepare(sql.prune_dead));
    sqlite3_bind_int64(pr, 1, options.dead_retention.count());
    run(c.db(), pr, "pruning the dead letters");
  }
  return n;
}

std::size_t nack_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch,
                        std::span<const Nack> nacks) {
  std::unordered_map<EventId, std::int64_t, EventIdHash> seq_of;
  for (const auto& e : batch.events) seq_of.emplace(e.id, e.seq);
  std::size_t count = 0;
  for (const auto& nk : nacks) {
    auto it = seq_of.find(nk.id);
    if (it == seq_of.end()) continue;
    if (nk.retry_in) {
      Use s(c.prepare(sql.nack_retry));
      sqlite3_bind_int64(s, 1, std::max<std::int64_t>(0, nk.retry_in->count()));
      bind_text(s, 2, nk.error);
      sqlite3_bind_int64(s, 3, it->second);
      sqlite3_bind_int64(s, 4, owner_of(batch));
      count += static_cast<std::size_t>(run(c.db(), s, "rescheduling an event"));
    } else {
      Use s(c.prepare(sql.nack_dead));
      bind_text(s, 1, nk.error);
      sqlite3_bind_int64(s, 2, it->second);
      sqlite3_bind_int64(s, 3, owner_of(batch));
      if (run(c.db(), s, "dead-lettering an event") == 0) continue;
      Use d(c.prepare(sql.delete_seq));
      sqlite3_bind_int64(d, 1, it->second);
      run(c.db(), d, "dead-lettering an event");
      Use db(c.prepare(sql.delete_body_seq));
      sqlite3_bind_int64(db, 1, it->second);
      run(c.db(), db, "dead-lettering an event");
      ++count;
    }
  }
  return count;
}

std::size_t release_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch,
                           const std::vector<std::int64_t>& seqs) {
  std::string list = json_seqs(seqs);
  Use s(c.prepare(sql.release));
  sqlite3_bind_int64(s, 1, owner_of(batch));
  bind_text(s, 2, list);
  return static_cast<std::size_t>(run(c.db(), s, "releasing events"));
}

}  // namespace outpost::sqlite_store
