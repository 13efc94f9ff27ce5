#pragma once
// The PostgreSQL store's read-only inspection (Store::blocked, Store::leased, Store::archived):
// the statements and the decoding of blocked and leased rows into EventState.

#include <libpq-fe.h>

#include <string>
#include <vector>

#include "outpost/store.h"
#include "stores/postgres/schema.h"

namespace outpost::pg {

struct InspectSql {
  // `crashes`: as for Sql (sql.h); `fence`: the outbox has the fence column (version 4);
  // `archive_kept`: the archive has crashes and deliver_at (version 6).
  explicit InspectSql(const Names& n, bool crashes = true, bool fence = true,
                      bool archive_kept = true);
  std::string blocked;  // $1 limit
  std::string leased;   // $1 limit
  // $1 limit; the columns of Sql::list (crashes 0 and deliver_at NULL from an archive older
  // than version 6), then archived_at.
  std::string archived;
};

std::vector<EventState> read_states(const PGresult* r);

}  // namespace outpost::pg
