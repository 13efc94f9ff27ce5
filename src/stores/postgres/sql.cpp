#include "stores/postgres/sql.h"

namespace outpost::pg {

Sql::Sql(const Names& n) {
  const std::string& t = n.outbox;
  insert = "INSERT INTO " + t +
           " (id, type, key, payload, occurred_at, headers) SELECT * FROM unnest("
           "$1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], "
           "$6::jsonb[]) WHERE NOT EXISTS (SELECT 1 FROM " +
           n.dead + " WHERE id = ANY($1::uuid[]))";
  const std::string claimable =
      "(t.state = 0 OR (t.state = 1 AND t.lease_until <= now()) OR "
      "(t.state = 2 AND t.due_at <= now()))";
  const std::string lease_set =
      "UPDATE " + t +
      " u SET state = 1, lease_owner = $1, lease_until = now() + $2::bigint * interval '1 "
      "millisecond', attempts = u.attempts + 1 FROM pick WHERE u.seq = pick.seq RETURNING "
      "u.seq, u.id, u.type, u.key, u.payload, u.occurred_at, u.headers, u.attempts";
  claim_any = "WITH pick AS (SELECT t.seq FROM " + t + " t WHERE " + claimable +
              " ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED) " + lease_set;
  // Candidates are taken exactly as in the unordered claim (an index scan of seq that stops
  // after $3 locked rows); what makes it ordered is the check after locking. A filter that
  // probes each candidate's key in the WHERE clause was tried: the planner then estimated the
  // filter as very selective and chose a sequential scan and sort of the whole table (1.7 s
  // per claim on a 25k-row backlog under load).
  claim_ordered =
      // Candidates in sequence order, locked; rows locked by a concurrent claim are skipped.
      "WITH cand AS (SELECT t.seq, t.key FROM " + t + " t WHERE " + claimable +
      " ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED), "
      "runs AS (SELECT key, min(seq) AS lo, max(seq) AS hi, count(*) AS n FROM cand "
      "WHERE key <> '' GROUP BY key), "
      // A key counts only if we locked its head; its run only if no row of the key between
      // our first and last was skipped.
      "ok AS (SELECT r.key, r.lo, (SELECT min(x.seq) FROM " +
      t + " x WHERE x.key = r.key) = r.lo AS head, (r.n = 1 OR (SELECT count(*) FROM " + t +
      " x WHERE x.key = r.key AND x.seq BETWEEN r.lo AND r.hi) = r.n) AS whole FROM runs r), "
      "pick AS (SELECT c.seq FROM cand c LEFT JOIN ok o ON o.key = c.key WHERE c.key = '' OR "
      "(o.head AND (o.whole OR c.seq = o.lo))) " +
      lease_set;
  ack = "DELETE FROM " + t + " WHERE seq = ANY($2::bigint[]) AND lease_owner = $1 AND state = 1";
  ack_archive = "WITH d AS (DELETE FROM " + t +
                " WHERE seq = ANY($2::bigint[]) AND lease_owner = $1 AND state = 1 "
                "RETURNING seq, id, type, key, payload, occurred_at, headers, attempts) "
                "INSERT INTO " +
                n.archive +
                " (seq, id, type, key, payload, occurred_at, headers, attempts, "
                "archived_at) SELECT d.*, clock_timestamp() FROM d";
  nack =
      "WITH n AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[]) AS n(seq, err, "
      "ms)), "
      "upd AS (UPDATE " +
      t +
      " t SET state = 2, lease_owner = NULL, lease_until = NULL, last_error = n.err, "
      "due_at = now() + n.ms * interval '1 millisecond' FROM n WHERE t.seq = n.seq AND n.ms >= 0 "
      "AND t.lease_owner = $1 AND t.state = 1 RETURNING 1), "
      "del AS (DELETE FROM " +
      t +
      " t USING n WHERE t.seq = n.seq AND n.ms < 0 AND t.lease_owner = $1 AND t.state = 1 "
      "RETURNING t.seq, t.id, t.type, t.key, t.payload, t.occurred_at, t.headers, t.attempts, "
      "n.err), "
      "ins AS (INSERT INTO " +
      n.dead +
      " (seq, id, type, key, payload, occurred_at, headers, attempts, last_error) SELECT * FROM "
      "del RETURNING 1) "
      "SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)";
  // Released events are due now: tell idle relays (a trigger covers inserts only).
  release = "WITH u AS (UPDATE " + t +
            " SET state = 0, lease_owner = NULL, lease_until = NULL, due_at = now(), "
            "attempts = greatest(attempts - 1, 0) WHERE seq = ANY($2::bigint[]) AND "
            "lease_owner = $1 AND state = 1 RETURNING 1), "
            "c AS (SELECT count(*) AS n FROM u) "
            "SELECT n FROM c, LATERAL (SELECT CASE WHEN c.n > 0 THEN pg_notify('" +
            n.channel + "', '') END) x";
  renew = "WITH u AS (UPDATE " + t +
          " SET lease_until = now() + $3::bigint * interval '1 millisecond' WHERE seq = "
          "ANY($2::bigint[]) AND lease_owner = $1 AND state = 1 RETURNING 1) "
          "SELECT count(*) FROM " +
          t + " WHERE seq = ANY($2::bigint[]) AND lease_owner IS NOT NULL AND lease_owner <> $1";
  stats =
      "SELECT count(*) FILTER (WHERE NOT (state = 1 AND lease_until > now())), "
      "count(*) FILTER (WHERE state = 1 AND lease_until > now()), "
      "(SELECT count(*) FROM " +
      n.dead +
      "), "
      "CASE WHEN $1::int = 1 THEN (SELECT count(*) FROM " +
      n.archive +
      ") ELSE 0 END, "
      "coalesce((extract(epoch FROM now() - min(occurred_at)) * 1000)::bigint, 0) "
      "FROM " +
      t;
  list = std::string("SELECT ") + kEventColumns + " FROM " + t + " ORDER BY seq LIMIT $1::bigint";
  dead = std::string("SELECT ") + kEventColumns + ", last_error, dead_at FROM " + n.dead +
         " ORDER BY seq LIMIT $1::bigint";
  const std::string revive =
      "INSERT INTO " + t +
      " (seq, id, type, key, payload, occurred_at, headers, attempts, state, due_at, "
      "last_error) OVERRIDING SYSTEM VALUE SELECT seq, id, type, key, payload, occurred_at, "
      "headers, 0, 0, now(), last_error FROM d";
  retry = "WITH d AS (DELETE FROM " + n.dead + " WHERE id = ANY($1::uuid[]) RETURNING *) " + revive;
  retry_all = "WITH d AS (DELETE FROM " + n.dead + " RETURNING *) " + revive;
  discard = "DELETE FROM " + n.dead + " WHERE id = ANY($1::uuid[])";
  discard_all = "DELETE FROM " + n.dead;
  // Next retry falling due (the due_at index); lease expiries are left to the caller's poll.
  next_due = "SELECT (extract(epoch FROM min(due_at) - now()) * 1000)::bigint FROM " + t +
             " WHERE due_at > now()";
}

}  // namespace outpost::pg
