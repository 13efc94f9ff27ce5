#pragma once
// The text of every statement the store runs on the outbox, built once per store from its
// (validated, quoted) names. Parameters are $n; claims carry a {max} placeholder for the batch
// size (see PostgresStore::claim_stmt). docs/postgres.md explains each statement's shape.

#include <string>

#include "stores/postgres/schema.h"

namespace outpost::pg {

// Column list shared by the claim, list and dead reads; decoded in this order.
inline constexpr const char* kEventColumns =
    "seq, id, type, key, payload, occurred_at, headers, attempts, crashes, deliver_at";

struct Sql {
  // `crashes`, `deliver_at`: the outbox has the column (versions 3 and 5). Without it (an older
  // outbox opened read-only, not migrated) the reads return crashes 0 or no deliver_at, and no
  // write may run.
  explicit Sql(const Names& n, bool crashes = true, bool deliver_at = true);

  // $1..$7: arrays of id, type, key, payload, occurred_at, headers, deliver_at (null: none)
  std::string insert;
  // Claims return kEventColumns, then part and fence.
  std::string claim_any;      // $1 owner, $2 lease ms, $3 member; {max}
  std::string claim_ordered;  // same, only runs whose key head this statement locked; $4 the
                              // keys of the member's claims in flight (left out)
  std::string claim_strict;   // same, and no key with a dead letter
  std::string ack;            // $1 owner, $2 seqs, $3 member
  std::string ack_archive;    // same, moving the rows to the archive
  std::string nack;           // $1 owner, $2 seqs, $3 errors, $4 retry ms (-1: dead), $5 member
  std::string release;        // $1 owner, $2 seqs, $3 member
  std::string renew;          // $1 owner, $2 seqs, $3 lease ms, $4 member
  // $1 member, $2 partition lease ms, $3 partitions with claims in flight, $4 leaving:
  // owned, wanted, live members, partitions moving (free, expired or being handed over).
  std::string rebalance;
  // $1: 1 when archiving; pending, leased, dead, archived, oldest pending ms, scheduled
  std::string stats;
  std::string list;   // $1 limit
  std::string dead;   // $1 limit
  std::string retry;  // $1 ids
  std::string retry_all;
  std::string discard;  // $1 ids
  std::string discard_all;
  std::string next_due;  // ms until the next retry falls due, or null
};

}  // namespace outpost::pg
