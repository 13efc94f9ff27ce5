#pragma once
// The outbox schema (docs/postgres.md shows the same DDL for DBAs), its migrations and the
// archive maintenance. Names are validated identifiers (core::require_identifier) and always
// double-quoted. The statements the relay runs are in sql.h.

#include <atomic>
#include <string>

#include "outpost/event.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::pg {

struct Names {
  std::string schema, table;
  std::string q_schema;  // "schema"
  std::string outbox;    // "schema"."table"
  std::string dead;      // "schema"."table_dead"
  std::string archive;   // "schema"."table_archive"
  std::string versions;  // "schema"."outpost_schema_version"
  std::string channel;   // LISTEN/NOTIFY channel, at most 63 characters
  std::string maintain;  // "schema"."table_archive_maintain"
  // Partitions (schema version 4, docs/postgres.md "Partitions and owners"):
  std::string parts;      // "schema"."table_partitions": one row per partition, its owner and fence
  std::string members;    // "schema"."table_members": the live store objects that claim
  std::string rebalance;  // "schema"."table_rebalance": one member's heartbeat (join, share, leave)

  Names(std::string schema, std::string table);
};

inline constexpr int kSchemaVersion = 8;

// Lease owners written by version 4 claims start with this; the outbox refuses a claim or renew
// by any other (an older relay still running after the upgrade, docs/postgres.md "Upgrading").
inline constexpr const char* kOwnerPrefix = "pg4-";

// Migrations in order; migration_vN brings version N - 1 to N. Run under an advisory lock.
std::string migration_v1(const Names& n);
std::string migration_v2(const Names& n);
std::string migration_v3(const Names& n);
// Partitions: `partitions` is the count a new (or upgraded) outbox gets; fixed from then on.
std::string migration_v4(const Names& n, int partitions);
// Scheduled delivery: the deliver_at column and the insert trigger that holds such a row.
std::string migration_v5(const Names& n);
// The archive keeps crashes and deliver_at, as a dead letter does.
std::string migration_v6(const Names& n);
// A leased row (state 1) must have its lease owner and lease end: an application's INSERT with
// state 1 is refused; such rows already there are held until their due_at (state 2) instead.
std::string migration_v7(const Names& n);
// Partition targets: the heartbeat hands partitions over to the member they are dealt to when
// the live members change, spreading those with a backlog evenly (rebalance.cpp).
std::string migration_v8(const Names& n);

// The start of every version's partition heartbeat (<table>_rebalance): a leaving member gives
// its partitions up and goes; any other renews its membership and expired members are removed.
std::string heartbeat_membership(const Names& n);

// Brings the outbox to kSchemaVersion on `conn` (creating it on first use), in one transaction
// under an advisory lock: concurrent first opens (several relays starting at once) queue there
// instead of racing on CREATE ... IF NOT EXISTS. Throws Error(corrupt) for a newer version.
// A version row whose outbox table is gone (dropped by hand) counts as no outbox: created again.
void migrate(const Endpoint& ep, PGconn* conn, const Names& n, int partitions);

// The statements migrate() runs to create a new outbox with `partitions` partitions, as one
// SQL script in one transaction under the same advisory lock: what `outpost schema` prints
// (docs/emit-contract.md). Applied to a database without that outbox, outpost opens it as its own.
std::string schema_text(const Names& n, int partitions);

// The outbox's partition count (0: an outbox older than version 4).
int partition_count(const Endpoint& ep, PGconn* conn, const Names& n);

// Whether the outbox table exists (Open::existing / read_only must not create it).
bool outbox_exists(const Endpoint& ep, PGconn* conn, const Names& n);

// Whether `table` (a quoted name from Names) has `column` (the outbox's crashes: version 3,
// deliver_at: version 5; the archive's: version 6): an outbox of an older version opened
// read-only is not migrated, and its reads return crashes 0 and no deliver_at.
bool has_column(const Endpoint& ep, PGconn* conn, const std::string& table, const char* column);

// Runs <table>_archive_maintain: creates this period's and the next period's archive partitions
// and drops expired ones. Thread-safe.
class ArchiveMaintenance {
 public:
  ArchiveMaintenance(Pool& pool, const Endpoint& ep, const Names& n, Duration retention,
                     std::string width);
  // Forced at open and when an ack found no partition; otherwise runs at most every
  // retention / 2 (capped at a minute).
  void run(bool force);

 private:
  Pool& pool_;
  const Endpoint& ep_;
  const std::string sql_;
  const Duration retention_;
  const std::string width_;
  std::atomic<std::chrono::steady_clock::rep> last_run_{0};
};

}  // namespace outpost::pg
