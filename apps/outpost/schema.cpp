// outpost schema: prints the emit contract of a store URL (docs/emit-contract.md), so that an
// application in any language can write events in its own transaction:
//   outpost schema --store sqlite:PATH[?table=T]      the SQLite DDL and the two INSERTs
//   outpost schema --store postgresql://...           the PostgreSQL DDL and the INSERT
//   outpost schema --store redis://...                the append script and how to call it
// The URL is checked as every command checks it (exit 2 naming the part); nothing is opened:
// the text comes from the same functions the stores create their outboxes and append with.

#include <algorithm>
#include <cctype>
#include <iostream>
#include <memory>
#include <string>

#include "cli.h"
#include "outpost/error.h"
#include "outpost/factory.h"

#ifdef OUTPOST_SCHEMA_SQLITE
#include "stores/sqlite/sqlite_schema.h"
#include "stores/sqlite/sqlite_url.h"
#endif
#ifdef OUTPOST_SCHEMA_POSTGRES
#include "stores/postgres/config.h"
#include "stores/postgres/schema.h"
#endif
#ifdef OUTPOST_SCHEMA_REDIS
#include "stores/redis/redis_url.h"
#endif

namespace outpost::cli {
namespace {

// Each text starts with the contract's name and version, which is the store's schema version
// (layout on Redis): docs/emit-contract.md, "Versions".

#ifdef OUTPOST_SCHEMA_SQLITE
std::string sqlite_text(std::string_view url) {
  const std::string t = sqlite_store::parse_url(url, {}).table;
  return "-- outpost emit contract: SQLite outbox '" + t + "', schema version " +
         std::to_string(sqlite_store::kSchemaVersion) +
         " (docs/emit-contract.md).\n"
         "-- outpost creates these tables on first use; this is the same DDL, for migration "
         "tools.\n"
         "-- Check the version before emitting: SELECT max(version) FROM " +
         t + "_schema;\nBEGIN IMMEDIATE;" + sqlite_store::schema_text(t) +
         "COMMIT;\n\n"
         "-- Emit one event inside your own BEGIN IMMEDIATE ... COMMIT, both rows, in this order:\n"
         "--   INSERT INTO " +
         t +
         " (key) VALUES (:key);                     -- key: '' for none\n"
         "--   INSERT INTO " +
         t +
         "_body (seq, id, type, payload, occurred_at, headers)\n"
         "--     VALUES (last_insert_rowid(), :id, :type, :payload, :occurred_at, :headers);\n"
         "-- id: the UUID's 16 bytes (BLOB); payload: BLOB; occurred_at: Unix time in "
         "microseconds;\n"
         "-- headers: NULL or a JSON object of strings. The relay notices the commit by itself.\n"
         "-- Scheduled delivery: give the state row due_at (Unix milliseconds: it holds the event\n"
         "-- until then) and the body deliver_at (the same time in Unix microseconds: the event\n"
         "-- reports it), e.g. INSERT INTO " +
         t + " (key, due_at) VALUES (:key, :deliver_at_ms).\n";
}
#endif

#ifdef OUTPOST_SCHEMA_POSTGRES
std::string postgres_text(std::string_view url) {
  StoreOptions options;
  pg::Config c = pg::parse_config(url, options);
  pg::Names n(c.schema, c.table);
  return "-- outpost emit contract: PostgreSQL outbox " + n.outbox + ", schema version " +
         std::to_string(pg::kSchemaVersion) + ", " + std::to_string(c.partitions) +
         " partitions (docs/emit-contract.md).\n"
         "-- outpost creates the outbox on first use; this is the same DDL, for migration tools.\n"
         "-- Check the version before emitting: SELECT version FROM " +
         n.versions + " WHERE tbl = '" + n.table + "';\n" + pg::schema_text(n, c.partitions) +
         "\n-- Emit one event inside your own BEGIN ... COMMIT:\n"
         "--   INSERT INTO " +
         n.outbox +
         " (id, type, key, payload, occurred_at, headers)\n"
         "--     VALUES ($1::uuid, $2, $3, $4::bytea, $5::timestamptz, $6::jsonb);\n"
         "-- key defaults to '' (none), occurred_at to clock_timestamp(), headers to '{}' (a JSON\n"
         "-- object of strings). Every other column keeps its default; part is computed. The\n"
         "-- trigger " +
         n.q_schema + ".\"" + n.table + "_notify\" wakes the relay (NOTIFY " + n.channel +
         ") at COMMIT.\n"
         "-- Scheduled delivery: add deliver_at (timestamptz) to the INSERT; a future time holds\n"
         "-- the event until then (the trigger " +
         n.q_schema + ".\"" + n.table + "_schedule\").\n";
}
#endif

#ifdef OUTPOST_SCHEMA_REDIS
std::string redis_text(std::string_view url) {
  const auto c = redis_store::parse_store_url(url);
  // A partitioned outbox (docs/redis.md, Partitions) is N key spaces {prefix:pK}, each taking
  // the script on its own; the unpartitioned one refuses it (OUTPOST_PARTITIONS).
  const bool parts = c.partitions > 1;
  const std::string b = "{" + c.prefix + (parts ? ":pK" : "") + "}:";
  std::string partitions_text;
  if (parts)
    partitions_text = "-- The outbox has " + std::to_string(c.partitions) +
                      " partitions: send an event to partition K = FNV-1a-32(key bytes) mod " +
                      std::to_string(c.partitions) +
                      "\n--   (offset basis 2166136261, prime 16777619; any K for an event "
                      "without a key), with\n--   K in decimal in the names below; one call "
                      "per partition (docs/redis.md, Partitions).\n";
  return "-- outpost emit contract: the Redis append script, layout 3, for the prefix {" +
         c.prefix + "}: (docs/emit-contract.md).\n" + partitions_text +
         "-- Call it inside your own MULTI ... EXEC, after your own writes:\n"
         "--   EVAL <this script> 1 " +
         b + "pending " + b +
         " N id1 key1 body1 ... idN keyN bodyN\n"
         "-- id: canonical lowercase UUID text; key: '' for none; body: the fields\n"
         "--   <len>:<key> <len>:<type> <len>:<occurred_at, Unix microseconds> <len>:<headers>\n"
         "--   without spaces, then the payload's bytes; headers: <len>:<name><len>:<value> per\n"
         "--   header; every <len> is the byte length in decimal. The reply is N, or an error\n"
         "--   (OUTPOST_DUPLICATE, OUTPOST_LAYOUT) that writes nothing.\n"
         "-- On Redis Cluster every key of the MULTI needs the hash tag " +
         b.substr(0, b.size() - 1) + ". The script PUBLISHes " + b + "wake to wake the relay.\n" +
         redis_store::append_script();
}
#endif

}  // namespace

Runner add_schema_command(CLI::App& root) {
  auto store = std::make_shared<std::string>();
  auto* sub = root.add_subcommand(
      "schema",
      "Print a store's emit contract (docs/emit-contract.md): the outbox DDL and INSERTs for "
      "SQLite and PostgreSQL, the append script and its call for Redis; opens nothing");
  sub->add_option("--store", *store, "Store URL (sqlite:PATH, postgresql://..., redis://...)")
      ->required()
      ->envname("OUTPOST_STORE");
  sub->footer(
      "Writing the rows or calling the script as printed, in your own transaction, emits events "
      "that `outpost relay` delivers as it delivers `outpost emit`'s.");
  return [store]() -> int {
    check_store_url(*store);  // exit 2 naming what is wrong, as every command
    std::string scheme = store->substr(0, store->find(':'));
    std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string text;
#ifdef OUTPOST_SCHEMA_SQLITE
    if (scheme == "sqlite") text = sqlite_text(*store);
#endif
#ifdef OUTPOST_SCHEMA_POSTGRES
    if (scheme == "postgresql" || scheme == "postgres") text = postgres_text(*store);
#endif
#ifdef OUTPOST_SCHEMA_REDIS
    if (scheme == "redis" || scheme == "redis-sentinel") text = redis_text(*store);
#endif
    if (scheme == "memory")
      throw ConfigError(
          "--store: the memory store lives inside one process, so nothing else can emit into it "
          "and it has no schema; use sqlite:, postgresql:// or redis://",
          "schema");
    if (text.empty())
      throw ConfigError("--store: the " + scheme +
                            ": store has no emit contract (sqlite:, postgresql:// and redis:// "
                            "have one)",
                        "schema");
    std::cout << text;
    return kExitOk;  // a failed write is main()'s to judge (finish_stdout)
  };
}

}  // namespace outpost::cli
