// The inbox on real SQLite files and a real PostgreSQL (OUTPOST_TEST_PG_URL): batch filtering,
// rollback, duplicate deliveries racing from two threads and from two processes (the effect
// happens once), retention by age, name validation, the dedup-window check.

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "outpost/error.h"
#include "outpost/inbox.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using testing::env;
using testing::unique_name;

// A test's own connection to the engine under test: plain SQL plus the TxHandle.
class Db {
 public:
  virtual ~Db() = default;
  virtual void exec(const std::string& sql) = 0;
  virtual long long scalar(const std::string& sql) = 0;
  virtual TxHandle tx() = 0;
  virtual void begin() = 0;  // the inbox's documented way: BEGIN IMMEDIATE on SQLite
};

class SqliteDb final : public Db {
 public:
  explicit SqliteDb(const std::string& path) {
    if (sqlite3_open(path.c_str(), &db_) != SQLITE_OK) throw std::runtime_error("open");
    sqlite3_busy_timeout(db_, 30000);
    exec("PRAGMA journal_mode=WAL");
  }
  ~SqliteDb() override { sqlite3_close_v2(db_); }
  void exec(const std::string& sql) override {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string m = err ? err : "?";
      sqlite3_free(err);
      throw std::runtime_error(sql + ": " + m);
    }
  }
  long long scalar(const std::string& sql) override {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
      throw std::runtime_error(sql + ": " + sqlite3_errmsg(db_));
    long long v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_finalize(s);
    return v;
  }
  TxHandle tx() override { return TxHandle::sqlite(db_); }
  void begin() override { exec("BEGIN IMMEDIATE"); }

 private:
  sqlite3* db_ = nullptr;
};

class PgDb final : public Db {
 public:
  explicit PgDb(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    if (PQstatus(conn_) != CONNECTION_OK) throw std::runtime_error(PQerrorMessage(conn_));
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
  }
  ~PgDb() override { PQfinish(conn_); }
  void exec(const std::string& sql) override {
    PGresult* r = PQexec(conn_, sql.c_str());
    auto st = PQresultStatus(r);
    std::string err = PQresultErrorMessage(r);
    PQclear(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) throw std::runtime_error(sql + ": " + err);
  }
  long long scalar(const std::string& sql) override {
    PGresult* r = PQexec(conn_, sql.c_str());
    long long v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0
                      ? std::stoll(PQgetvalue(r, 0, 0))
                      : -1;
    PQclear(r);
    return v;
  }
  TxHandle tx() override { return TxHandle::postgres(conn_); }
  void begin() override { exec("BEGIN"); }

 private:
  PGconn* conn_;
};

struct Engine {
  std::string name;
  std::function<std::unique_ptr<Db>()> open;  // a new connection to this test's database
};

class InboxTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    prefix_ = unique_name("ib");
    if (GetParam() == "sqlite") {
      path_ = testing::temp_dir() + "/" + prefix_ + ".db";
      open_ = [p = path_] { return std::unique_ptr<Db>(new SqliteDb(p)); };
    } else {
      auto url = env("OUTPOST_TEST_PG_URL");
      if (!url) {
        if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_PG_URL not set";
        GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";
      }
      open_ = [u = *url] { return std::unique_ptr<Db>(new PgDb(u)); };
    }
    db_ = open_();
    db_->exec("CREATE TABLE " + prefix_ + "_effects (n BIGINT NOT NULL)");
    db_->exec("INSERT INTO " + prefix_ + "_effects VALUES (0)");
  }
  void TearDown() override {
    if (!db_) return;
    try {
      db_->exec("DROP TABLE IF EXISTS " + prefix_ + "_effects");
      db_->exec("DROP TABLE IF EXISTS " + prefix_ + "_inbox");
    } catch (...) {
    }
    db_.reset();
    if (!path_.empty()) {
      for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path_ + suffix).c_str());
    }
  }
  Inbox inbox(const std::string& consumer = "c1") {
    InboxOptions o;
    o.name = prefix_;
    o.consumer = consumer;
    return Inbox(o);
  }
  // One delivery: record + effect (+1) in one transaction.
  bool deliver(Db& db, const Inbox& ib, const Event& e, std::chrono::milliseconds hold = 0ms) {
    db.begin();
    bool ran = ib.process(
        e, db.tx(), [&](const Event&) { db.exec("UPDATE " + prefix_ + "_effects SET n = n + 1"); });
    if (hold.count()) std::this_thread::sleep_for(hold);
    db.exec("COMMIT");
    return ran;
  }
  long long effects() { return db_->scalar("SELECT n FROM " + prefix_ + "_effects"); }

  std::string prefix_, path_;
  std::function<std::unique_ptr<Db>()> open_;
  std::unique_ptr<Db> db_;
};

TEST_P(InboxTest, BatchFiltersRecordedIdsAndRepeatsInOneStatement) {
  auto ib = inbox();
  auto a = EventId::generate(), b = EventId::generate(), c = EventId::generate();
  db_->begin();
  EXPECT_TRUE(ib.record(a, db_->tx()));
  db_->exec("COMMIT");
  std::vector<EventId> batch{a, b, a, c, b};
  db_->begin();
  auto fresh = ib.record_new(batch, db_->tx());
  db_->exec("COMMIT");
  EXPECT_EQ(fresh, (std::vector<bool>{false, true, false, true, false}));
  // Another consumer name has its own ids.
  db_->begin();
  EXPECT_TRUE(inbox("c2").record(a, db_->tx()));
  db_->exec("COMMIT");
}

TEST_P(InboxTest, RolledBackDeliveryLeavesNoIdAndRunsAgain) {
  auto ib = inbox();
  Event e = Event::make("t", "{}");
  db_->begin();
  EXPECT_TRUE(ib.process(e, db_->tx(), [](const Event&) {}));
  db_->exec("ROLLBACK");
  EXPECT_TRUE(deliver(*db_, ib, e));
  EXPECT_FALSE(deliver(*db_, ib, e));
  EXPECT_EQ(effects(), 1);
  db_->begin();
  EXPECT_TRUE(ib.contains(e.id, db_->tx()));
  ib.forget(std::vector<EventId>{e.id}, db_->tx());
  EXPECT_FALSE(ib.contains(e.id, db_->tx()));
  db_->exec("COMMIT");
}

TEST_P(InboxTest, TwoThreadsDeliveringOneIdRunTheEffectOnce) {
  auto ib = inbox();
  // Create the table first so both threads race on the row, not on the DDL.
  db_->begin();
  ib.ensure_table(db_->tx());
  db_->exec("COMMIT");
  for (int round = 0; round < 5; ++round) {
    Event e = Event::make("t", "{}");
    std::atomic<int> ran{0};
    std::atomic<bool> first_recorded{false};
    std::thread t1([&] {
      auto db = open_();
      db->begin();
      if (ib.process(e, db->tx(), [&](const Event&) {
            db->exec("UPDATE " + prefix_ + "_effects SET n = n + 1");
          }))
        ++ran;
      first_recorded = true;
      std::this_thread::sleep_for(100ms);  // the second delivery arrives while this one is open
      db->exec("COMMIT");
    });
    std::thread t2([&] {
      auto db = open_();
      while (!first_recorded) std::this_thread::sleep_for(1ms);
      if (deliver(*db, ib, e)) ++ran;
    });
    t1.join();
    t2.join();
    EXPECT_EQ(ran.load(), 1) << "round " << round;
  }
  EXPECT_EQ(effects(), 5);
}

TEST_P(InboxTest, TwoProcessesDeliveringTheSameIdsRunEachEffectOnce) {
  auto ib = inbox();
  db_->begin();
  ib.ensure_table(db_->tx());
  db_->exec("COMMIT");
  std::vector<Event> events;
  for (int i = 0; i < 150; ++i) events.push_back(Event::make("t", "{}"));
  std::vector<pid_t> children;
  for (int p = 0; p < 2; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        auto db = open_();
        for (const auto& e : events) deliver(*db, ib, e);
      } catch (const std::exception& ex) {
        fprintf(stderr, "child: %s\n", ex.what());
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(effects(), 150);
  EXPECT_EQ(db_->scalar("SELECT count(*) FROM " + prefix_ + "_inbox"), 150);
}

TEST_P(InboxTest, RetentionRemovesOldIdsAndOnlyOldIds) {
  auto ib = inbox();
  auto other = inbox("c2");
  std::vector<EventId> old_ids, new_ids;
  for (int i = 0; i < 10; ++i) (i % 2 ? old_ids : new_ids).push_back(EventId::generate());
  db_->begin();
  ib.record_new(old_ids, db_->tx());
  ib.record_new(new_ids, db_->tx());
  other.record_new(old_ids, db_->tx());
  db_->exec("COMMIT");
  // Age the "old" ids by two days (as if recorded then).
  std::string in;
  for (auto& id : old_ids) in += (in.empty() ? "'" : ",'") + id.str() + "'";
  db_->exec("UPDATE " + prefix_ +
            "_inbox SET recorded_at = recorded_at - 172800000 WHERE event_id IN (" + in + ")");
  db_->begin();
  EXPECT_EQ(ib.purge(db_->tx(), std::chrono::hours(24)), old_ids.size());
  EXPECT_EQ(ib.purge(db_->tx(), std::chrono::hours(24)), 0u);
  for (auto& id : new_ids) EXPECT_TRUE(ib.contains(id, db_->tx()));
  for (auto& id : old_ids) EXPECT_FALSE(ib.contains(id, db_->tx()));
  for (auto& id : old_ids)
    EXPECT_TRUE(other.contains(id, db_->tx())) << "other consumer's ids stay";
  db_->exec("COMMIT");
}

INSTANTIATE_TEST_SUITE_P(Engines, InboxTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

TEST(InboxConfig, NamesAreValidated) {
  InboxOptions o;
  o.name = "x;drop table";
  EXPECT_THROW(Inbox{o}, ConfigError);
  o.name = std::string(58, 'a');
  EXPECT_THROW(Inbox{o}, ConfigError);
  o.name = "ok";
  o.consumer = "";
  EXPECT_THROW(Inbox{o}, ConfigError);
  o.consumer = "billing";
  EXPECT_NO_THROW(Inbox{o});
  Inbox ib(o);
  EXPECT_THROW(ib.record(EventId::generate(), TxHandle{}), ConfigError);
}

TEST(InboxConfig, DedupWindowShorterThanTheRelayRetryHorizonWarns) {
  RetryHorizon relay{std::chrono::seconds(30), std::chrono::seconds(60), 5};  // 330 s
  EXPECT_TRUE(check_dedup_window(std::chrono::seconds(300), relay));
  EXPECT_TRUE(check_dedup_window(std::chrono::seconds(330), relay));
  EXPECT_FALSE(check_dedup_window(std::chrono::seconds(331), relay));
  EXPECT_FALSE(check_dedup_window(std::chrono::seconds(10), RetryHorizon{}));
  std::string warned;
  InboxOptions o;
  o.retention = std::chrono::seconds(60);
  o.upstream = relay;
  o.on_warning = [&](const std::string& w) { warned = w; };
  Inbox ib(o);
  EXPECT_NE(warned.find("330000 ms"), std::string::npos) << warned;
  warned.clear();
  o.retention = std::chrono::hours(1);
  Inbox ok(o);
  EXPECT_TRUE(warned.empty());
}

}  // namespace
}  // namespace outpost
