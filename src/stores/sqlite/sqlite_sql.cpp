#include "stores/sqlite/sqlite_sql.h"

#include "stores/sqlite/sqlite_conn.h"

namespace outpost::sqlite_store {

SqlText::SqlText(const std::string& t, bool crashes, bool deliver_at) : table(t) {
  const std::string body = t + "_body";
  const std::string now = kNowMs;
  const std::string crashes_col = crashes ? "crashes" : "0";
  // kEventColumns as a read of the dead and archive tables: deliver_at NULL before version 4.
  const std::string event_cols =
      deliver_at ? std::string(kEventColumns)
                 : "seq, id, type, key, payload, occurred_at, headers, attempts, NULL";
  const std::string body_at = deliver_at ? "deliver_at" : "NULL";
  // The claim reads the state rows from the head (claim_in_txn decides in C++), then leases
  // the picked rows: by range when every claimable row in it was picked, else one by one.
  // The claimable test here must stay the one in claim_in_txn.
  scan = "SELECT seq, key, attempts, due_at, lease_owner, lease_until, " + crashes_col + " FROM " +
         t + " ORDER BY seq";
  // A row still owned by an earlier claim (its lease expired: ack, nack and release clear the
  // owner) counts a crash, not an attempt (store.h). SET reads the row's old lease_owner.
  const std::string lease_set = "UPDATE " + t +
                                " SET attempts = attempts + (lease_owner IS NULL), crashes = "
                                "crashes + (lease_owner IS NOT NULL), lease_owner = ?1, "
                                "lease_until = ?2 WHERE ";
  claim_range = lease_set +
                "seq BETWEEN ?3 AND ?4 AND due_at <= ?5 AND "
                "(lease_owner IS NULL OR lease_until <= ?5)";
  claim_one = lease_set + "seq = ?3";
  insert_state_full = insert_state(kMaxRowsPerInsert);
  insert_body_full = insert_body(kMaxRowsPerInsert);
  std::string in_list = "seq IN (SELECT value FROM json_each(?2))";
  // Full event columns: state row s joined with its body b.
  std::string full =
      "s.seq, b.id, b.type, s.key, b.payload, b.occurred_at, b.headers, s.attempts, " +
      std::string(deliver_at ? "b.deliver_at" : "NULL");
  std::string joined = t + " AS s JOIN " + body + " AS b ON b.seq = s.seq";
  const std::string body_cols =
      "SELECT seq, id, type, '', payload, occurred_at, headers, 0, " + body_at + " FROM " + body;
  bodies = body_cols + " WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY seq";
  bodies_range = body_cols + " WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq";
  ack = "DELETE FROM " + t + " WHERE lease_owner = ?1 AND " + in_list;
  ack_range = "DELETE FROM " + t + " WHERE lease_owner = ?1 AND seq BETWEEN ?2 AND ?3";
  delete_bodies_range = "DELETE FROM " + body + " WHERE seq BETWEEN ?1 AND ?2";
  delete_orphan_bodies = "DELETE FROM " + body +
                         " WHERE seq BETWEEN ?1 AND ?2 AND NOT EXISTS "
                         "(SELECT 1 FROM " +
                         t + " AS s WHERE s.seq = " + body + ".seq)";
  ack_archive = "INSERT OR REPLACE INTO " + t + "_archive (" + kEventColumns +
                ", acked_at) SELECT " + full + ", " + now + " FROM " + joined +
                " WHERE s.lease_owner = ?1 AND s." + in_list;
  ack_archive_range = "INSERT OR REPLACE INTO " + t + "_archive (" + kEventColumns +
                      ", acked_at) SELECT " + full + ", " + now + " FROM " + joined +
                      " WHERE s.lease_owner = ?1 AND s.seq BETWEEN ?2 AND ?3";
  prune = "DELETE FROM " + t + "_archive WHERE acked_at < " + now + " - ?1";
  // Dead-letter retention (StoreOptions::dead_retention): dead_at is Unix ms like acked_at.
  prune_dead = "DELETE FROM " + t + "_dead WHERE dead_at < " + now + " - ?1";
  nack_retry = "UPDATE " + t + " SET lease_owner = NULL, lease_until = 0, due_at = " + now +
               " + ?1, last_error = ?2 WHERE seq = ?3 AND lease_owner = ?4";
  nack_dead = "INSERT OR REPLACE INTO " + t + "_dead (" + kEventColumns +
              ", last_error, dead_at, crashes) SELECT " + full + ", ?1, " + now +
              ", s.crashes FROM " + joined + " WHERE s.seq = ?2 AND s.lease_owner = ?3";
  delete_seq = "DELETE FROM " + t + " WHERE seq = ?1";
  delete_body_seq = "DELETE FROM " + body + " WHERE seq = ?1";
  release = "UPDATE " + t +
            " SET lease_owner = NULL, lease_until = 0, due_at = 0, "
            "attempts = max(attempts - 1, 0) WHERE lease_owner = ?1 AND " +
            in_list;
  renew = "UPDATE " + t + " SET lease_until = " + now +
          " + ?1 WHERE lease_owner = ?2 AND seq IN (SELECT value FROM json_each(?3))";
  renew_lost = "SELECT count(*) FROM " + t +
               " WHERE lease_owner IS NOT NULL AND lease_owner <> ?1 AND " + in_list;
  // Scheduled (StoreStats::scheduled): never tried, not leased, due later (deliver_at).
  // The oldest undelivered event leaves the scheduled ones out (an event scheduled for tomorrow
  // is not a stuck one), as PostgreSQL counts it.
  const std::string scheduled = "attempts = 0 AND lease_owner IS NULL AND due_at > " + now;
  stats = "SELECT count(*), coalesce(sum(lease_owner IS NOT NULL AND lease_until > " + now +
          "), 0), (SELECT min(b.occurred_at) FROM " + body + " AS b JOIN " + t +
          " AS s ON s.seq = b.seq WHERE NOT (" + scheduled + ")), " + now + ", coalesce(sum(" +
          scheduled + "), 0) FROM " + t;
  count_dead = "SELECT count(*) FROM " + t + "_dead";
  // ClaimOrder::strict: a key with a dead letter waits until it is retried or discarded.
  dead_keys = "SELECT DISTINCT key FROM " + t + "_dead WHERE key <> ''";
  count_archive = "SELECT count(*) FROM " + t + "_archive";
  list = "SELECT " + full + ", " + (crashes ? "s.crashes" : "0") + " FROM " + joined +
         " ORDER BY s.seq LIMIT ?1";
  // Store::archived: most recently acked first (acked_at in ms, as now).
  list_archive = "SELECT " + event_cols + ", acked_at FROM " + t +
                 "_archive ORDER BY acked_at DESC, seq DESC LIMIT ?1";
  list_dead = "SELECT " + event_cols + ", last_error, dead_at, " + crashes_col + " FROM " + t +
              "_dead ORDER BY seq LIMIT ?1";
  std::string revive = "INSERT OR IGNORE INTO " + t +
                       " (seq, key, attempts, crashes, due_at, lease_owner, lease_until, "
                       "last_error) SELECT seq, key, 0, 0, 0, NULL, 0, last_error FROM " +
                       t + "_dead";
  // A retried dead letter keeps its deliver_at (passed: it was attempted), as on PostgreSQL.
  std::string revive_body = "INSERT OR IGNORE INTO " + body +
                            " (seq, id, type, payload, occurred_at, headers, deliver_at) SELECT "
                            "seq, id, type, payload, occurred_at, headers, deliver_at FROM " +
                            t + "_dead";
  retry_one = revive + " WHERE id = ?1";
  retry_one_body = revive_body + " WHERE id = ?1";
  retry_all = revive + " ORDER BY seq";
  retry_all_body = revive_body + " ORDER BY seq";
  delete_dead_one = "DELETE FROM " + t + "_dead WHERE id = ?1";
  delete_revived = "DELETE FROM " + t + "_dead WHERE seq IN (SELECT seq FROM " + t + ")";
  discard_all = "DELETE FROM " + t + "_dead";
  find_bodies =
      "SELECT id FROM " + body + " WHERE hex(id) IN (SELECT value FROM json_each(?1)) LIMIT 1";
  find_dead = "SELECT 1 FROM " + t + "_dead WHERE id = ?1";
  const std::string due_rows =
      "SELECT CASE WHEN lease_owner IS NOT NULL THEN lease_until ELSE "
      "due_at END AS w FROM " +
      t + " WHERE (attempts > 0 OR due_at > 0)";
  next_due = "SELECT min(w) - " + now + " FROM (" + due_rows + ") WHERE w > " + now + " - 1000";
  // ClaimOrder::strict: the events of a key with a dead letter are held however due (dead_keys).
  next_due_strict = "SELECT min(w) - " + now + " FROM (" + due_rows + " AND key NOT IN (" +
                    dead_keys + ")) WHERE w > " + now + " - 1000";
}

// State rows first (they take the sequence: consecutive within one statement under the write
// lock), then the bodies with the same seqs. due_at = 0: a new event is due at once; a
// scheduled one (Event::deliver_at) is due then, in Unix ms, and its body keeps deliver_at in
// Unix us (schema version 4), to come back out with the event.
std::string SqlText::insert_state(std::size_t rows) const {
  std::string sql = "INSERT INTO " + table + " (key, due_at) VALUES ";
  for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,?)" : "(?,?)";
  return sql;
}
std::string SqlText::insert_body(std::size_t rows) const {
  std::string sql = "INSERT INTO " + table +
                    "_body (seq, id, type, payload, occurred_at, headers, deliver_at) VALUES ";
  for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?)";
  return sql;
}

}  // namespace outpost::sqlite_store
