#pragma once
// The SQL text of the SQLite store, built once per store object from the validated table name
// (never from user text otherwise). Statements are prepared and cached per connection (Conn).

#include <cstddef>
#include <string>

namespace outpost::sqlite_store {

// Rows per multi-row INSERT (bound parameters stay well under SQLite's limit).
inline constexpr std::size_t kMaxRowsPerInsert = 100;
// The database's clock in milliseconds since the Unix epoch. SQLite 3.40 has no 'subsec'
// modifier; julianday() carries milliseconds. Constant within one sqlite3_step().
inline constexpr const char* kNowMs =
    "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

struct SqlText {
  // `crashes`, `deliver_at`: the outbox has the column (schema versions 3 and 4); without it (an
  // older file opened read-only, not migrated) the reads return crashes 0 or no deliver_at, and
  // no write may run.
  explicit SqlText(const std::string& table, bool crashes = true, bool deliver_at = true);

  // State rows first (they take the sequence), then the bodies with the same seqs.
  std::string insert_state(std::size_t rows) const;
  std::string insert_body(std::size_t rows) const;

  std::string table;
  std::string ack, ack_archive, ack_archive_range, ack_range, bodies, bodies_range, claim_one;
  std::string claim_range, count_archive, count_dead, dead_keys, delete_bodies_range,
      delete_body_seq;
  std::string delete_dead_one, delete_orphan_bodies, delete_revived, delete_seq, discard_all;
  std::string find_bodies, find_dead, insert_body_full, insert_state_full, list, list_archive;
  std::string list_dead;
  std::string nack_dead, nack_retry, next_due, next_due_strict, prune, prune_dead, release, renew,
      renew_lost, retry_all;
  std::string retry_all_body, retry_one, retry_one_body, scan, stats;
};

}  // namespace outpost::sqlite_store
