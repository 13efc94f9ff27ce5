#pragma once
// Settling a claimed batch in the SQLite store (ack, nack, release), inside the caller's write
// transaction. Every statement is fenced by the batch's lease owner, unique per claim, so a
// stale owner changes nothing and counts nothing.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "outpost/store.h"
#include "stores/sqlite/sqlite_conn.h"
#include "stores/sqlite/sqlite_sql.h"

namespace outpost::sqlite_store {

// The owner of a batch's lease; -1 (never an owner) when the token is not ours.
std::int64_t owner_of(const ClaimedBatch& batch);

struct AckPlan {
  std::vector<std::int64_t> seqs;
  std::int64_t first = 0, last = 0;
  bool whole = false;  // the whole batch: its rows are the lease owner's rows in [first, last]
  std::string list;    // JSON seqs when not whole
  bool prune = false;  // apply archive_retention and dead_retention in this transaction
};

// Deletes (or archives) the planned events still leased by the batch; returns how many.
std::size_t ack_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch, const AckPlan& p,
                       const StoreOptions& options);
// Reschedules or dead-letters each nack's event still leased by the batch; returns how many.
std::size_t nack_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch,
                        std::span<const Nack> nacks);
// Gives the events back (due now, the claim's attempt not counted); returns how many.
std::size_t release_in_txn(Conn& c, const SqlText& sql, const ClaimedBatch& batch,
                           const std::vector<std::int64_t>& seqs);

}  // namespace outpost::sqlite_store
