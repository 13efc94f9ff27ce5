#include "consume/schema.h"

#include <iterator>
#include <mutex>
#include <set>
#include <utility>

#include "outpost/error.h"

namespace outpost::consume {
namespace {

// (connection, table) pairs known to exist. A pointer can be reused by a later connection to
// another database: the checkpoint store's connections forget theirs when they close
// (forget_tables_of); a user's own connection passed to the Inbox cannot tell us, so a new one
// at an old address whose database lacks the table fails its first statement with "no such
// table" (the caller's transaction rolls back).
std::mutex known_mu;
std::set<std::pair<void*, std::string>> known;  // guarded by known_mu

bool exists(const SqlTx& tx, const std::string& table) {
  auto rows =
      tx.dialect() == Dialect::sqlite
          ? tx.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1", {table})
          : tx.query("SELECT 1 WHERE to_regclass($1) IS NOT NULL", {table});
  return !rows.empty();
}

// Runs `ddl` (CREATE ... IF NOT EXISTS). On PostgreSQL inside a savepoint: two transactions
// creating the same table at once make the second fail with a unique violation once the first
// commits; it rolls back to the savepoint and finds the table there.
void create(const SqlTx& tx, const std::string& table, const std::string& ddl) {
  {
    std::lock_guard lock(known_mu);
    if (known.count({tx.handle().native(), table})) return;
  }
  if (exists(tx, table)) {
    std::lock_guard lock(known_mu);
    known.insert({tx.handle().native(), table});
    return;
  }
  if (tx.dialect() == Dialect::sqlite) {
    tx.script(ddl);
    return;  // not remembered: the caller's transaction may still roll the table back
  }
  try {
    tx.script("SAVEPOINT outpost_ddl; " + ddl + "; RELEASE SAVEPOINT outpost_ddl");
  } catch (const Error&) {
    tx.script("ROLLBACK TO SAVEPOINT outpost_ddl; RELEASE SAVEPOINT outpost_ddl");
    if (!exists(tx, table)) throw;
  }
}

}  // namespace

void forget_tables_of(void* native) noexcept {
  std::lock_guard lock(known_mu);
  for (auto it = known.begin(); it != known.end();)
    it = it->first == native ? known.erase(it) : std::next(it);
}

void ensure_inbox_table(const SqlTx& tx, const std::string& t) {
  std::string without_rowid = tx.dialect() == Dialect::sqlite ? " WITHOUT ROWID" : "";
  create(tx, t,
         "CREATE TABLE IF NOT EXISTS " + t +
             " (consumer TEXT NOT NULL, event_id TEXT NOT NULL, recorded_at BIGINT NOT NULL, "
             "PRIMARY KEY (consumer, event_id))" +
             without_rowid + "; CREATE INDEX IF NOT EXISTS " + t + "_age ON " + t +
             " (consumer, recorded_at)");
}

void ensure_checkpoint_generation(const SqlTx& tx, const std::string& p) {
  const std::string table = p + "_checkpoints";
  const std::string key = table + ".gen";
  {
    std::lock_guard lock(known_mu);
    if (known.count({tx.handle().native(), key})) return;
  }
  bool has = !(tx.dialect() == Dialect::sqlite
                   ? tx.query("SELECT 1 FROM pragma_table_info($1) WHERE name = 'gen'", {table})
                   : tx.query("SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass($1) AND "
                              "attname = 'gen' AND NOT attisdropped",
                              {table}))
                  .empty();
  if (!has) {
    tx.script("ALTER TABLE " + table + " ADD COLUMN " +
              (tx.dialect() == Dialect::postgres ? "IF NOT EXISTS " : "") +
              "gen BIGINT NOT NULL DEFAULT 0");
    if (tx.dialect() == Dialect::sqlite) return;  // the transaction may still roll it back
  }
  std::lock_guard lock(known_mu);
  known.insert({tx.handle().native(), key});
}

void ensure_consumer_tables(const SqlTx& tx, const std::string& p) {
  create(tx, p + "_checkpoints",
         "CREATE TABLE IF NOT EXISTS " + p +
             "_checkpoints (grp TEXT PRIMARY KEY, source TEXT NOT NULL, position TEXT NOT NULL, "
             "updated_at BIGINT NOT NULL)");
  // state: 'dead' (parked) or 'retry' (an operator asked for another attempt).
  create(tx, p + "_dead",
         "CREATE TABLE IF NOT EXISTS " + p + "_dead (id " + tx.serial_key() +
             ", grp TEXT NOT NULL, event_id TEXT NOT NULL, msg_key TEXT NOT NULL, "
             "position TEXT NOT NULL, attempts INTEGER NOT NULL, error TEXT NOT NULL, "
             "payload TEXT NOT NULL, state TEXT NOT NULL, dead_at BIGINT NOT NULL); "
             "CREATE INDEX IF NOT EXISTS " +
             p + "_dead_grp ON " + p + "_dead (grp, state, msg_key)");
  ensure_checkpoint_generation(tx, p);
}

}  // namespace outpost::consume
