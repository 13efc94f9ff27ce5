// SQLite-specific store tests (the shared behaviour is in tests/conformance): URL and table-name
// validation, clear errors for files that are not outpost databases, emitting in the user's own
// transaction, lock waits that never surface SQLITE_BUSY, and several emitting processes on one
// file while this process relays.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "outpost/error.h"
#include "outpost/stores/sqlite.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using Db = std::unique_ptr<sqlite3, DbClose>;

Db open_raw(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open(path.c_str(), &db);
  Db owned(db);
  if (rc != SQLITE_OK) throw std::runtime_error("cannot open " + path);
  return owned;
}

void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw std::runtime_error(sql + ": " + msg);
  }
}

class SqliteStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir() + "/" + testing::unique_name("sqlite_it");
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name = "outbox.db") const { return dir_ + "/" + name; }

  std::string dir_;
};

template <class F>
std::string error_of(F&& fn, ErrorCode expected) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), expected) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return {};
}

std::vector<EventId> ids_of(const std::vector<StoredEvent>& events) {
  std::vector<EventId> ids;
  for (const auto& e : events) ids.push_back(e.id);
  return ids;
}

// --- configuration -------------------------------------------------------------------------------

TEST_F(SqliteStoreTest, BadTableNamesAreRejectedBeforeTouchingTheFile) {
  for (std::string bad : {std::string("x;drop"), std::string("1abc"), std::string(64, 'a'),
                          std::string(), std::string("a-b"), std::string("outbox\"")}) {
    SqliteOptions o;
    o.path = path();
    o.table = bad;
    std::string msg = error_of([&] { make_sqlite_store(o); }, ErrorCode::config);
    EXPECT_NE(msg.find("table name"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'" + bad + "'"), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(path()));
  std::string msg = error_of([&] { open_sqlite_store("sqlite:" + path() + "?table=x%3Bdrop"); },
                             ErrorCode::config);
  EXPECT_NE(msg.find("x;drop"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(path()));

  SqliteOptions ok;
  ok.path = path();
  ok.table = "T" + std::string(62, '_');  // 63 characters: the longest allowed
  auto store = make_sqlite_store(ok);
  store->append(std::vector<Event>{Event::make("t", "{}")});
  EXPECT_EQ(store->stats().pending, 1);
}

TEST_F(SqliteStoreTest, UrlErrorsNameTheBadPart) {
  std::string msg =
      error_of([&] { open_sqlite_store("sqlite:" + path() + "?tabel=x"); }, ErrorCode::config);
  EXPECT_NE(msg.find("tabel"), std::string::npos) << msg;
  msg = error_of([&] { open_sqlite_store("sqlite:" + path() + "?synchronous=fast"); },
                 ErrorCode::config);
  EXPECT_NE(msg.find("synchronous"), std::string::npos) << msg;
  msg = error_of([&] { open_sqlite_store("sqlite:" + path() + "?busy_timeout_ms=soon"); },
                 ErrorCode::config);
  EXPECT_NE(msg.find("busy_timeout_ms"), std::string::npos) << msg;
  msg = error_of([&] { open_sqlite_store("sqlite:"); }, ErrorCode::config);
  EXPECT_NE(msg.find("path"), std::string::npos) << msg;
  msg = error_of([&] { open_sqlite_store("sqlite://somehost/x.db"); }, ErrorCode::config);
  EXPECT_NE(msg.find("host"), std::string::npos) << msg;
  error_of([&] { open_sqlite_store("memory:"); }, ErrorCode::config);
}

TEST_F(SqliteStoreTest, UrlParametersApply) {
  auto store = open_sqlite_store("sqlite://" + path() +
                                 "?table=events&archive=true&synchronous=full&busy_timeout_ms=500");
  std::vector<Event> events{Event::make("t", "{}")};
  store->append(events);
  auto batch = store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 1u);
  store->ack(batch, ids_of(batch.events));
  EXPECT_EQ(store->stats().archived, 1);
  auto db = open_raw(path());
  exec(db.get(), "SELECT count(*) FROM events_archive");  // the table name was used
  EXPECT_THROW(exec(db.get(), "SELECT count(*) FROM outbox"), std::runtime_error);

  auto mem = open_sqlite_store("sqlite::memory:");
  mem->append(events);
  EXPECT_EQ(mem->claim(10, 5s).events.size(), 1u);
}

TEST_F(SqliteStoreTest, NotASqliteFileIsCorrupt) {
  {
    std::ofstream f(path("junk.db"));
    for (int i = 0; i < 200; ++i) f << "this is not an SQLite database, just some text\n";
  }
  std::string msg =
      error_of([&] { open_sqlite_store("sqlite:" + path("junk.db")); }, ErrorCode::corrupt);
  EXPECT_NE(msg.find(path("junk.db")), std::string::npos) << msg;
  EXPECT_NE(msg.find("not an outpost database"), std::string::npos) << msg;
}

TEST_F(SqliteStoreTest, ForeignSqliteFileIsCorrupt) {
  {
    auto db = open_raw(path("app.db"));
    exec(db.get(), "CREATE TABLE outbox (id TEXT PRIMARY KEY, body TEXT)");
    exec(db.get(), "INSERT INTO outbox VALUES ('a', 'b')");
  }
  std::string msg =
      error_of([&] { open_sqlite_store("sqlite:" + path("app.db")); }, ErrorCode::corrupt);
  EXPECT_NE(msg.find(path("app.db")), std::string::npos) << msg;
  EXPECT_NE(msg.find("'outbox'"), std::string::npos) << msg;
  // The same file with another table name is fine: the user's tables are left alone.
  auto store = open_sqlite_store("sqlite:" + path("app.db") + "?table=outpost_events");
  store->append(std::vector<Event>{Event::make("t", "{}")});
  EXPECT_EQ(store->stats().pending, 1);
  auto db = open_raw(path("app.db"));
  exec(db.get(), "SELECT body FROM outbox");
}

TEST_F(SqliteStoreTest, NewerSchemaVersionIsRejected) {
  open_sqlite_store("sqlite:" + path());
  {
    auto db = open_raw(path());
    exec(db.get(), "UPDATE outbox_schema SET version = 99");
  }
  std::string msg = error_of([&] { open_sqlite_store("sqlite:" + path()); }, ErrorCode::corrupt);
  EXPECT_NE(msg.find("99"), std::string::npos) << msg;
}

TEST_F(SqliteStoreTest, UnreachableDirectoryIsAConnectionError) {
  std::string bad = dir_ + "/no/such/dir/outbox.db";
  std::string msg = error_of([&] { open_sqlite_store("sqlite:" + bad); }, ErrorCode::connection);
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
}

// B4.5: a directory was "database file 'DIR/' cannot be read: disk I/O error" (a connection
// error, retried as an outage). It is bad input: a ConfigError saying so.
TEST_F(SqliteStoreTest, ADirectoryIsAConfigErrorSayingSo) {
  std::string msg = error_of([&] { open_sqlite_store("sqlite:" + dir_); }, ErrorCode::config);
  EXPECT_NE(msg.find("'" + dir_ + "' is a directory"), std::string::npos) << msg;
  msg = error_of([&] { open_sqlite_store("sqlite:" + dir_ + "/"); }, ErrorCode::config);
  EXPECT_NE(msg.find("names a directory"), std::string::npos) << msg;
  std::string missing = dir_ + "/not-yet/";  // a trailing '/' names a directory, also unmade
  msg = error_of([&] { open_sqlite_store("sqlite:" + missing); }, ErrorCode::config);
  EXPECT_NE(msg.find("names a directory"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(missing));
}

TEST_F(SqliteStoreTest, EventsSurviveReopening) {
  std::vector<Event> events{Event::make("a", "1", "k"), Event::make("b", "2", "k")};
  open_sqlite_store("sqlite:" + path())->append(events);
  auto store = open_sqlite_store("sqlite:" + path());
  auto batch = store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].id, events[0].id);
  EXPECT_EQ(batch.events[1].payload, "2");
}

// The claim reads bodies by range when the claimed seqs are dense and through a list when a
// long blocked run lies between them: both must return the right rows.
TEST_F(SqliteStoreTest, OrderedClaimSkipsALongBlockedRun) {
  auto owned = open_sqlite_store("sqlite:" + path());
  Store& s = *owned;
  std::vector<Event> head{Event::make("t", "{}", "k")};
  s.append(head);
  auto first = s.claim(10, 10s);
  ASSERT_EQ(first.events.size(), 1u);
  std::vector<Event> events{Event::make("free", "first", "")};
  for (int i = 0; i < 60; ++i) events.push_back(Event::make("t", std::to_string(i), "k"));
  events.push_back(Event::make("free", "last", "j"));
  s.append(events);
  auto second = s.claim(10, 10s);  // only the two events around k's blocked run
  ASSERT_EQ(second.events.size(), 2u);
  EXPECT_EQ(second.events[0].id, events.front().id);
  EXPECT_EQ(second.events[0].payload, "first");
  EXPECT_EQ(second.events[1].id, events.back().id);
  EXPECT_EQ(second.events[1].payload, "last");
  EXPECT_EQ(second.events[1].key, "j");
  EXPECT_EQ(s.ack(second, ids_of(second.events)), 2u);
  EXPECT_EQ(s.ack(first, ids_of(first.events)), 1u);
  auto third = s.claim(100, 10s);
  ASSERT_EQ(third.events.size(), 60u);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(third.events[i].payload, std::to_string(i));
}

// A claim may stop after its scan window (256 rows + 1.5 x batch) when every row so far is held
// back, but never two claims of one store object in a row, and wait_for_work() does not sleep
// after a truncated claim: an event of a free key behind a long blocked run is claimed by the
// second claim at the latest, without waiting.
TEST_F(SqliteStoreTest, ClaimPastTheScanWindowNeverStarvesAFreeKey) {
  auto owned = open_sqlite_store("sqlite:" + path());
  Store& s = *owned;
  std::vector<Event> head{Event::make("t", "{}", "hot")};
  s.append(head);
  auto in_flight = s.claim(1, 30s);
  ASSERT_EQ(in_flight.events.size(), 1u);
  std::vector<Event> events;
  for (int i = 0; i < 3000; ++i) events.push_back(Event::make("t", std::to_string(i), "hot"));
  events.push_back(Event::make("free", "cold", "cold"));
  s.append(events);
  for (int round = 0; round < 3; ++round) {
    auto a = s.claim(10, 30s);
    std::vector<StoredEvent> got = a.events;
    if (got.empty()) {
      auto t0 = SteadyClock::now();
      s.wait_for_work(5s);
      EXPECT_LT(SteadyClock::now() - t0, 1s) << "waited although an event was claimable";
      got = s.claim(10, 30s).events;
    }
    ASSERT_EQ(got.size(), 1u) << "round " << round;
    EXPECT_EQ(got[0].id, events.back().id);
    // The claimed free event stays leased; the next round looks for a new one behind the run.
    events.back() = Event::make("free", "cold", "cold" + std::to_string(round));
    std::vector<Event> one{events.back()};
    s.append(one);
  }
  EXPECT_EQ(s.ack(in_flight, ids_of(in_flight.events)), 1u);
  auto rest = s.claim(4000, 30s);
  ASSERT_EQ(rest.events.size(), 3001u);  // the hot run in order, then the last free event
  for (int i = 0; i < 3000; ++i) ASSERT_EQ(rest.events[i].payload, std::to_string(i));
}

// The bodies of a claim are read after its commit; a body missing while its state row is still
// leased to the claim is damage, not a lost lease, and is reported as such.
TEST_F(SqliteStoreTest, ClaimedEventWithoutItsBodyIsCorrupt) {
  auto store = open_sqlite_store("sqlite:" + path());
  std::vector<Event> events{Event::make("a", "1", "k"), Event::make("b", "2", "j")};
  store->append(events);
  {
    auto db = open_raw(path());
    exec(db.get(), "DELETE FROM outbox_body WHERE seq = (SELECT max(seq) FROM outbox_body)");
  }
  std::string msg = error_of([&] { store->claim(10, 5s); }, ErrorCode::corrupt);
  EXPECT_NE(msg.find("outbox_body"), std::string::npos) << msg;
}

// Version 1 had a partial index on attempted rows; opening such a file migrates it to version 2
// (index dropped) in place, keeping the events, and on to the current version.
TEST_F(SqliteStoreTest, Version1FileIsMigratedToVersion2) {
  std::vector<Event> events{Event::make("a", "1", "k"), Event::make("b", "2", "k")};
  open_sqlite_store("sqlite:" + path())->append(events);
  {
    auto db = open_raw(path());
    exec(db.get(),
         "CREATE INDEX outbox_blocking ON outbox (key, seq) WHERE attempts > 0; "
         "UPDATE outbox_schema SET version = 1");
  }
  auto store = open_sqlite_store("sqlite:" + path());
  {
    auto db = open_raw(path());
    sqlite3_stmt* raw = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db.get(),
                                 "SELECT (SELECT max(version) FROM outbox_schema), (SELECT "
                                 "count(*) FROM sqlite_master WHERE name = 'outbox_blocking')",
                                 -1, &raw, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(raw), SQLITE_ROW);
    EXPECT_EQ(sqlite3_column_int(raw, 0), 4);
    EXPECT_EQ(sqlite3_column_int(raw, 1), 0);
    sqlite3_finalize(raw);
  }
  auto batch = store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].id, events[0].id);
  EXPECT_EQ(batch.events[1].id, events[1].id);
}

// A file of schema version 2 (the DDL of outpost before the crash counter, written here as it
// was) with an event in flight, a pending one and a dead letter. Read-only, it is read as it is
// (crashes 0, nothing written); opened for writing it is migrated in place to version 3: every
// event keeps its counts and reads crashes 0, and the event whose relay died mid-delivery (its
// lease expired, still owned) is claimed as a crash, not another attempt.
TEST_F(SqliteStoreTest, Version2FileIsMigratedToVersion3WithCrashesZero) {
  auto schema_version = [&] {
    auto db = open_raw(path());
    sqlite3_stmt* raw = nullptr;
    EXPECT_EQ(
        sqlite3_prepare_v2(db.get(), "SELECT max(version) FROM outbox_schema", -1, &raw, nullptr),
        SQLITE_OK);
    EXPECT_EQ(sqlite3_step(raw), SQLITE_ROW);
    int v = sqlite3_column_int(raw, 0);
    sqlite3_finalize(raw);
    return v;
  };
  {
    auto db = open_raw(path());
    exec(db.get(), R"sql(
CREATE TABLE outbox_schema (version INTEGER NOT NULL);
INSERT INTO outbox_schema (version) VALUES (2);
CREATE TABLE outbox (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  due_at INTEGER NOT NULL DEFAULT 0,
  lease_owner INTEGER,
  lease_until INTEGER NOT NULL DEFAULT 0,
  last_error TEXT);
CREATE TABLE outbox_body (
  seq INTEGER PRIMARY KEY,
  id BLOB NOT NULL,
  type TEXT NOT NULL,
  payload BLOB NOT NULL,
  occurred_at INTEGER NOT NULL,
  headers TEXT);
CREATE TABLE outbox_dead (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, last_error TEXT, dead_at INTEGER NOT NULL);
CREATE INDEX outbox_dead_id ON outbox_dead (id);
CREATE TABLE outbox_archive (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, acked_at INTEGER NOT NULL);
CREATE INDEX outbox_archive_acked ON outbox_archive (acked_at);
INSERT INTO outbox (seq, key, attempts, due_at, lease_owner, lease_until, last_error)
  VALUES (1, 'k', 1, 0, 42, 1, NULL), (2, 'j', 0, 0, NULL, 0, NULL);
INSERT INTO outbox_body VALUES
  (1, X'0190000000007000800000000000000a', 'in.flight', X'7B7D', 1, NULL),
  (2, X'0190000000007000800000000000000b', 'pending', X'7B7D', 2, NULL);
INSERT INTO outbox_dead VALUES
  (3, X'0190000000007000800000000000000c', 'dead', 'd', X'7B7D', 3, NULL, 3, 'refused', 4);
)sql");
  }
  {
    SqliteOptions o;
    o.path = path();
    o.store.open = StoreOptions::Open::read_only;
    auto ro = make_sqlite_store(o);
    auto listed = ro->list(10);
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_EQ(listed[0].attempts, 1);
    EXPECT_EQ(listed[0].crashes, 0);
    auto dead = ro->dead(10);
    ASSERT_EQ(dead.size(), 1u);
    EXPECT_EQ(dead[0].attempts, 3);
    EXPECT_EQ(dead[0].crashes, 0);
    EXPECT_TRUE(ro->leased(10).empty());  // the lease expired long ago
  }
  EXPECT_EQ(schema_version(), 2);  // read-only wrote nothing

  auto store = open_sqlite_store("sqlite:" + path());
  EXPECT_EQ(schema_version(), 4);  // and on to the current version
  auto listed = store->list(10);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].type, "in.flight");
  EXPECT_EQ(listed[0].attempts, 1);
  EXPECT_EQ(listed[0].crashes, 0);
  EXPECT_EQ(listed[1].attempts, 0);
  EXPECT_EQ(listed[1].crashes, 0);
  auto dead = store->dead(10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].attempts, 3);
  EXPECT_EQ(dead[0].crashes, 0);
  EXPECT_EQ(dead[0].last_error, "refused");

  auto batch = store->claim(10, 5s);
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_EQ(batch.events[0].type, "in.flight");
  EXPECT_EQ(batch.events[0].attempts, 1);  // the dead relay's attempt, in flight again
  EXPECT_EQ(batch.events[0].crashes, 1);
  EXPECT_EQ(batch.events[1].type, "pending");
  EXPECT_EQ(batch.events[1].attempts, 1);
  EXPECT_EQ(batch.events[1].crashes, 0);
  std::vector<Nack> nacks{{batch.events[0].id, "gave up", std::nullopt}};
  EXPECT_EQ(store->nack(batch, nacks), 1u);
  dead = store->dead(10);
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].crashes, 1);
  EXPECT_EQ(store->retry_all(), 2u);
  for (const auto& e : store->list(10)) {
    if (e.type == "pending") continue;  // still leased by `batch`
    EXPECT_EQ(e.attempts, 0) << e.type;
    EXPECT_EQ(e.crashes, 0) << e.type;
  }
}

// A file of schema version 3 (the DDL of outpost before deliver_at was kept, written here as it
// was) with a scheduled event (held by due_at alone, as version 3 held it), a pending one, a dead
// letter and an archived event. Read-only it reads as it is (no deliver_at, nothing written);
// opened for writing it is upgraded in place to version 4 without losing any of them, the
// scheduled one still held; an INSERT written against version 3 (docs/emit-contract.md) still
// emits, and a scheduled one written against version 4 (due_at holds it) comes back out with its
// deliver_at.
TEST_F(SqliteStoreTest, Version3FileIsUpgradedToVersion4KeepingItsEvents) {
  auto query_int = [&](const std::string& sql) {
    auto db = open_raw(path());
    sqlite3_stmt* raw = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db.get(), sql.c_str(), -1, &raw, nullptr), SQLITE_OK) << sql;
    EXPECT_EQ(sqlite3_step(raw), SQLITE_ROW) << sql;
    std::int64_t v = sqlite3_column_int64(raw, 0);
    sqlite3_finalize(raw);
    return v;
  };
  const std::int64_t tomorrow_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now().time_since_epoch() + 24h).count();
  {
    auto db = open_raw(path());
    exec(db.get(), R"sql(
CREATE TABLE outbox_schema (version INTEGER NOT NULL);
INSERT INTO outbox_schema (version) VALUES (1);
CREATE TABLE outbox (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  due_at INTEGER NOT NULL DEFAULT 0,
  lease_owner INTEGER,
  lease_until INTEGER NOT NULL DEFAULT 0,
  last_error TEXT);
CREATE INDEX outbox_blocking ON outbox (key, seq) WHERE attempts > 0;
CREATE TABLE outbox_body (
  seq INTEGER PRIMARY KEY,
  id BLOB NOT NULL,
  type TEXT NOT NULL,
  payload BLOB NOT NULL,
  occurred_at INTEGER NOT NULL,
  headers TEXT);
CREATE TABLE outbox_dead (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, last_error TEXT, dead_at INTEGER NOT NULL);
CREATE INDEX outbox_dead_id ON outbox_dead (id);
CREATE TABLE outbox_archive (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, acked_at INTEGER NOT NULL);
CREATE INDEX outbox_archive_acked ON outbox_archive (acked_at);
DROP INDEX IF EXISTS outbox_blocking;
UPDATE outbox_schema SET version = 2;
ALTER TABLE outbox ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE outbox_dead ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0;
UPDATE outbox_schema SET version = 3;
INSERT INTO outbox_archive VALUES
  (1, X'0190000000007000800000000000000a', 'archived', 'a', X'7B7D', 1, NULL, 1, 5);
INSERT INTO outbox_dead VALUES
  (2, X'0190000000007000800000000000000b', 'dead', 'd', X'7B7D', 2, '{"h":"v"}', 3, 'refused',
   4, 1);
INSERT INTO outbox_body VALUES
  (3, X'0190000000007000800000000000000c', 'scheduled', X'7B7D', 3, NULL),
  (4, X'0190000000007000800000000000000d', 'pending', X'7B7D', 4, NULL);
)sql");
    exec(db.get(), "INSERT INTO outbox (seq, key, due_at) VALUES (3, 's', " +
                       std::to_string(tomorrow_ms) + "), (4, 'p', 0)");
  }
  {
    SqliteOptions o;
    o.path = path();
    o.store.open = StoreOptions::Open::read_only;
    auto ro = make_sqlite_store(o);
    auto listed = ro->list(10);
    ASSERT_EQ(listed.size(), 2u);
    EXPECT_FALSE(listed[0].deliver_at);
    ASSERT_EQ(ro->dead(10).size(), 1u);
    ASSERT_EQ(ro->archived(10).size(), 1u);
    EXPECT_EQ(ro->stats().scheduled, 1);
  }
  EXPECT_EQ(query_int("SELECT max(version) FROM outbox_schema"), 3);  // read-only wrote nothing

  auto store = open_sqlite_store("sqlite:" + path() + "?archive=1");
  EXPECT_EQ(query_int("SELECT max(version) FROM outbox_schema"), 4);
  auto listed = store->list(10);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].type, "scheduled");
  EXPECT_EQ(listed[1].type, "pending");
  for (const auto& e : listed) EXPECT_FALSE(e.deliver_at) << e.type;
  auto dead = store->dead(10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].last_error, "refused");
  EXPECT_EQ(dead[0].headers.at("h"), "v");
  EXPECT_EQ(dead[0].attempts, 3);
  EXPECT_EQ(dead[0].crashes, 1);
  auto archived = store->archived(10);
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].type, "archived");
  EXPECT_FALSE(archived[0].deliver_at);
  EXPECT_EQ(store->stats().scheduled, 1) << "the version 3 scheduled event is no longer held";

  // Emitters written against version 3, and against version 4: due_at (ms) holds a scheduled
  // event, deliver_at (us) comes back out with it.
  const TimePoint at = now() + 24h;
  {
    auto db = open_raw(path());
    exec(db.get(),
         "BEGIN IMMEDIATE;"
         "INSERT INTO outbox (key) VALUES ('p');"
         "INSERT INTO outbox_body (seq, id, type, payload, occurred_at, headers) VALUES "
         "(last_insert_rowid(), X'0190000000007000800000000000000e', 'v3.insert', X'7B7D', 5, "
         "NULL);"
         "INSERT INTO outbox (key, due_at) VALUES ('later', " +
             std::to_string(at.time_since_epoch().count() / 1000) +
             ");"
             "INSERT INTO outbox_body (seq, id, type, payload, occurred_at, headers, deliver_at) "
             "VALUES (last_insert_rowid(), X'0190000000007000800000000000000f', 'v4.scheduled', "
             "X'7B7D', 6, NULL, " +
             std::to_string(at.time_since_epoch().count()) + ");" + "COMMIT;");
  }
  EXPECT_EQ(store->stats().scheduled, 2) << "the scheduled INSERT is not held";
  auto batch = store->claim(10, 5s);
  std::vector<std::string> types;
  for (const auto& e : batch.events) types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<std::string>{"pending", "v3.insert"}));
  listed = store->list(10);
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_EQ(listed[3].type, "v4.scheduled");
  ASSERT_TRUE(listed[3].deliver_at);
  EXPECT_EQ(*listed[3].deliver_at, at);
  std::vector<EventId> acked;
  for (const auto& e : batch.events) acked.push_back(e.id);
  EXPECT_EQ(store->ack(batch, acked), 2u);
  EXPECT_EQ(store->archived(10).size(), 3u);
  EXPECT_EQ(store->retry_all(), 1u);  // the version 3 dead letter, revived on version 4
}

// --- the user's transaction ----------------------------------------------------------------------

TEST_F(SqliteStoreTest, TxHandleMustBeInsideBeginOnTheStoresFile) {
  auto store = open_sqlite_store("sqlite:" + path());
  auto db = open_raw(path());
  configure_sqlite_connection(db.get());
  std::vector<Event> events{Event::make("t", "{}")};
  std::string msg =
      error_of([&] { store->append(events, TxHandle::sqlite(db.get())); }, ErrorCode::config);
  EXPECT_NE(msg.find("not inside BEGIN"), std::string::npos) << msg;

  auto other = open_raw(path("other.db"));
  exec(other.get(), "BEGIN IMMEDIATE");
  msg = error_of([&] { store->append(events, TxHandle::sqlite(other.get())); }, ErrorCode::config);
  EXPECT_NE(msg.find("other.db"), std::string::npos) << msg;
  exec(other.get(), "ROLLBACK");

  // Inside BEGIN: the event and the business row commit together.
  exec(db.get(), "CREATE TABLE orders (n INTEGER)");
  exec(db.get(), "BEGIN IMMEDIATE");
  exec(db.get(), "INSERT INTO orders VALUES (1)");
  store->append(events, TxHandle::sqlite(db.get()));
  EXPECT_TRUE(store->list(10).empty());  // not committed yet (a claim would wait for the lock)
  exec(db.get(), "COMMIT");
  EXPECT_EQ(store->claim(10, 5s).events.size(), 1u);
}

// An append is all or nothing inside the caller's transaction too: when a later chunk of rows
// fails (here: longer than the connection's length limit), the rows before it are taken back, so
// a caller that catches the error and commits its own work commits no part of the append.
TEST_F(SqliteStoreTest, AFailedAppendLeavesNothingInTheCallersTransaction) {
  auto store = open_sqlite_store("sqlite:" + path());
  auto db = open_raw(path());
  configure_sqlite_connection(db.get());
  exec(db.get(), "CREATE TABLE orders (n INTEGER)");
  std::vector<Event> events;
  for (int i = 0; i < 150; ++i) events.push_back(Event::make("t", "{}", "k"));
  events[120].payload = std::string(5000, 'x');  // in the second chunk of 100 rows
  sqlite3_limit(db.get(), SQLITE_LIMIT_LENGTH, 4000);
  exec(db.get(), "BEGIN IMMEDIATE");
  exec(db.get(), "INSERT INTO orders VALUES (1)");
  EXPECT_THROW(store->append(events, TxHandle::sqlite(db.get())), Error);
  exec(db.get(), "COMMIT");  // the caller's own work goes on
  EXPECT_EQ(store->stats().pending, 0) << "a part of the failed append was committed";
  sqlite3_stmt* raw = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db.get(), "SELECT count(*) FROM orders", -1, &raw, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(raw), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(raw, 0), 1);
  sqlite3_finalize(raw);
}

// --- locking -------------------------------------------------------------------------------------

TEST_F(SqliteStoreTest, WritesWaitForAnotherConnectionsLockInsteadOfFailing) {
  auto store = open_sqlite_store("sqlite:" + path());
  auto db = open_raw(path());
  exec(db.get(), "BEGIN IMMEDIATE");  // another "process" holds the write lock for 300 ms
  std::thread holder([&] {
    std::this_thread::sleep_for(300ms);
    exec(db.get(), "COMMIT");
  });
  auto start = SteadyClock::now();
  EXPECT_NO_THROW(store->append(std::vector<Event>{Event::make("t", "{}")}));
  EXPECT_GE(SteadyClock::now() - start, 250ms);
  holder.join();
  EXPECT_EQ(store->stats().pending, 1);
}

TEST_F(SqliteStoreTest, LockHeldPastBusyTimeoutIsARetryableTimeout) {
  auto store = open_sqlite_store("sqlite:" + path() + "?busy_timeout_ms=100");
  auto db = open_raw(path());
  exec(db.get(), "BEGIN IMMEDIATE");
  try {
    store->append(std::vector<Event>{Event::make("t", "{}")});
    ADD_FAILURE() << "append succeeded while the file was locked";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout) << e.what();
    EXPECT_TRUE(e.retryable());
    EXPECT_NE(std::string(e.what()).find(path()), std::string::npos) << e.what();
  }
  exec(db.get(), "ROLLBACK");
  EXPECT_EQ(store->stats().pending, 0);
}

TEST_F(SqliteStoreTest, ArchiveRetentionRemovesOldArchivedEvents) {
  auto store = open_sqlite_store("sqlite:" + path() + "?archive=true&retention_ms=200");
  auto deliver_one = [&] {
    store->append(std::vector<Event>{Event::make("t", "{}")});
    auto batch = store->claim(10, 5s);
    ASSERT_EQ(batch.events.size(), 1u);
    EXPECT_EQ(store->ack(batch, ids_of(batch.events)), 1u);
  };
  deliver_one();
  EXPECT_EQ(store->stats().archived, 1);
  std::this_thread::sleep_for(1100ms);  // past the retention and the once-a-second prune
  deliver_one();
  EXPECT_EQ(store->stats().archived, 1);  // the first one is gone
}

// --- processes -----------------------------------------------------------------------------------

// Child process body: emits `events` events in small transactions, alternating between the
// user's own connection (TxHandle::sqlite, every 5th transaction rolled back) and the store's
// own transactions. Writes "C <id> <key>" for committed and "R <id>" for rolled back events to
// `log_path`. Returns the exit code (0 = no error surfaced).
int emitter_child(const std::string& db_path, const std::string& log_path, int child, int events) {
  try {
    auto store = open_sqlite_store("sqlite:" + db_path);
    auto db = open_raw(db_path);
    configure_sqlite_connection(db.get());
    std::ofstream log(log_path);
    int emitted = 0;
    for (int txn = 0; emitted < events; ++txn) {
      int n = std::min(1 + txn % 4, events - emitted);
      std::vector<Event> batch;
      for (int i = 0; i < n; ++i) {
        std::string key = "c" + std::to_string(child) + "-k" + std::to_string((emitted + i) % 5);
        batch.push_back(Event::make("child.event", std::to_string(emitted + i), key));
      }
      bool own_tx = txn % 2 == 0;
      bool rollback = own_tx && txn % 5 == 0;
      if (own_tx) {
        exec(db.get(), "BEGIN IMMEDIATE");
        store->append(batch, TxHandle::sqlite(db.get()));
        exec(db.get(), rollback ? "ROLLBACK" : "COMMIT");
      } else {
        store->append(batch);
      }
      for (const auto& e : batch) {
        if (rollback)
          log << "R " << e.id.str() << "\n";
        else
          log << "C " << e.id.str() << " " << e.key << "\n";
      }
      if (!rollback) emitted += n;
    }
    log.flush();
    return log ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", child, e.what());
    return 1;
  }
}

TEST_F(SqliteStoreTest, SeveralEmittingProcessesAndOneRelay) {
  constexpr int kChildren = 4;
  constexpr int kEventsPerChild = 2000;
  std::string db_path = path();
  open_sqlite_store("sqlite:" + db_path);  // create the schema before the children race
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0)
      ::_exit(
          emitter_child(db_path, path("child" + std::to_string(c) + ".log"), c, kEventsPerChild));
    pids.push_back(pid);
  }

  auto store = open_sqlite_store("sqlite:" + db_path);
  std::vector<StoredEvent> acked;
  std::set<pid_t> running(pids.begin(), pids.end());
  std::map<pid_t, int> exit_codes;
  auto deadline = SteadyClock::now() + 60s;
  std::string relay_error;
  while (SteadyClock::now() < deadline) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      if (::waitpid(*it, &status, WNOHANG) == *it) {
        exit_codes[*it] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    try {
      auto batch = store->claim(100, 30s);
      if (batch.empty()) {
        if (running.empty() && store->stats().pending == 0) break;
        store->wait_for_work(50ms);
        continue;
      }
      EXPECT_EQ(store->ack(batch, ids_of(batch.events)), batch.events.size());
      acked.insert(acked.end(), batch.events.begin(), batch.events.end());
    } catch (const std::exception& e) {
      relay_error = e.what();
      break;
    }
  }
  for (pid_t pid : running) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  ASSERT_TRUE(relay_error.empty()) << "the relay saw: " << relay_error;
  ASSERT_TRUE(running.empty()) << "children did not finish in time";
  for (auto& [pid, code] : exit_codes) EXPECT_EQ(code, 0) << "child " << pid;

  // Every committed event acked exactly once, none of the rolled back, per-key order kept.
  std::set<std::string> committed, rolled_back;
  std::map<std::string, std::vector<std::string>> committed_by_key;
  for (int c = 0; c < kChildren; ++c) {
    std::ifstream log(path("child" + std::to_string(c) + ".log"));
    std::string kind, id, key;
    while (log >> kind >> id) {
      if (kind == "C") {
        log >> key;
        committed.insert(id);
        committed_by_key[key].push_back(id);
      } else {
        rolled_back.insert(id);
      }
    }
  }
  EXPECT_EQ(committed.size(), static_cast<std::size_t>(kChildren * kEventsPerChild));
  EXPECT_FALSE(rolled_back.empty());
  std::map<std::string, std::vector<std::string>> acked_by_key;
  std::set<std::string> acked_ids;
  for (const auto& e : acked) {
    EXPECT_TRUE(acked_ids.insert(e.id.str()).second) << "acked twice: " << e.id.str();
    EXPECT_FALSE(rolled_back.contains(e.id.str())) << "rolled back but delivered";
    acked_by_key[e.key].push_back(e.id.str());
  }
  EXPECT_EQ(acked_ids, committed);
  EXPECT_EQ(acked_by_key, committed_by_key);
}

TEST_F(SqliteStoreTest, EmitFromAnotherProcessWakesTheRelay) {
  std::string db_path = path();
  auto store = open_sqlite_store("sqlite:" + db_path);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::this_thread::sleep_for(200ms);
    try {
      open_sqlite_store("sqlite:" + db_path)->append(std::vector<Event>{Event::make("t", "{}")});
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  auto start = SteadyClock::now();
  bool got = false;
  while (SteadyClock::now() - start < 8s) {
    if (!store->claim(10, 5s).empty()) {
      got = true;
      break;
    }
    store->wait_for_work(8s);
  }
  auto waited = SteadyClock::now() - start;
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(got);
  EXPECT_LT(waited, 3s);  // woken by data_version, not the 8 s timeout
}

// B2: a store whose file was removed, or replaced by another file, kept reading the old file:
// stats() said 0 pending while the events written at the path piled up undelivered, and nothing
// said so. Now every use of it fails, naming the file; a store opened again reads the path's.
TEST_F(SqliteStoreTest, AFileRemovedOrReplacedUnderneathIsAnErrorNamingIt) {
  namespace fs = std::filesystem;
  for (const std::string how : {"removed", "re-created", "replaced"}) {
    SCOPED_TRACE(how);
    const std::string db = path(how + ".db");
    auto store = open_sqlite_store("sqlite:" + db);
    store->append(std::vector<Event>{Event::make("t", "{}")});
    auto held = store->claim(10, 5s);  // in flight when the file goes
    ASSERT_EQ(held.events.size(), 1u);
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
    std::vector<Event> at_path{Event::make("t", "{\"new\":1}"), Event::make("t", "{\"new\":2}")};
    if (how == "re-created") {  // an emitter's next append creates a new file at the path
      open_sqlite_store("sqlite:" + db)->append(at_path);
    } else if (how == "replaced") {  // a restore: `mv new.db outbox.db`
      open_sqlite_store("sqlite:" + path("new.db"))->append(at_path);
      fs::rename(path("new.db"), db);
    }
    // Noticed within a second or so (a stat() at most once a second): bounded, generous wait.
    std::string msg;
    for (auto until = SteadyClock::now() + 20s; msg.empty() && SteadyClock::now() < until;) {
      try {
        store->stats();
        std::this_thread::sleep_for(50ms);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::corrupt) << e.what();
        msg = e.what();
      }
    }
    ASSERT_FALSE(msg.empty()) << "stats() never failed";
    EXPECT_NE(msg.find("'" + fs::weakly_canonical(db).string() + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(how == "removed" ? "was removed" : "was replaced"), std::string::npos)
        << msg;
    error_of([&] { store->claim(10, 5s); }, ErrorCode::corrupt);
    error_of([&] { store->wait_for_work(5s); }, ErrorCode::corrupt);
    error_of([&] { store->append(std::vector<Event>{Event::make("t", "{}")}); },
             ErrorCode::corrupt);
    error_of([&] { store->stats(); }, ErrorCode::corrupt);
    // A failing settle_and_claim writes nothing (the relay then settles on its own): the batch
    // in flight is still settled into the old file.
    std::vector<EventId> ids{held.events[0].id};
    SettleCounts counts;
    error_of(
        [&] {
          store->settle_and_claim(held, Settlement{ids, {}, {}}, counts, 10, 5s);
        },
        ErrorCode::corrupt);
    EXPECT_EQ(store->ack(held, ids), 1u);
    if (how != "removed") {  // opened again: the file at the path, with its events
      auto again = open_sqlite_store("sqlite:" + db);
      EXPECT_EQ(again->claim(10, 5s).events.size(), at_path.size());
    }
  }
}

}  // namespace
}  // namespace outpost
