#include "stores/sqlite/sqlite_inspect.h"

#include <algorithm>

#include "outpost/error.h"

#include "stores/sqlite/sqlite_sql.h"

namespace outpost::sqlite_store {

StoreStats read_stats(Conn& c, const SqlText& sql) {
  StoreStats st;
  {
    Use s(c.prepare(sql.stats));
    if (step_row(c.db(), s, "reading stats")) {
      std::int64_t total = sqlite3_column_int64(s, 0);
      st.leased = sqlite3_column_int64(s, 1);
      st.scheduled = sqlite3_column_int64(s, 4);
      st.pending = total - st.leased - st.scheduled;
      if (total > 0 && sqlite3_column_type(s, 2) != SQLITE_NULL) {
        std::int64_t oldest_us = sqlite3_column_int64(s, 2);
        std::int64_t now_us = sqlite3_column_int64(s, 3) * 1000;
        st.oldest_pending_age = Duration(std::max<std::int64_t>(0, now_us - oldest_us) / 1000);
      }
    }
  }
  {
    Use s(c.prepare(sql.count_dead));
    if (step_row(c.db(), s, "counting dead events")) st.dead = sqlite3_column_int64(s, 0);
  }
  {
    Use s(c.prepare(sql.count_archive));
    if (step_row(c.db(), s, "counting archived events")) st.archived = sqlite3_column_int64(s, 0);
  }
  return st;
}

InspectSql::InspectSql(const std::string& t, bool crashes) {
  // seq, id, type, key, attempts, last_error, due (ms), lease_owner (only while the lease is
  // live), lease_until (ms), crashes. A lease is live while lease_until is after the database's
  // now. due_at 0 means due since appended (never failed, never scheduled): the event's time
  // then, as PostgreSQL's available_at and Redis's score are, not the epoch.
  const std::string now = kNowMs;
  const std::string select =
      "SELECT s.seq, b.id, b.type, s.key, s.attempts, s.last_error, "
      "CASE WHEN s.due_at > 0 THEN s.due_at ELSE b.occurred_at / 1000 END, "
      "CASE WHEN s.lease_owner IS NOT NULL AND s.lease_until > " +
      now + " THEN s.lease_owner END, s.lease_until, " + (crashes ? "s.crashes" : "0");
  const std::string from = " FROM " + t + " AS s JOIN " + t + "_body AS b ON b.seq = s.seq WHERE ";
  // blocked adds the reason (store.h, EventState::reason): "dead" when the key has a dead letter
  // (the strict claim holds such a key: sqlite_claim.cpp), else "failing".
  const std::string behind_dead = "s.key IN (SELECT key FROM " + t + "_dead WHERE key <> '')";
  // A key's head is its lowest seq; one grouped pass over the state rows (no index on key:
  // the claim finds heads while reading from the head, see sqlite_schema.cpp).
  blocked = select + ", CASE WHEN " + behind_dead + " THEN 'dead' ELSE 'failing' END" + from +
            "s.seq IN (SELECT min(seq) FROM " + t +
            " WHERE key <> '' GROUP BY key) AND ((s.attempts > 0 AND s.last_error IS NOT NULL "
            "AND s.last_error <> '') OR " +
            behind_dead + ") ORDER BY s.seq LIMIT ?1";
  leased = select + from + "s.lease_owner IS NOT NULL AND s.lease_until > " + now +
           " ORDER BY s.seq LIMIT ?1";
}

std::vector<EventState> read_states(Conn& c, const std::string& sql, std::size_t limit) {
  auto ms = [](sqlite3_int64 v) { return TimePoint(std::chrono::microseconds(v * 1000)); };
  std::vector<EventState> out;
  Use s(c.prepare(sql));
  sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
  while (step_row(c.db(), s, "inspecting events")) {
    EventState& e = out.emplace_back();
    e.seq = sqlite3_column_int64(s, 0);
    if (sqlite3_column_bytes(s, 1) != 16)
      throw Error(ErrorCode::corrupt, "sqlite",
                  "event id column is not a 16-byte blob (row seq " + std::to_string(e.seq) + ")");
    e.id = EventId::from_bytes(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 1)));
    e.type = column_text(s, 2);
    e.key = column_text(s, 3);
    e.attempts = sqlite3_column_int(s, 4);
    e.crashes = sqlite3_column_int(s, 9);
    e.last_error = column_text(s, 5);
    if (sqlite3_column_count(s) > 10) e.reason = column_text(s, 10);  // blocked only
    if (sqlite3_column_type(s, 7) == SQLITE_NULL) {
      e.next_attempt = ms(sqlite3_column_int64(s, 6));
    } else {
      e.lease_owner = std::to_string(sqlite3_column_int64(s, 7));
      e.lease_until = ms(sqlite3_column_int64(s, 8));
    }
  }
  return out;
}

}  // namespace outpost::sqlite_store
