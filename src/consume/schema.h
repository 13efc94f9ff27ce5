#pragma once
// DDL of the consuming side, created on first use inside the caller's transaction:
//   <name>_inbox        (consumer, event_id, recorded_at)           inbox.h
//   <name>_checkpoints  (grp, source, position, updated_at, gen)    one row per consumer group;
//                        gen counts an operator's moves (seek), so a running consumer notices
//   <name>_dead         (id, grp, event_id, msg_key, position, attempts, error, payload, state,
//                        dead_at)                                    consumer dead letters
// A table seen to exist is remembered per connection, so steady state costs no extra statement.

#include <string>

#include "consume/sql.h"

namespace outpost::consume {

void ensure_inbox_table(const SqlTx& tx, const std::string& table);
// Creates <prefix>_checkpoints and <prefix>_dead.
void ensure_consumer_tables(const SqlTx& tx, const std::string& prefix);
// Adds the column `gen` to a <prefix>_checkpoints of an earlier version (which had none).
void ensure_checkpoint_generation(const SqlTx& tx, const std::string& prefix);
// The connection `native` (sqlite3*, PGconn*) is closing: forget the tables seen on it, since
// a later connection may get the same address (the checkpoint store's connections call this).
void forget_tables_of(void* native) noexcept;

}  // namespace outpost::consume
