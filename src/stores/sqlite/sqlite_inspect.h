#pragma once
// The SQLite store's read-only inspection (Store::stats, Store::blocked, Store::leased): the
// statements and the decoding of their rows into EventState.

#include <cstddef>
#include <string>
#include <vector>

#include "outpost/store.h"
#include "stores/sqlite/sqlite_conn.h"

namespace outpost::sqlite_store {

struct InspectSql {
  // `crashes`: as for SqlText (sqlite_sql.h).
  explicit InspectSql(const std::string& table, bool crashes = true);
  std::string blocked;  // ?1 limit
  std::string leased;   // ?1 limit
};

// Store::stats: the counts and the oldest pending age, by SqlText's statements.
struct SqlText;
StoreStats read_stats(Conn& c, const SqlText& sql);

// Runs one of InspectSql's statements on `c`.
std::vector<EventState> read_states(Conn& c, const std::string& sql, std::size_t limit);

}  // namespace outpost::sqlite_store
