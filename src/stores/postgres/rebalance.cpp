// The partition heartbeat of schema version 8 (docs/postgres.md, "Partitions and owners"):
// who should own which partition is decided once per change of the live members, spreading the
// partitions that have a backlog as evenly as all of them, and kept in <table>_partitions.target.

#include "stores/postgres/schema.h"

namespace outpost::pg {

std::string migration_v8(const Names& n) {
  // Until version 8 a member with too many partitions handed over its highest-numbered ones,
  // and released each as soon as none of its claims there was in flight: the idle ones went at
  // once, the ones with a backlog only after their batches were settled, and a joining member
  // took whatever was free first. With a backlog on few keys, a relay that joined beside a
  // busy one filled its even share with empty partitions and delivered nothing. Now every partition
  // has a target member, dealt when the live members change: partitions with a backlog (among the
  // oldest 10,000 rows, one scan of the seq index) and partitions without are each spread evenly, a
  // partition staying with its current owner while that owner is under its quota of the kind. The
  // heartbeat then hands over what is targeted elsewhere and takes what is targeted to it. The
  // fencing rules are the same: a partition moves only once released (drained first) or expired,
  // its fence one higher. Signature and result are those of version 4, so a relay of version 7
  // still running after the upgrade calls this one.
  const std::string lock_name = n.schema + "." + n.table + "_rebalance";
  return "ALTER TABLE " + n.parts + " ADD COLUMN IF NOT EXISTS target text;\n" +
         "CREATE OR REPLACE FUNCTION " + n.rebalance +
         R"((m text, lease_ms bigint, busy smallint[], leaving boolean)
RETURNS TABLE (owned integer, wanted integer, live integer, moving integer)
LANGUAGE plpgsql AS $f$
DECLARE
  lease interval := lease_ms * interval '1 millisecond';
  ms text[];
  n integer;
  total integer;
  want integer;
  stale boolean;
BEGIN
)" + heartbeat_membership(n) +
         R"(  -- The targets are dealt again when they do not name exactly the live members (a join, a
  -- leave, an expiry), by one member at a time; the others use what it wrote.
  FOR i IN 1..2 LOOP
    SELECT array_agg(y.member ORDER BY y.member) INTO ms FROM )" +
         n.members + R"( y WHERE y.until > now();
    n := coalesce(array_length(ms, 1), 0);
    SELECT count(*), count(*) FILTER (WHERE p.target IS NULL OR NOT (p.target = ANY(ms)))
             + CASE WHEN count(DISTINCT p.target) < least(n, count(*)) THEN 1 ELSE 0 END > 0
      INTO total, stale FROM )" +
         n.parts + R"( p;
    EXIT WHEN NOT stale OR n = 0;
    IF i = 1 THEN
      PERFORM pg_advisory_xact_lock(hashtext(')" +
         lock_name + R"('));
    ELSE
      PERFORM )" +
         n.q_schema + ".\"" + n.table + R"(_deal"(ms);
    END IF;
  END LOOP;
  SELECT count(*) INTO want FROM )" +
         n.parts + R"( WHERE target = m;
  -- Extended once past 40 % of the lease, not at every beat: each update leaves a dead row
  -- version that every claim's read of this table steps over until it is pruned.
  UPDATE )" +
         n.parts +
         R"( SET lease_until = now() + lease WHERE owner = m AND lease_until < now() + lease * 0.6;
  -- Targeted elsewhere: stop claiming there; each is released below once drained. Targeted
  -- back here before its release: claim there again.
  UPDATE )" +
         n.parts +
         R"( SET releasing = true WHERE owner = m AND NOT releasing AND target IS DISTINCT FROM m;
  UPDATE )" +
         n.parts + R"( SET releasing = false WHERE owner = m AND releasing AND target = m;
  -- A partition moves only once its owner released it or its lease expired; the new owner's
  -- fence is one higher, so the old owner's writes no longer match.
  UPDATE )" +
         n.parts +
         R"( p SET owner = m, fence = p.fence + 1, lease_until = now() + lease,
           releasing = false, moved_at = now()
   WHERE p.part IN (SELECT q.part FROM )" +
         n.parts + R"( q WHERE q.target = m AND (q.owner IS NULL OR q.lease_until <= now())
                      ORDER BY q.part FOR UPDATE SKIP LOCKED)
     AND (p.owner IS NULL OR p.lease_until <= now());
  -- Released: the handed-over partitions where this member has no claim in flight (busy).
  UPDATE )" +
         n.parts +
         R"( SET owner = NULL, lease_until = NULL, releasing = false, moved_at = now()
   WHERE owner = m AND releasing AND NOT (part = ANY(busy));
  RETURN QUERY SELECT (count(*) FILTER (WHERE p.owner = m AND NOT p.releasing))::integer, want, n,
    (count(*) FILTER (WHERE p.owner IS NULL OR p.lease_until <= now() OR p.releasing
                        OR p.owner IS DISTINCT FROM p.target))::integer
    FROM )" +
         n.parts +
         R"( p;
END $f$;
CREATE OR REPLACE FUNCTION )" +
         n.q_schema + ".\"" + n.table + R"(_deal"(ms text[]) RETURNS void
LANGUAGE plpgsql AS $f$
DECLARE
  n integer := array_length(ms, 1);
  ps integer[];      -- every partition, those with a backlog first, then by number
  kinds integer[];   -- 1: with a backlog, 2: without
  owners text[];     -- the owner under a live partition lease, or null
  backlog integer[];
  lock_wait text;
  total integer;
  nb integer;
  quota integer[] := array_fill(0, ARRAY[2 * n]);  -- [j]: with a backlog, [n + j]: without
  kept integer[] := array_fill(0, ARRAY[2 * n]);
  turn integer[] := ARRAY[1, 1];
  pool integer[] := '{}';
  parts integer[] := '{}';
  targets text[] := '{}';
  i integer;
  j integer;
  c integer;
BEGIN
  -- The backlog as the claims will meet it: the partitions of the oldest rows. A heartbeat
  -- does not wait behind a lock on the outbox (an ALTER TABLE): without this read the
  -- partitions are dealt by count alone.
  lock_wait := current_setting('lock_timeout');
  PERFORM set_config('lock_timeout', '200ms', true);
  BEGIN
    SELECT array_agg(DISTINCT s.part) INTO backlog FROM (SELECT o.part FROM )" +
         n.outbox + R"( o ORDER BY o.seq LIMIT 10000) s;
  EXCEPTION WHEN lock_not_available THEN
    backlog := '{}';
  END;
  PERFORM set_config('lock_timeout', lock_wait, true);
  backlog := coalesce(backlog, '{}');
  SELECT array_agg(p.part ORDER BY NOT (p.part = ANY(backlog)), p.part),
         array_agg(CASE WHEN p.part = ANY(backlog) THEN 1 ELSE 2 END
                   ORDER BY NOT (p.part = ANY(backlog)), p.part),
         array_agg(CASE WHEN p.lease_until > now() THEN p.owner END
                   ORDER BY NOT (p.part = ANY(backlog)), p.part),
         count(*), count(*) FILTER (WHERE p.part = ANY(backlog))
    INTO ps, kinds, owners, total, nb FROM )" +
         n.parts + R"( p;
  -- Slots 0 .. total - 1 dealt in turn to the members sorted by id, the partitions with a
  -- backlog taking the first nb slots: member j gets total / n (+ 1 for the first total % n)
  -- partitions, as evenly of each kind as the counts allow.
  FOR j IN 1..n LOOP
    quota[j] := nb / n + CASE WHEN j - 1 < nb % n THEN 1 ELSE 0 END;
    quota[n + j] := total / n + CASE WHEN j - 1 < total % n THEN 1 ELSE 0 END - quota[j];
  END LOOP;
  -- A partition stays with its live owner while the owner is under its quota of the kind.
  FOR i IN 1..total LOOP
    j := array_position(ms, owners[i]);
    c := (kinds[i] - 1) * n;
    IF j IS NOT NULL AND kept[c + j] < quota[c + j] THEN
      kept[c + j] := kept[c + j] + 1;
      parts := parts || ps[i];
      targets := targets || owners[i];
    ELSE
      pool := pool || i;
    END IF;
  END LOOP;
  -- The rest in turn to the members still under their quota of the kind.
  FOREACH i IN ARRAY pool LOOP
    c := (kinds[i] - 1) * n;
    j := turn[kinds[i]];
    WHILE kept[c + j] >= quota[c + j] LOOP
      j := j % n + 1;
    END LOOP;
    kept[c + j] := kept[c + j] + 1;
    turn[kinds[i]] := j % n + 1;
    parts := parts || ps[i];
    targets := targets || ms[j];
  END LOOP;
  UPDATE )" +
         n.parts +
         R"( p SET target = a.target FROM unnest(parts, targets) AS a(part, target)
   WHERE p.part = a.part AND p.target IS DISTINCT FROM a.target;
END $f$;
)";
}

}  // namespace outpost::pg
