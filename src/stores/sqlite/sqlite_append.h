#pragma once
// Writing events into the SQLite outbox: the multi-row inserts of state rows and bodies, and the
// duplicate-id check for the ids a caller brought.

#include <sqlite3.h>

#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"
#include "stores/sqlite/sqlite_conn.h"
#include "stores/sqlite/sqlite_sql.h"

namespace outpost::sqlite_store {

// Inserts `events` (ids and times already filled) inside the transaction open on `db`: the
// store's writer (`cache` = its statement cache) or, with cache == nullptr, the user's own
// connection (statements prepared per call: we cannot know when the user closes it). Checks
// the ids first (check_ids); throws before writing anything on a conflict. `file` names the
// store's database in messages.
void insert_events(sqlite3* db, Conn* cache, const SqlText& sql, std::string_view file,
                   const std::vector<Event>& events);

// insert_events on the user's own connection `db`, inside the transaction the user opened
// (TxHandle::sqlite): checks that `db` is inside BEGIN and on the store's file (`store_path`,
// canonical; a `memory` store takes no TxHandle), and makes the append all or nothing within
// that transaction (a savepoint).
void insert_events_in_user_tx(sqlite3* db, bool memory, const std::string& store_path,
                              const SqlText& sql, std::string_view file,
                              const std::vector<Event>& events);

}  // namespace outpost::sqlite_store
