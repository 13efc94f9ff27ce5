#include "stores/postgres/inspect.h"

#include "stores/postgres/pg_conn.h"

namespace outpost::pg {

InspectSql::InspectSql(const Names& n, bool crashes, bool fence, bool archive_kept) {
  const std::string& t = n.outbox;
  // seq, id, type, key, attempts, last_error, due_at, lease_owner (only while the lease is
  // live), lease_until, crashes, fence (the partition's fence the row was claimed under).
  const std::string columns =
      "SELECT t.seq, t.id, t.type, t.key, t.attempts, coalesce(t.last_error, ''), t.due_at, "
      "CASE WHEN t.state = 1 AND t.lease_until > now() THEN t.lease_owner END, t.lease_until, " +
      std::string(crashes ? "t.crashes" : "0") + ", " + (fence ? "t.fence" : "0::bigint") +
      " FROM " + t + " t WHERE ";
  // A key's head: no earlier row of the key (one probe of the (key, seq) index per failed row).
  // Also the heads of keys with a dead letter, with the reason as the last column (store.h,
  // EventState::reason): "dead" (the strict claim holds every key with a dead letter; one probe
  // of the dead letters' key index) or "failing".
  const std::string behind_dead = "EXISTS (SELECT 1 FROM " + n.dead + " d WHERE d.key = t.key)";
  const std::string from = " FROM " + t + " t WHERE ";
  blocked = columns.substr(0, columns.size() - from.size()) + ", CASE WHEN " + behind_dead +
            " THEN 'dead' ELSE 'failing' END" + from +
            "t.key <> '' AND ((t.attempts > 0 AND coalesce(t.last_error, '') <> '') OR " +
            behind_dead + ") AND NOT EXISTS (SELECT 1 FROM " + t +
            " x WHERE x.key = t.key AND x.seq < t.seq) ORDER BY t.seq LIMIT $1::bigint";
  leased = columns + "t.state = 1 AND t.lease_until > now() ORDER BY t.seq LIMIT $1::bigint";
  // Most recently archived first, as SQLite and Redis list theirs. The archive has no index on
  // archived_at: a read sorts the rows its retention keeps (an operator's read, not the hot path).
  archived = "SELECT seq, id, type, key, payload, occurred_at, headers, attempts, " +
             std::string(archive_kept ? "crashes, deliver_at" : "0, NULL::timestamptz") +
             ", archived_at FROM " + n.archive +
             " ORDER BY archived_at DESC, seq DESC LIMIT $1::bigint";
}

std::vector<EventState> read_states(const PGresult* r) {
  std::vector<EventState> out(static_cast<std::size_t>(PQntuples(r)));
  for (std::size_t i = 0; i < out.size(); ++i) {
    int row = static_cast<int>(i);
    EventState& e = out[i];
    e.seq = get_i64(r, row, 0);
    e.id = get_uuid(r, row, 1);
    e.type = get_bytes(r, row, 2);
    e.key = get_bytes(r, row, 3);
    e.attempts = get_i32(r, row, 4);
    e.crashes = get_i32(r, row, 9);
    e.last_error = get_bytes(r, row, 5);
    if (PQnfields(r) > 11) e.reason = get_bytes(r, row, 11);  // blocked only
    if (is_null(r, row, 7)) {
      e.next_attempt = get_time(r, row, 6);
    } else {
      e.lease_owner = get_bytes(r, row, 7);
      e.lease_until = get_time(r, row, 8);
      e.fence = get_i64(r, row, 10);
    }
  }
  return out;
}

}  // namespace outpost::pg
