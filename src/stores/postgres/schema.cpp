#include "stores/postgres/schema.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>

namespace outpost::pg {

namespace {

std::string quote(const std::string& id) {
  return "\"" + id + "\"";
}

// The columns of the event that a dead letter and an archived event both keep (version 1), in
// one place so the two tables cannot drift apart.
constexpr const char* kKeptColumns = R"(  type         text        NOT NULL,
  key          text        NOT NULL,
  payload      bytea       NOT NULL,
  occurred_at  timestamptz NOT NULL,
  headers      jsonb       NOT NULL,
  attempts     integer     NOT NULL,
)";

}  // namespace

Names::Names(std::string s, std::string t) : schema(std::move(s)), table(std::move(t)) {
  q_schema = quote(schema);
  outbox = q_schema + "." + quote(table);
  dead = q_schema + "." + quote(table + "_dead");
  archive = q_schema + "." + quote(table + "_archive");
  versions = q_schema + "." + quote("outpost_schema_version");
  maintain = q_schema + "." + quote(table + "_archive_maintain");
  parts = q_schema + "." + quote(table + "_partitions");
  members = q_schema + "." + quote(table + "_members");
  rebalance = q_schema + "." + quote(table + "_rebalance");
  // Channel names are identifiers (max 63 bytes): a readable prefix plus a hash of the full
  // qualified name, so two outboxes in different schemas never share a channel.
  std::uint32_t h = 2166136261u;
  for (char c : schema + "." + table) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", h);
  channel = "outpost_" + table.substr(0, 40) + "_" + hex;
}

std::string migration_v1(const Names& n) {
  const std::string& t = n.table;
  // The archive maintenance function takes the names as literals: they are validated
  // identifiers, so they cannot contain quotes.
  return R"(
CREATE TABLE IF NOT EXISTS )" +
         n.outbox + R"( (
  seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id           uuid        NOT NULL UNIQUE,
  type         text        NOT NULL,
  key          text        NOT NULL DEFAULT '',
  payload      bytea       NOT NULL,
  occurred_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
  headers      jsonb       NOT NULL DEFAULT '{}',
  attempts     integer     NOT NULL DEFAULT 0,
  state        smallint    NOT NULL DEFAULT 0,
  due_at       timestamptz NOT NULL DEFAULT now(),
  lease_owner  text,
  lease_until  timestamptz,
  last_error   text
) WITH (fillfactor = 60);
COMMENT ON COLUMN )" +
         n.outbox +
         R"(.state IS 'outpost: 0 ready, 1 leased (lease_owner, lease_until), 2 waiting to retry (due_at)';
CREATE INDEX IF NOT EXISTS ")" +
         t + R"(_key_seq" ON )" + n.outbox + R"( (key, seq);
CREATE INDEX IF NOT EXISTS ")" +
         t + R"(_due" ON )" + n.outbox + R"( (due_at);
CREATE TABLE IF NOT EXISTS )" +
         n.dead + R"( (
  seq          bigint      PRIMARY KEY,
  id           uuid        NOT NULL UNIQUE,
)" + kKeptColumns +
         R"(  last_error   text        NOT NULL,
  dead_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS )" +
         n.archive + R"( (
  seq          bigint      NOT NULL,
  id           uuid        NOT NULL,
)" + kKeptColumns +
         R"(  archived_at  timestamptz NOT NULL
) PARTITION BY RANGE (archived_at);
CREATE OR REPLACE FUNCTION )" +
         n.q_schema + ".\"" + t + R"(_notify"() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
  -- One tiny notification per statement; PostgreSQL folds repeats within a transaction.
  PERFORM pg_notify(')" +
         n.channel + R"(', '');
  RETURN NULL;
END $f$;
CREATE OR REPLACE TRIGGER ")" +
         t + R"(_notify" AFTER INSERT ON )" + n.outbox + R"(
  FOR EACH STATEMENT EXECUTE FUNCTION )" +
         n.q_schema + ".\"" + t + R"(_notify"();
CREATE OR REPLACE FUNCTION )" +
         n.maintain + R"((retention interval, width text)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
  unit text := CASE WHEN width = 'hour' THEN 'hour' ELSE 'day' END;
  step interval := CASE WHEN width = 'hour' THEN interval '1 hour' ELSE interval '1 day' END;
  fmt text := CASE WHEN width = 'hour' THEN 'YYYYMMDDHH24' ELSE 'YYYYMMDD' END;
  -- clock_timestamp(), not now(): now() is the start of the calling transaction.
  base timestamptz := date_trunc(unit, clock_timestamp() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  cutoff timestamptz := clock_timestamp() - retention;
  p record;
  sfx text;
  upper_bound timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext(')" +
         n.schema + "." + t + R"(_archive'));
  FOR i IN 0..1 LOOP
    BEGIN
      EXECUTE format('CREATE TABLE IF NOT EXISTS %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
        ')" +
         n.schema + R"(', ')" + t +
         R"(_archive_p' || to_char((base + i * step) AT TIME ZONE 'UTC', fmt),
        ')" +
         n.schema + R"(', ')" + t + R"(_archive', base + i * step, base + (i + 1) * step);
    EXCEPTION WHEN invalid_object_definition THEN
      NULL;  -- overlaps a partition of the other width (the width was changed): it covers us
    END;
  END LOOP;
  IF retention > interval '0' THEN
    FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = to_regclass(')" +
         n.archive + R"(') LOOP
      sfx := substring(p.relname FROM length(')" +
         t + R"(_archive_p') + 1);
      IF sfx ~ '^[0-9]{10}$' THEN
        upper_bound := (to_timestamp(sfx, 'YYYYMMDDHH24')::timestamp AT TIME ZONE 'UTC') + interval '1 hour';
      ELSIF sfx ~ '^[0-9]{8}$' THEN
        upper_bound := (to_timestamp(sfx, 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC') + interval '1 day';
      ELSE
        CONTINUE;
      END IF;
      IF upper_bound <= cutoff THEN
        EXECUTE format('DROP TABLE %I.%I', ')" +
         n.schema + R"(', p.relname);
      END IF;
    END LOOP;
    -- Rows older than the cutoff in the one partition that straddles it.
    EXECUTE format('DELETE FROM %I.%I WHERE archived_at < $1', ')" +
         n.schema + R"(', ')" + t +
         R"(_archive') USING cutoff;
  END IF;
END $f$;
)";
}

std::string migration_v2(const Names& n) {
  // A claim rewrites each row once (state, lease): with room for the new version on the same
  // page the update is HOT (no index entries). At fillfactor 60 a page of ~300-byte rows had
  // room for two thirds of its rows' new versions; the other third went into all four indexes
  // (and bottom-up index deletion was PostgreSQL's top CPU cost in the relay's claims). At 30
  // every claim update was HOT in the benchmark. Applies to pages written from now on.
  return "ALTER TABLE " + n.outbox + " SET (fillfactor = 30)";
}

std::string migration_v3(const Names& n) {
  // The crash counter (store.h): claims whose lease expired with no outcome recorded, kept
  // apart from delivery attempts, and kept by dead letters. A column with a constant default
  // is added without rewriting the table (PostgreSQL 11+ keeps the default in the catalog).
  return "ALTER TABLE " + n.outbox +
         " ADD COLUMN IF NOT EXISTS crashes integer NOT NULL DEFAULT 0; "
         "ALTER TABLE " +
         n.dead + " ADD COLUMN IF NOT EXISTS crashes integer NOT NULL DEFAULT 0";
}

std::string migration_v4(const Names& n, int partitions) {
  const std::string P = std::to_string(partitions);
  const std::string& t = n.table;
  // part: the key's partition (hashtext, immutable), computed by PostgreSQL on every insert
  // (plain SQL emits included) and for the existing rows by this very ALTER (a table rewrite);
  // events without a key spread by their id. fence: the partition's fence when the row was
  // claimed; every write-back must still find it (the refused stale owner, docs/postgres.md).
  return "ALTER TABLE " + n.outbox +
         " ADD COLUMN IF NOT EXISTS part smallint GENERATED ALWAYS AS (((CASE WHEN key = '' "
         "THEN hashtext(id::text) ELSE hashtext(key) END) & 2147483647) % " +
         P +
         ") STORED, ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;\n"
         // A relay of an older version claims and renews with a lease owner of its own form:
         // refused from now on (NOT VALID: rows leased before the upgrade are not checked, and
         // their old owners may still ack, nack or release them).
         "ALTER TABLE " +
         n.outbox + " DROP CONSTRAINT IF EXISTS \"" + t + "_claim_needs_v4\", ADD CONSTRAINT \"" +
         t + "_claim_needs_v4\" CHECK (state <> 1 OR " + "lease_owner LIKE '" + kOwnerPrefix +
         "%') NOT VALID;\n" + "CREATE TABLE IF NOT EXISTS " + n.parts + R"( (
  part         smallint    PRIMARY KEY,
  owner        text,
  fence        bigint      NOT NULL DEFAULT 0,
  lease_until  timestamptz,
  releasing    boolean     NOT NULL DEFAULT false,
  moved_at     timestamptz
);
INSERT INTO )" +
         n.parts + " (part) SELECT g FROM generate_series(0, " + P +
         R"( - 1) g ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS )" +
         n.members + R"( (
  member       text        PRIMARY KEY,
  joined_at    timestamptz NOT NULL DEFAULT now(),
  until        timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION )" +
         n.rebalance + R"((m text, lease_ms bigint, busy smallint[], leaving boolean)
RETURNS TABLE (owned integer, wanted integer, live integer, moving integer)
LANGUAGE plpgsql AS $f$
DECLARE
  lease interval := lease_ms * interval '1 millisecond';
  n integer;
  pos integer;
  total integer;
  want integer;
  have integer;
  k integer;
BEGIN
)" + heartbeat_membership(n) +
         R"(  SELECT count(*), count(*) FILTER (WHERE y.member < m) INTO n, pos FROM )" +
         n.members + R"( y WHERE y.until > now();
  SELECT count(*) INTO total FROM )" +
         n.parts + R"(;
  -- An even share: the first (total mod n) members by id take one more.
  want := total / n + CASE WHEN pos < total % n THEN 1 ELSE 0 END;
  -- Extended once past 40 % of the lease, not at every beat: each update leaves a dead row
  -- version that every claim's read of this table steps over until it is pruned.
  UPDATE )" +
         n.parts +
         R"( SET lease_until = now() + lease WHERE owner = m AND lease_until < now() + lease * 0.6;
  SELECT count(*) INTO have FROM )" +
         n.parts + R"( WHERE owner = m AND NOT releasing;
  IF have > want THEN
    -- Too many: stop claiming from the surplus; each is released below once drained.
    UPDATE )" +
         n.parts + R"( SET releasing = true WHERE part IN (SELECT p.part FROM )" + n.parts + R"( p
      WHERE p.owner = m AND NOT p.releasing ORDER BY p.part DESC LIMIT have - want);
  ELSIF have < want THEN
    UPDATE )" +
         n.parts + R"( SET releasing = false WHERE part IN (SELECT p.part FROM )" + n.parts + R"( p
      WHERE p.owner = m AND p.releasing ORDER BY p.part LIMIT want - have);
    GET DIAGNOSTICS k = ROW_COUNT;
    have := have + k;
    IF have < want THEN
      -- A partition moves only once its owner released it or its lease expired; the new
      -- owner's fence is one higher, so the old owner's writes no longer match.
      UPDATE )" +
         n.parts +
         R"( p SET owner = m, fence = p.fence + 1, lease_until = now() + lease,
             releasing = false, moved_at = now()
       WHERE p.part IN (SELECT q.part FROM )" +
         n.parts + R"( q WHERE q.owner IS NULL OR q.lease_until <= now()
                        ORDER BY q.part LIMIT want - have FOR UPDATE SKIP LOCKED)
         AND (p.owner IS NULL OR p.lease_until <= now());
    END IF;
  END IF;
  -- Released: the surplus partitions where this member has no claim in flight (busy).
  UPDATE )" +
         n.parts +
         R"( SET owner = NULL, lease_until = NULL, releasing = false, moved_at = now()
   WHERE owner = m AND releasing AND NOT (part = ANY(busy));
  RETURN QUERY SELECT (count(*) FILTER (WHERE p.owner = m AND NOT p.releasing))::integer, want, n,
    (count(*) FILTER (WHERE p.owner IS NULL OR p.lease_until <= now() OR p.releasing))::integer
    FROM )" +
         n.parts +
         R"( p;
END $f$;
)";
}

std::string migration_v5(const Names& n) {
  const std::string& t = n.table;
  // Scheduled delivery (docs/postgres.md, "Scheduled delivery"): a row inserted with deliver_at
  // in the future is held as a retry that was never attempted (state 2, due_at = deliver_at,
  // attempts 0). Every claim, this build's and an older one's still running, already waits for
  // such a row's due_at and, in ordered mode, holds its key's later rows behind it; the relay's
  // wait already sleeps until the next due_at. The trigger does it for every INSERT (plain SQL
  // emits included, docs/emit-contract.md); its WHEN is checked without calling the function,
  // so a row without deliver_at costs next to nothing. The columns are nullable, no rewrite.
  // The dead letters' key index serves the strict claim (a key with a dead letter is held,
  // docs/postgres.md "Strict key order"): one probe per keyed candidate.
  return "ALTER TABLE " + n.outbox + " ADD COLUMN IF NOT EXISTS deliver_at timestamptz;\n" +
         "ALTER TABLE " + n.dead + " ADD COLUMN IF NOT EXISTS deliver_at timestamptz;\n" +
         "CREATE INDEX IF NOT EXISTS \"" + t + "_dead_key\" ON " + n.dead + " (key);\n" +
         "CREATE OR REPLACE FUNCTION " + n.q_schema + ".\"" + t +
         R"(_schedule"() RETURNS trigger
LANGUAGE plpgsql AS $f$
BEGIN
  NEW.state := 2;
  NEW.due_at := NEW.deliver_at;
  RETURN NEW;
END $f$;
CREATE OR REPLACE TRIGGER ")" +
         t + R"(_schedule" BEFORE INSERT ON )" + n.outbox + R"(
  FOR EACH ROW WHEN (NEW.deliver_at > now()) EXECUTE FUNCTION )" +
         n.q_schema + ".\"" + t + R"(_schedule"();
)";
}

std::string heartbeat_membership(const Names& n) {
  return R"(  IF leaving THEN
    UPDATE )" +
         n.parts +
         R"( SET owner = NULL, lease_until = NULL, releasing = false, moved_at = now()
     WHERE owner = m;
    DELETE FROM )" +
         n.members +
         R"( WHERE member = m;
    RETURN QUERY SELECT 0, 0, 0, 0;
    RETURN;
  END IF;
  INSERT INTO )" +
         n.members +
         R"( (member, until) VALUES (m, now() + lease)
    ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until
    WHERE )" +
         n.members + R"(.until < now() + lease * 0.6;
  DELETE FROM )" +
         n.members + R"( WHERE member IN (SELECT y.member FROM )" + n.members +
         R"( y WHERE y.until <= now() FOR UPDATE SKIP LOCKED);
)";
}

std::string migration_v6(const Names& n) {
  // The archive keeps what a dead letter keeps (docs/postgres.md, "Archive and retention"): the
  // crash counter and a scheduled event's deliver_at, so `outpost events archive` and `events
  // show` of a delivered scheduled event still show them. Added to the partitioned parent, the
  // columns reach every partition; nullable or with a constant default, no partition is
  // rewritten. Rows archived before read crashes 0 and no deliver_at.
  return "ALTER TABLE " + n.archive +
         " ADD COLUMN IF NOT EXISTS crashes integer NOT NULL DEFAULT 0, ADD COLUMN IF NOT EXISTS "
         "deliver_at timestamptz";
}

std::string migration_v7(const Names& n) {
  const std::string c = "\"" + n.table + "_leased_needs_owner\"";
  // A row in state 1 is leased: only a claim writes it, with its lease owner and lease end. An
  // application's INSERT that gave state 1 by mistake (meaning the hold, state 2) passed the v4
  // check (a NULL owner makes it NULL, which a CHECK accepts) and held its key forever: no claim
  // takes a lease that never ends, and no count showed it (docs/emit-contract.md). Such rows
  // already there become what the writer meant, a hold until their due_at (due now by default).
  // The constraint is added first, NOT VALID, so that its lock keeps new ones out meanwhile,
  // then checked over the repaired table.
  return "ALTER TABLE " + n.outbox + " DROP CONSTRAINT IF EXISTS " + c + ", ADD CONSTRAINT " + c +
         " CHECK (state <> 1 OR (lease_owner IS NOT NULL AND lease_until IS NOT NULL)) NOT "
         "VALID;\nUPDATE " +
         n.outbox +
         " SET state = 2 WHERE state = 1 AND (lease_owner IS NULL OR lease_until IS NULL);\n"
         "ALTER TABLE " +
         n.outbox + " VALIDATE CONSTRAINT " + c + ";\n";
}

std::string schema_text(const Names& n, int partitions) {
  // Names are validated identifiers (no quotes), so they can be SQL literals here as in
  // migration_v1. Keep in step with migrate() below.
  return "BEGIN;\nSELECT pg_advisory_xact_lock(hashtext('" + n.schema + "." + n.table +
         "'));\nCREATE SCHEMA IF NOT EXISTS " + n.q_schema + ";\nCREATE TABLE IF NOT EXISTS " +
         n.versions +
         " (tbl text PRIMARY KEY, version integer NOT NULL, updated_at timestamptz NOT NULL "
         "DEFAULT now());\n" +
         migration_v1(n) + migration_v2(n) + ";\n" + migration_v3(n) + ";\n" +
         migration_v4(n, partitions) + migration_v5(n) + migration_v6(n) + ";\n" + migration_v7(n) +
         migration_v8(n) + "INSERT INTO " + n.versions + " (tbl, version) VALUES ('" + n.table +
         "', " + std::to_string(kSchemaVersion) +
         ") ON CONFLICT (tbl) DO UPDATE SET version = EXCLUDED.version, updated_at = now();\n"
         "COMMIT;\n";
}

int partition_count(const Endpoint& ep, PGconn* pg, const Names& n) {
  Params t;
  t.text(n.parts);
  auto has = exec_params(ep, pg, "SELECT to_regclass($1) IS NOT NULL", t, "open");
  if (PQntuples(has.get()) != 1 || PQgetvalue(has.get(), 0, 0)[0] == 0) return 0;
  Params none;
  auto r = exec_params(ep, pg, "SELECT count(*) FROM " + n.parts, none, "open");
  return static_cast<int>(get_i64(r.get(), 0, 0));
}

void migrate(const Endpoint& ep, PGconn* pg, const Names& n, int partitions) {
  exec_simple(ep, pg, "BEGIN", "migrate");
  try {
    Params lock;  // held until COMMIT: concurrent first opens queue here
    lock.text(n.schema + "." + n.table);
    exec_params(ep, pg, "SELECT pg_advisory_xact_lock(hashtext($1))", lock, "migrate");
    Params s;
    s.text(n.schema);
    auto has = exec_params(ep, pg, "SELECT 1 FROM pg_namespace WHERE nspname = $1", s, "migrate");
    if (PQntuples(has.get()) == 0)
      exec_simple(ep, pg, "CREATE SCHEMA " + n.q_schema, "create schema");
    exec_simple(ep, pg,
                "CREATE TABLE IF NOT EXISTS " + n.versions +
                    " (tbl text PRIMARY KEY, version integer NOT NULL, "
                    "updated_at timestamptz NOT NULL DEFAULT now())",
                "migrate");
    Params t;
    t.text(n.table);
    auto v =
        exec_params(ep, pg, "SELECT version FROM " + n.versions + " WHERE tbl = $1", t, "migrate");
    int version = PQntuples(v.get()) ? get_i32(v.get(), 0, 0) : 0;
    if (version > 0 && !outbox_exists(ep, pg, n)) version = 0;  // the table was dropped by hand
    if (version > kSchemaVersion)
      throw Error(ErrorCode::corrupt, "postgres",
                  "outbox " + n.outbox + " has schema version " + std::to_string(version) +
                      ", newer than this build understands (" + std::to_string(kSchemaVersion) +
                      ")");
    if (version < 1) exec_simple(ep, pg, migration_v1(n), "migrate to v1");
    if (version < 2) exec_simple(ep, pg, migration_v2(n), "migrate to v2");
    if (version < 3) exec_simple(ep, pg, migration_v3(n), "migrate to v3");
    if (version < 4) exec_simple(ep, pg, migration_v4(n, partitions), "migrate to v4");
    if (version < 5) exec_simple(ep, pg, migration_v5(n), "migrate to v5");
    if (version < 6) exec_simple(ep, pg, migration_v6(n), "migrate to v6");
    if (version < 7) exec_simple(ep, pg, migration_v7(n), "migrate to v7");
    if (version < 8) exec_simple(ep, pg, migration_v8(n), "migrate to v8");
    if (version < kSchemaVersion) {
      Params u;
      u.text(n.table);
      u.text(std::to_string(kSchemaVersion));
      exec_params(ep, pg,
                  "INSERT INTO " + n.versions +
                      " (tbl, version) VALUES ($1, $2::int) ON CONFLICT (tbl) DO UPDATE "
                      "SET version = EXCLUDED.version, updated_at = now()",
                  u, "migrate");
    }
    exec_simple(ep, pg, "COMMIT", "migrate");
  } catch (...) {
    // Under the store's I/O deadline like every other statement (a bare PQexec would block
    // forever on a server that hangs right after the error). If it fails too, the pool drops
    // the connection (not idle), which rolls the transaction back on the server.
    try {
      exec_simple(ep, pg, "ROLLBACK", "migrate");
    } catch (...) {
    }
    throw;
  }
}

bool outbox_exists(const Endpoint& ep, PGconn* pg, const Names& n) {
  Params t;
  t.text(n.outbox);
  auto r = exec_params(ep, pg, "SELECT to_regclass($1) IS NOT NULL", t, "open");
  return PQntuples(r.get()) == 1 && PQgetvalue(r.get(), 0, 0)[0] != 0;  // binary bool
}

bool has_column(const Endpoint& ep, PGconn* pg, const std::string& table, const char* column) {
  Params t;
  t.text(table);
  t.text(column);
  auto r = exec_params(ep, pg,
                       "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND "
                       "attname = $2 AND NOT attisdropped",
                       t, "open");
  return PQntuples(r.get()) == 1 && get_i64(r.get(), 0, 0) > 0;
}

ArchiveMaintenance::ArchiveMaintenance(Pool& pool, const Endpoint& ep, const Names& n,
                                       Duration retention, std::string width)
    : pool_(pool),
      ep_(ep),
      sql_("SELECT " + n.maintain + "($1::bigint * interval '1 millisecond', $2)"),
      retention_(retention),
      width_(std::move(width)) {}

void ArchiveMaintenance::run(bool force) {
  using SteadyClock = std::chrono::steady_clock;
  auto interval = std::chrono::duration_cast<SteadyClock::duration>(std::min<Duration>(
      retention_.count() > 0 ? retention_ / 2 : Duration(60'000), Duration(60'000)));
  auto t = SteadyClock::now();
  auto last = last_run_.load();
  if (!force && t - SteadyClock::time_point(SteadyClock::duration(last)) < interval) return;
  last_run_ = t.time_since_epoch().count();
  Params p;
  p.text(std::to_string(retention_.count()));
  p.text(width_);
  auto c = pool_.get();
  exec_prepared(ep_, *c, "maintain", sql_, p, "archive maintenance");
}

}  // namespace outpost::pg
