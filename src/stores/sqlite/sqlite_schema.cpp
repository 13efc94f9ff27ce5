#include "stores/sqlite/sqlite_schema.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

namespace outpost::sqlite_store {
namespace {

// Schema version 1; "{t}" is the validated table name. The state row (narrow: rewritten by every
// claim) and the body (written once, read by the claim) are split so that a claim dirties about
// one page per 100 events instead of the pages holding the payloads.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE {t}_schema (version INTEGER NOT NULL);
INSERT INTO {t}_schema (version) VALUES (1);
CREATE TABLE {t} (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  due_at INTEGER NOT NULL DEFAULT 0,
  lease_owner INTEGER,
  lease_until INTEGER NOT NULL DEFAULT 0,
  last_error TEXT);
CREATE INDEX {t}_blocking ON {t} (key, seq) WHERE attempts > 0;
CREATE TABLE {t}_body (
  seq INTEGER PRIMARY KEY,
  id BLOB NOT NULL,
  type TEXT NOT NULL,
  payload BLOB NOT NULL,
  occurred_at INTEGER NOT NULL,
  headers TEXT);
CREATE TABLE {t}_dead (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, last_error TEXT, dead_at INTEGER NOT NULL);
CREATE INDEX {t}_dead_id ON {t}_dead (id);
CREATE TABLE {t}_archive (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, acked_at INTEGER NOT NULL);
CREATE INDEX {t}_archive_acked ON {t}_archive (acked_at);
)sql";

// Version 1 -> 2, in the same transaction as the check.
constexpr const char* kSchemaV2Step = R"sql(
DROP INDEX IF EXISTS {t}_blocking;
UPDATE {t}_schema SET version = 2;
)sql";

// Version 2 -> 3: the crash counter (store.h), on the state rows and kept by dead letters, added
// to each table that lacks it (SQLite has no ADD COLUMN IF NOT EXISTS). A column with a constant
// default is added without rewriting the table: SQLite only changes the schema text, and old
// rows read the default.
constexpr const char* kAddCrashes = "ALTER TABLE {t} ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0";
constexpr const char* kSchemaV3Done = "UPDATE {t}_schema SET version = 3";

// Version 3 -> 4: scheduled delivery's deliver_at (Event::deliver_at, Unix us, NULL for none) on
// the body, kept by dead letters and the archive, so that it comes back out of every read (as on
// PostgreSQL). What holds the event stays due_at on its state row (ms); deliver_at only
// reports. Nullable, no default: added without rewriting a table, and an INSERT written for
// version 3 stays valid (docs/emit-contract.md). No trigger derives due_at from it, as
// PostgreSQL's does: a row trigger on the body costs about 0.3 us on every insert, scheduled or
// not (docs/sqlite.md, "Schema").
constexpr const char* kAddDeliverAt = "ALTER TABLE {t} ADD COLUMN deliver_at INTEGER";
constexpr const char* kSchemaV4Done = "UPDATE {t}_schema SET version = 4";

std::string with_table(std::string text, const std::string& table) {
  for (std::size_t p; (p = text.find("{t}")) != std::string::npos;) text.replace(p, 3, table);
  return text;
}

bool table_exists(Conn& c, std::string_view file, const std::string& name) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(
      c.db(), "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1", -1, &raw, nullptr);
  StmtPtr s(raw);
  if (rc != SQLITE_OK) throw_sqlite(c.db(), rc, "could not be read", file);
  bind_text(raw, 1, name);
  rc = sqlite3_step(raw);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) throw_sqlite(c.db(), rc, "could not be read", file);
  return rc == SQLITE_ROW;
}

std::vector<std::string> columns_of(Conn& c, std::string_view file, const std::string& table) {
  std::vector<std::string> cols;
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(c.db(), "SELECT name FROM pragma_table_info(?1)", -1, &raw, nullptr);
  StmtPtr s(raw);
  if (rc != SQLITE_OK) throw_sqlite(c.db(), rc, "could not be read", file);
  bind_text(raw, 1, table);
  while ((rc = sqlite3_step(raw)) == SQLITE_ROW) cols.push_back(column_text(raw, 0));
  if (rc != SQLITE_DONE) throw_sqlite(c.db(), rc, "could not be read", file);
  return cols;
}

}  // namespace

int migrate(Conn& c, std::string_view file, const std::string& t, StoreOptions::Open open) {
  auto require_columns = [&](const std::string& table,
                             std::initializer_list<const char*> required) {
    auto cols = columns_of(c, file, table);
    for (const char* r : required)
      if (std::find(cols.begin(), cols.end(), r) == cols.end())
        throw_not_outbox(file, t, "table '" + table + "' has no column '" + r + "'");
  };
  const std::string schema = t + "_schema";
  int version = 0;
  if (table_exists(c, file, schema)) {
    require_columns(schema, {"version"});
    Use s(c.prepare("SELECT max(version) FROM " + schema));
    if (step_row(c.db(), s, "reading the schema version")) version = sqlite3_column_int(s, 0);
    if (version > kSchemaVersion)
      throw_not_outbox(file, t,
                       "schema version " + std::to_string(version) +
                           " is newer than this outpost (" + std::to_string(kSchemaVersion) +
                           "); upgrade outpost");
    if (version < 1) throw_not_outbox(file, t, "table '" + schema + "' holds no schema version");
  } else if (table_exists(c, file, t)) {
    throw_not_outbox(
        file, t,
        "table '" + t + "' exists but was not created by outpost (no '" + schema + "' table)");
  } else if (open != StoreOptions::Open::create) {
    throw_no_outbox(file, t, "the file has no table '" + schema + "'");
  }
  if (version == 0) {
    // Version 1. Future versions add `if (version < N)` steps below, each in this transaction.
    c.exec(with_table(kSchemaV1, t).c_str());
    version = 1;
  }
  if (version < 2 && open != StoreOptions::Open::read_only) {  // v1 reads as it is
    // Version 2: the claim finds blocked keys while reading from the head, so the partial
    // index on attempted rows (a B-tree insert per claimed row and a delete per ack) goes.
    c.exec(with_table(kSchemaV2Step, t).c_str());
    version = 2;
  }
  if (version < 3 && open != StoreOptions::Open::read_only) {  // v2 reads with crashes 0
    for (const std::string& table : {t, t + "_dead"}) {
      auto cols = columns_of(c, file, table);
      if (std::find(cols.begin(), cols.end(), "crashes") == cols.end())
        c.exec(with_table(kAddCrashes, table).c_str());
    }
    c.exec(with_table(kSchemaV3Done, t).c_str());
    version = 3;
  }
  if (version < 4 && open != StoreOptions::Open::read_only) {  // v3 reads without deliver_at
    for (const std::string& table : {t + "_body", t + "_dead", t + "_archive"}) {
      auto cols = columns_of(c, file, table);
      if (std::find(cols.begin(), cols.end(), "deliver_at") == cols.end())
        c.exec(with_table(kAddDeliverAt, table).c_str());
    }
    c.exec(with_table(kSchemaV4Done, t).c_str());
    version = 4;
  }
  require_columns(t,
                  {"seq", "key", "attempts", "due_at", "lease_owner", "lease_until", "last_error"});
  require_columns(t + "_body", {"seq", "id", "type", "payload", "occurred_at", "headers"});
  require_columns(t + "_dead", {"seq", "id", "last_error", "dead_at"});
  require_columns(t + "_archive", {"seq", "id", "acked_at"});
  if (version >= 3) {
    require_columns(t, {"crashes"});
    require_columns(t + "_dead", {"crashes"});
  }
  if (version >= 4)
    for (const std::string& table : {t + "_body", t + "_dead", t + "_archive"})
      require_columns(table, {"deliver_at"});
  return version;
}

std::string schema_text(const std::string& t) {
  // The same texts in the same order as migrate() on a new file, so a file created from this
  // script is indistinguishable from one outpost created.
  std::string text = with_table(kSchemaV1, t) + with_table(kSchemaV2Step, t);
  for (const std::string& table : {t, t + "_dead"}) text += with_table(kAddCrashes, table) + ";\n";
  text += with_table(kSchemaV3Done, t) + ";\n";
  for (const std::string& table : {t + "_body", t + "_dead", t + "_archive"})
    text += with_table(kAddDeliverAt, table) + ";\n";
  return text + with_table(kSchemaV4Done, t) + ";\n";
}

}  // namespace outpost::sqlite_store
