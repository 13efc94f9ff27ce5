#pragma once
// The SQLite store's schema: the tables of one outbox, their version, and the migration of an
// older version (as the PostgreSQL store's schema.cpp). See docs/sqlite.md for the layout.

#include <string>
#include <string_view>

#include "outpost/store.h"
#include "stores/sqlite/sqlite_conn.h"

namespace outpost::sqlite_store {

inline constexpr int kSchemaVersion = 4;

// Brings the outbox `table` in `c`'s database to kSchemaVersion, inside the caller's
// transaction: creates it when missing (Open::create), else ErrorCode::not_found; migrates an
// older version (not with Open::read_only: an older version reads as it is, without crashes
// before version 3 and deliver_at before 4); refuses, as corrupt, a newer version or tables of that
// name that outpost did not make. `file` names the database in messages. Returns the outbox's
// version now.
int migrate(Conn& c, std::string_view file, const std::string& table, StoreOptions::Open open);

// The statements migrate() runs to create a new outbox `table` (a validated name), in order, as
// one SQL script: what `outpost schema` prints (docs/emit-contract.md).
std::string schema_text(const std::string& table);

}  // namespace outpost::sqlite_store
