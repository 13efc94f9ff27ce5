#pragma once
// The PostgreSQL store (`postgresql://user[:password]@host:port/db?table=outbox&schema=public`).
//
// The outbox is a table in the user's own database, created with its dead-letter and archive
// tables on first use (docs/postgres.md shows the DDL). Events join the caller's transaction
// with TxHandle::postgres(conn) where `conn` is a PGconn* inside BEGIN on the same database;
// the commit both makes the events visible and wakes idle relays (LISTEN/NOTIFY, one
// notification per transaction). Several relay processes may share one table: ordered claims
// lock the head of each key with FOR UPDATE SKIP LOCKED, so one key is never in flight twice.
//
// URL parameters (unknown ones are rejected):
//   table=outbox            outbox table name ([A-Za-z_][A-Za-z0-9_]*, at most 40 characters)
//   schema=public           schema holding the tables (created if missing)
//   archive=false           on ack, move events to <table>_archive instead of deleting them
//   archive_retention=0     archived events older than this are dropped (e.g. 7d, 12h, 30m, 0=keep)
//   archive_partition=day   archive partition width: day or hour
//   pool=8                  most idle connections kept per store object (1..64)
//   connect_timeout, sslmode, sslrootcert, sslcert, sslkey, application_name,
//   target_session_attrs    passed to libpq unchanged
//
// Thread safety: every method may be called from several threads at once (a connection pool
// serves concurrent calls; wait_for_work uses one dedicated LISTEN connection).

#include <memory>
#include <string_view>

#include "outpost/store.h"

namespace outpost {

std::unique_ptr<Store> open_postgres_store(std::string_view url, const StoreOptions& options = {});

}  // namespace outpost
