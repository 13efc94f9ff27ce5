#include "stores/postgres/sql.h"

namespace outpost::pg {

Sql::Sql(const Names& n, bool crashes, bool deliver_at) {
  const std::string& t = n.outbox;
  const std::string columns = std::string("seq, id, type, key, payload, occurred_at, headers, ") +
                              "attempts, " + (crashes ? "crashes" : "0") + ", " +
                              (deliver_at ? "deliver_at" : "NULL::timestamptz");
  // A row with deliver_at in the future is held by the outbox's insert trigger (migration_v5).
  insert = "INSERT INTO " + t +
           " (id, type, key, payload, occurred_at, headers, deliver_at) SELECT * FROM unnest("
           "$1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], "
           "$6::jsonb[], $7::timestamptz[]) WHERE NOT EXISTS (SELECT 1 FROM " +
           n.dead + " WHERE id = ANY($1::uuid[]))";
  // Whether the row under alias `a` can be claimed now: ready, lease expired, or retry due.
  auto claimable_row = [](const std::string& a) {
    return "(" + a + ".state = 0 OR (" + a + ".state = 1 AND " + a + ".lease_until <= now()) OR (" +
           a + ".state = 2 AND " + a + ".due_at <= now()))";
  };
  // Partitions (docs/postgres.md, "Partitions and owners"): a claim takes rows only from the
  // partitions this member ($3) owns under a live partition lease and is not handing over, and
  // stamps each row with its partition's fence. One InitPlan each, read once per statement.
  const std::string mine = " AND t.part = ANY(ARRAY(SELECT p.part FROM " + n.parts +
                           " p WHERE p.owner = $3 AND NOT p.releasing AND p.lease_until > now()))";
  // Each write-back finds the row's partition still owned by this member ($M) under the fence
  // the row was claimed with: a stale owner's write (the partition moved) changes nothing.
  auto fenced = [&n](const std::string& a, const std::string& m) {
    return " AND (" + a + ".part, " + a + ".fence) IN (SELECT p.part, p.fence FROM " + n.parts +
           " p WHERE p.owner = " + m + ")";
  };
  const std::string claimable = claimable_row("t") + mine;
  // A row still leased (state 1) when it is claimed is one whose lease expired with no outcome
  // recorded (ack deletes, nack and release leave state 1): the expired claim's attempt stays
  // the one in flight and the claim counts a crash instead (store.h). SET reads the old row.
  const std::string lease_set =
      "UPDATE " + t +
      " u SET state = 1, lease_owner = $1, lease_until = now() + $2::bigint * interval '1 "
      "millisecond', attempts = u.attempts + (u.state <> 1)::int, crashes = u.crashes + "
      "(u.state = 1)::int, fence = (ARRAY(SELECT p.fence FROM " +
      n.parts +
      " p ORDER BY p.part))[u.part + 1] FROM pick WHERE u.seq = pick.seq RETURNING u.seq, u.id, "
      "u.type, u.key, u.payload, u.occurred_at, u.headers, u.attempts, u.crashes, u.deliver_at, "
      "u.part::int, u.fence";
  claim_any = "WITH pick AS (SELECT t.seq FROM " + t + " t WHERE " + claimable +
              " ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED) " + lease_set;
  // Candidates in sequence order, locked, with each candidate's key head (its lowest live seq)
  // found by one probe of the (key, seq) index: a row whose key's head is not claimable (leased
  // elsewhere, or waiting to retry) is held back and filtered out before it is locked, so a long
  // held-back run cannot fill the LIMIT and starve the keys behind it. The scan stays an index
  // scan of seq that stops after {max} locked rows: the planner estimates the head test as a
  // plain boolean (half the rows), not as a selective comparison, so the LIMIT stays cheap. (A
  // filter comparing a subquery's min(seq) with the row's seq was estimated as very selective:
  // the planner chose a sequential scan and sort of the whole table, 1.7 s per claim on a
  // 25k-row backlog under load.)
  // `head_free`: the test on a keyed candidate whose key head is h. $4: the keys of the member's
  // own claims in flight (Membership::busy_keys): their later rows are held back anyway, so
  // their heads are not probed (a one-time filter of the probe: h is null, the row is dropped).
  // With 8 relays and 1,000 keys each relay's ~125 keys were mostly in its batch in flight: two
  // thirds of its candidates were probed only to be dropped (docs/benchmarks.md).
  auto ordered_claim = [&](const std::string& head_free) {
    return "WITH cand AS (SELECT t.seq, t.key, h.seq AS head FROM " + t +
           " t LEFT JOIN LATERAL (SELECT x.seq, " + claimable_row("x") + " AS free FROM " + t +
           " x WHERE x.key = t.key AND t.key <> '' AND t.key <> ALL($4::text[]) ORDER BY x.seq "
           "LIMIT 1) h ON true WHERE " +
           claimable + " AND (t.key = '' OR " + head_free +
           ") ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED), "
           "runs AS (SELECT key, min(seq) AS lo, max(seq) AS hi, count(*) AS n, min(head) AS head, "
           "array_agg(seq) AS seqs FROM cand WHERE key <> '' GROUP BY key), "
           // A key counts only if we locked its head (a head locked by a claim still in progress
           // looked free but was skipped); its whole run only if no row of the key between our
           // first and last was skipped, else its head alone. Each key's rows come out of its one
           // aggregate row (unnest): no join of the candidates with their keys, whose plan depended
           // on estimates (a nested loop rescanning the aggregate once per candidate, 1.5 ms of a
           // 2.8 ms claim, when planned on a fresh outbox; docs/postgres.md).
           "pick AS (SELECT unnest(CASE WHEN r.n = 1 OR (SELECT count(*) FROM " +
           t +
           " x WHERE x.key = r.key AND x.seq BETWEEN r.lo AND r.hi) = r.n THEN r.seqs ELSE "
           "ARRAY[r.lo] END) AS seq FROM runs r WHERE r.head = r.lo UNION ALL SELECT c.seq FROM "
           "cand c WHERE c.key = '') " +
           lease_set;
  };
  claim_ordered = ordered_claim("h.free");
  // ClaimOrder::strict (docs/postgres.md, "Strict key order"): as ordered, and a key with a
  // dead letter is not claimed at all until it is retried or discarded (one probe of the dead
  // letters' key index per keyed candidate). A nack to dead in the same pipeline is seen.
  claim_strict =
      ordered_claim("(h.free AND NOT EXISTS (SELECT 1 FROM " + n.dead + " d WHERE d.key = t.key))");
  ack = "DELETE FROM " + t +
        " t WHERE t.seq = ANY($2::bigint[]) AND t.lease_owner = $1 AND "
        "t.state = 1" +
        fenced("t", "$3");
  ack_archive = "WITH d AS (DELETE FROM " + t +
                " t WHERE t.seq = ANY($2::bigint[]) AND t.lease_owner = $1 AND t.state = 1" +
                fenced("t", "$3") +
                " RETURNING t.seq, t.id, t.type, t.key, t.payload, t.occurred_at, t.headers, "
                "t.attempts, t.crashes, t.deliver_at) "
                "INSERT INTO " +
                n.archive +
                " (seq, id, type, key, payload, occurred_at, headers, attempts, crashes, "
                "deliver_at, archived_at) SELECT d.*, clock_timestamp() FROM d";
  nack =
      "WITH n AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[]) AS n(seq, err, "
      "ms)), "
      "upd AS (UPDATE " +
      t +
      " t SET state = 2, lease_owner = NULL, lease_until = NULL, last_error = n.err, "
      "due_at = now() + n.ms * interval '1 millisecond' FROM n WHERE t.seq = n.seq AND n.ms >= 0 "
      "AND t.lease_owner = $1 AND t.state = 1" +
      fenced("t", "$5") +
      " RETURNING 1), "
      "del AS (DELETE FROM " +
      t + " t USING n WHERE t.seq = n.seq AND n.ms < 0 AND t.lease_owner = $1 AND t.state = 1" +
      fenced("t", "$5") +
      " RETURNING t.seq, t.id, t.type, t.key, t.payload, t.occurred_at, t.headers, t.attempts, "
      "n.err, t.crashes, t.deliver_at), "
      "ins AS (INSERT INTO " +
      n.dead +
      " (seq, id, type, key, payload, occurred_at, headers, attempts, last_error, crashes, "
      "deliver_at) "
      "SELECT * FROM del RETURNING 1) "
      "SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)";
  // Released events are due now: tell idle relays (a trigger covers inserts only).
  release = "WITH u AS (UPDATE " + t +
            " t SET state = 0, lease_owner = NULL, lease_until = NULL, due_at = now(), "
            "attempts = greatest(t.attempts - 1, 0) WHERE t.seq = ANY($2::bigint[]) AND "
            "t.lease_owner = $1 AND t.state = 1" +
            fenced("t", "$3") +
            " RETURNING 1), "
            "c AS (SELECT count(*) AS n FROM u) "
            "SELECT n FROM c, LATERAL (SELECT CASE WHEN c.n > 0 THEN pg_notify('" +
            n.channel + "', '') END) x";
  // Lost: a row of the batch leased by another claim, or still ours in a partition that moved
  // (its fence no longer matches).
  renew = "WITH u AS (UPDATE " + t +
          " t SET lease_until = now() + $3::bigint * interval '1 millisecond' WHERE t.seq = "
          "ANY($2::bigint[]) AND t.lease_owner = $1 AND t.state = 1" +
          fenced("t", "$4") + " RETURNING 1) SELECT count(*) FROM " + t +
          " t WHERE t.seq = ANY($2::bigint[]) AND t.lease_owner IS NOT NULL AND (t.lease_owner "
          "<> $1 OR NOT ((t.part, t.fence) IN (SELECT p.part, p.fence FROM " +
          n.parts + " p WHERE p.owner = $4)))";
  rebalance = "SELECT owned, wanted, live, moving FROM " + n.rebalance +
              "($1, $2::bigint, $3::smallint[], $4::boolean)";
  // Scheduled: held for its deliver_at, never attempted (migration_v5); not pending, and not
  // the oldest pending either (an event scheduled for tomorrow is not a stuck one).
  const std::string scheduled = "(state = 2 AND attempts = 0 AND due_at > now())";
  stats = "SELECT count(*) FILTER (WHERE NOT (state = 1 AND lease_until > now()) AND NOT " +
          scheduled +
          "), "
          "count(*) FILTER (WHERE state = 1 AND lease_until > now()), "
          "(SELECT count(*) FROM " +
          n.dead +
          "), "
          "CASE WHEN $1::int = 1 THEN (SELECT count(*) FROM " +
          n.archive +
          ") ELSE 0 END, "
          "coalesce((extract(epoch FROM now() - min(occurred_at) FILTER (WHERE NOT " +
          scheduled + ")) * 1000)::bigint, 0), count(*) FILTER (WHERE " + scheduled + ") FROM " + t;
  list = "SELECT " + columns + " FROM " + t + " ORDER BY seq LIMIT $1::bigint";
  dead = "SELECT " + columns + ", last_error, dead_at FROM " + n.dead +
         " ORDER BY seq LIMIT $1::bigint";
  // deliver_at comes back with the event; it has passed (the event was attempted), so the
  // insert trigger does not hold it again.
  const std::string revive =
      "INSERT INTO " + t +
      " (seq, id, type, key, payload, occurred_at, headers, attempts, crashes, state, due_at, "
      "last_error, deliver_at) OVERRIDING SYSTEM VALUE SELECT seq, id, type, key, payload, "
      "occurred_at, headers, 0, 0, 0, now(), last_error, deliver_at FROM d";
  retry = "WITH d AS (DELETE FROM " + n.dead + " WHERE id = ANY($1::uuid[]) RETURNING *) " + revive;
  retry_all = "WITH d AS (DELETE FROM " + n.dead + " RETURNING *) " + revive;
  discard = "DELETE FROM " + n.dead + " WHERE id = ANY($1::uuid[])";
  discard_all = "DELETE FROM " + n.dead;
  // Next retry or scheduled event falling due (the due_at index); lease expiries are left to
  // the caller's poll.
  next_due = "SELECT (extract(epoch FROM min(due_at) - now()) * 1000)::bigint FROM " + t +
             " WHERE due_at > now()";
}

}  // namespace outpost::pg
