#pragma once
// The SQLite store's claim: which rows a claim takes, decided in C++ over the narrow state rows.

#include <cstddef>
#include <cstdint>

#include "outpost/store.h"
#include "stores/sqlite/sqlite_conn.h"
#include "stores/sqlite/sqlite_sql.h"

namespace outpost::sqlite_store {

// Claims up to `max` events into `batch` (its lease owner `owner`), inside the caller's write
// transaction, with the database time `now` (ms). One pass over the narrow
// state rows in seq order, deciding in C++: a row is claimable when due and not under a live
// lease; in ordered mode a claimable row is held back when an earlier row of its key is
// attempted and not claimable (in flight or waiting for a retry), which the pass has seen
// before it, since it reads from the head. No index is needed for that (an index on attempted
// rows cost a B-tree insert per claimed row and a delete per ack: about half the claim+ack
// time). Then one UPDATE over the picked seq range (or one per row when a held-back row lies
// in between), then the bodies.
//
// When every key is in flight (e.g. a relay claims the next batch while the previous one,
// holding all keys, is being delivered), nothing is claimable and an exact answer means
// reading the whole backlog. So a claim may stop after kScanWindow rows plus 1.5 x max and
// return what it found, but never two claims of one store object in a row (`may_stop_early`): the
// one after a truncated claim reads as far as needed, and wait_for_work() returns at once after a
// truncated claim, so a relay never waits while a later row is claimable.
// Returns whether this claim stopped at its window.
bool claim_in_txn(Conn& c, const SqlText& sql, ClaimedBatch& batch, std::int64_t owner,
                  std::int64_t now, std::size_t max, Duration lease, ClaimOrder order,
                  bool may_stop_early);

}  // namespace outpost::sqlite_store
