#include "stores/sqlite/sqlite_append.h"

#include <algorithm>
#include <unordered_set>

#include "core/headers_json.h"
#include "core/id_origin.h"
#include "outpost/error.h"
#include "stores/sqlite/sqlite_lock.h"

namespace outpost::sqlite_store {
namespace {

// The duplicate-id rule of every store (the id of an undelivered event, pending, leased or
// dead, or one id twice in a call, is a conflict that writes nothing), checked for the ids
// the caller brought. Ids this process generated are unique by construction and skip the
// check: <t>_body has no id index (it cost 20% of throughput, docs/sqlite.md), so a brought
// id costs one scan of the undelivered bodies per call, plus a probe of the dead letters'
// id index. Runs inside the append's transaction (or savepoint), before any insert.
template <class Prepare>
void check_ids(sqlite3* db, const SqlText& sql, const std::vector<Event>& events,
               Prepare&& prepare) {
  std::string brought;  // JSON list of upper-case hex ids, as hex() prints them
  bool increasing = true;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (i > 0 && !(events[i - 1].id < events[i].id)) increasing = false;
    if (core::generated_in_this_process(events[i].id)) continue;
    static constexpr char kHex[] = "0123456789ABCDEF";
    brought += brought.empty() ? "[\"" : ",\"";
    for (std::uint8_t b : events[i].id.bytes()) {
      brought += kHex[b >> 4];
      brought += kHex[b & 15];
    }
    brought += '"';
  }
  auto conflict = [&](const EventId& id, const char* what) {
    throw Error(ErrorCode::conflict, "sqlite",
                "duplicate event id " + id.str() + ": " + what + "; nothing was written");
  };
  if (!increasing) {  // one id twice in the call (ids of one generator come in order)
    std::unordered_set<EventId, EventIdHash> seen;
    for (const auto& e : events)
      if (!seen.insert(e.id).second) conflict(e.id, "it comes twice in one call");
  }
  if (brought.empty()) return;
  brought += ']';
  {
    Use s(prepare(sql.find_bodies));
    bind_text(s, 1, brought);
    if (step_row(db, s, "checking event ids") && sqlite3_column_bytes(s, 0) == 16)
      conflict(EventId::from_bytes(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 0))),
               "an undelivered event has it");
  }
  Use d(prepare(sql.find_dead));
  for (const auto& e : events) {
    if (core::generated_in_this_process(e.id)) continue;
    bind_blob(d, 1, e.id.bytes().data(), 16);
    if (step_row(db, d, "checking event ids"))
      conflict(e.id, "a dead event has it (retry or discard it first)");
    sqlite3_reset(d);
  }
}

}  // namespace

void insert_events(sqlite3* db, Conn* cache, const SqlText& sql, std::string_view file,
                   const std::vector<Event>& events) {
  std::vector<std::string> headers(events.size());
  for (std::size_t i = 0; i < events.size(); ++i)
    if (!events[i].headers.empty()) headers[i] = core::headers_to_json(events[i].headers);
  std::vector<StmtPtr> owned;
  auto prepare = [&](const std::string& text) -> sqlite3_stmt* {
    if (cache) return cache->prepare(text);
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v2(db, text.c_str(), static_cast<int>(text.size()), &s, nullptr);
    owned.emplace_back(s);
    if (rc != SQLITE_OK) {
      if (std::string(sqlite3_errmsg(db)).find("no such table") != std::string::npos)
        throw ConfigError("the connection in TxHandle::sqlite has no table '" + sql.table +
                              "': is it open on the store's file '" + std::string(file) + "'?",
                          "sqlite");
      throw_sqlite(db, rc, "preparing the insert");
    }
    return s;
  };
  auto step = [&](sqlite3_stmt* s) {
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) return;
    if ((rc & 0xff) == SQLITE_BUSY)
      throw TimeoutError("sqlite",
                         "the outbox insert could not get the write lock: begin the "
                         "transaction with BEGIN IMMEDIATE (" +
                             std::string(sqlite3_errmsg(db)) + ")");
    throw_sqlite(db, rc, "inserting events");
  };
  check_ids(db, sql, events, prepare);
  for (std::size_t off = 0; off < events.size(); off += kMaxRowsPerInsert) {
    std::size_t rows = std::min(kMaxRowsPerInsert, events.size() - off);
    // Full chunks (the usual case) use SQL text built once: no string building per append.
    const bool full = rows == kMaxRowsPerInsert;
    std::string short_state_sql, short_body_sql;
    const std::string& state_sql =
        full ? sql.insert_state_full : (short_state_sql = sql.insert_state(rows));
    const std::string& body_sql =
        full ? sql.insert_body_full : (short_body_sql = sql.insert_body(rows));
    {
      Use st(prepare(state_sql));
      for (std::size_t i = 0; i < rows; ++i) {
        const Event& e = events[off + i];
        bind_text(st, static_cast<int>(2 * i + 1), e.key);
        // Scheduled delivery: due at deliver_at (Unix ms, the store's clock); else 0, at once.
        std::int64_t due_ms =
            e.deliver_at ? e.deliver_at->time_since_epoch().count() / 1000 : std::int64_t{0};
        sqlite3_bind_int64(st, static_cast<int>(2 * i + 2), due_ms);
      }
      step(st);
    }
    // One INSERT under the write lock numbers its rows consecutively (AUTOINCREMENT takes
    // max + 1 per row), so the last rowid gives every row's seq.
    std::int64_t first_seq = sqlite3_last_insert_rowid(db) - static_cast<std::int64_t>(rows) + 1;
    Use sb(prepare(body_sql));
    int p = 1;
    for (std::size_t i = off; i < off + rows; ++i) {
      const Event& e = events[i];
      sqlite3_bind_int64(sb, p++, first_seq + static_cast<std::int64_t>(i - off));
      bind_blob(sb, p++, e.id.bytes().data(), 16);
      bind_text(sb, p++, e.type);
      bind_blob(sb, p++, e.payload.data(), e.payload.size());
      sqlite3_bind_int64(sb, p++, e.occurred_at.time_since_epoch().count());
      if (headers[i].empty())
        sqlite3_bind_null(sb, p++);
      else
        bind_text(sb, p++, headers[i]);
      if (e.deliver_at)
        sqlite3_bind_int64(sb, p++, e.deliver_at->time_since_epoch().count());
      else
        sqlite3_bind_null(sb, p++);
    }
    step(sb);
  }
}

void insert_events_in_user_tx(sqlite3* db, bool memory, const std::string& store_path,
                              const SqlText& sql, std::string_view file,
                              const std::vector<Event>& events) {
  if (!db) throw ConfigError("TxHandle::sqlite(nullptr): no connection given", "sqlite");
  if (sqlite3_get_autocommit(db) != 0)
    throw ConfigError(
        "TxHandle::sqlite: the connection is not inside BEGIN (start a transaction with BEGIN "
        "IMMEDIATE before appending)",
        "sqlite");
  if (memory)
    throw ConfigError("sqlite::memory: is private to the store: it takes no TxHandle", "sqlite");
  const char* on = sqlite3_db_filename(db, "main");
  if (!on || !*on || canonical(on) != store_path)
    throw ConfigError("TxHandle::sqlite: the connection is on '" +
                          std::string(on && *on ? on : ":memory:") +
                          "', not on the store's file '" + store_path + "'",
                      "sqlite");
  // A savepoint makes the append all or nothing inside the caller's transaction too: a chunk
  // that fails (disk full, a statement too big) must not leave the chunks before it for the
  // caller to commit.
  if (sqlite3_exec(db, "SAVEPOINT outpost_append", nullptr, nullptr, nullptr) != SQLITE_OK)
    throw_sqlite(db, sqlite3_extended_errcode(db), "starting the append");
  try {
    insert_events(db, nullptr, sql, file, events);
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK TO outpost_append", nullptr, nullptr, nullptr);
    sqlite3_exec(db, "RELEASE outpost_append", nullptr, nullptr, nullptr);
    throw;
  }
  if (sqlite3_exec(db, "RELEASE outpost_append", nullptr, nullptr, nullptr) != SQLITE_OK)
    throw_sqlite(db, sqlite3_extended_errcode(db), "finishing the append");
}

}  // namespace outpost::sqlite_store
