// One SQL access layer (docs/architecture.md, "Finding a piece"): a failure of SQLite or
// PostgreSQL is one failure class whichever part of outpost meets it, the outbox store, the
// consumer's checkpoint store or the inbox (docs/consumers.md, "Failure classes": a full disk, a
// server out of resources, a deadlock is an outage and retried; a refusal that will not pass is
// not). Real servers, real failures: PostgreSQL raises each SQLSTATE from a trigger, SQLite fills
// its file up to PRAGMA max_page_count.

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "consume/checkpoint_store.h"
#include "consume/sql.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/inbox.h"
#include "outpost/sinks/file.h"
#include "outpost/store.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using consume::SqlTx;
using testing::unique_name;

struct Outcome {
  ErrorCode code;
  bool retryable;
  std::string native, what;
};

template <class F>
std::optional<Outcome> failure_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return Outcome{e.code(), e.retryable(), e.native_code(), e.what()};
  }
  return std::nullopt;
}

// The same SQLSTATE, raised by the server under the outbox store's append and under the inbox
// write of a consumer's transaction, is the same error class on both. Before the one mapping the
// store made a full disk (53100), out of memory (53200), too many connections (53300), an I/O
// error (58030), a serialization failure (40001), a deadlock (40P01) and a lock timeout (55P03)
// fatal, where the consumer retried them.
TEST(SqlLayer, PostgresFailureClassesAreTheSameForTheStoreAndTheConsumer) {
  auto url = testing::env("OUTPOST_TEST_PG_URL");
  if (!url) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_PG_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";
  }
  const std::string name = unique_name("sqlerr");
  auto store = open_store(*url + "?table=" + name);
  auto checkpoints = open_checkpoint_store(*url + "?prefix=" + name);
  auto& cp = *checkpoints;
  // Every insert into the outbox and into the consumer's inbox raises the SQLSTATE in
  // <name>_inject.
  cp.transaction([&](TxHandle h) {
    SqlTx tx(h);
    tx.script("CREATE TABLE " + name + "_inject (code TEXT NOT NULL); INSERT INTO " + name +
              "_inject VALUES ('00000'); CREATE FUNCTION " + name +
              "_raise() RETURNS trigger LANGUAGE plpgsql AS $f$ DECLARE c TEXT; BEGIN SELECT code "
              "INTO c FROM " +
              name + "_inject; RAISE EXCEPTION 'injected %', c USING ERRCODE = c; END $f$; " +
              "CREATE TRIGGER " + name + "_raise BEFORE INSERT ON " + name +
              " FOR EACH ROW EXECUTE FUNCTION " + name + "_raise(); CREATE TRIGGER " + name +
              "_raise BEFORE INSERT ON " + name + "_inbox FOR EACH ROW EXECUTE FUNCTION " + name +
              "_raise()");
  });
  InboxOptions io;
  io.name = name;
  io.retention = 0ms;
  const Inbox inbox(io);
  const std::map<std::string, bool> retried = {
      {"53100", true},  {"53200", true},  {"53300", true},  {"58030", true},
      {"40001", true},  {"40P01", true},  {"55P03", true},  {"57014", true},
      {"42501", false}, {"22012", false}, {"53400", false},
  };
  for (const auto& [state, retryable] : retried) {
    SCOPED_TRACE("SQLSTATE " + state);
    cp.transaction([&](TxHandle h) {
      SqlTx tx(h);
      tx.exec("UPDATE " + name + "_inject SET code = $1", {state});
    });
    std::vector<Event> events{Event::make("sql.layer", "{}", "k")};
    auto by_store = failure_of([&] { store->append(events); });
    auto by_consumer = failure_of([&] {
      cp.transaction([&](TxHandle h) {
        SqlTx tx(h);
        inbox.record(EventId::generate(), tx.handle());
      });
    });
    ASSERT_TRUE(by_store) << "the store's append did not fail";
    ASSERT_TRUE(by_consumer) << "the inbox write did not fail";
    EXPECT_EQ(by_store->retryable, retryable) << by_store->what;
    EXPECT_EQ(by_consumer->retryable, retryable) << by_consumer->what;
    EXPECT_EQ(by_store->code, by_consumer->code) << by_store->what << "\n" << by_consumer->what;
    EXPECT_EQ(by_store->native, by_consumer->native);
    EXPECT_NE(by_store->what.find("injected " + state), std::string::npos) << by_store->what;
  }
  cp.transaction([&](TxHandle h) {
    SqlTx tx(h);
    tx.script("DROP FUNCTION " + name + "_raise() CASCADE; DROP TABLE " + name + "_inject, " +
              name + "_checkpoints, " + name + "_dead, " + name + "_inbox");
  });
}

// A consumer whose SQLite checkpoint store is full (PRAGMA max_page_count: the file may not
// grow) retries with backoff, as the outbox store does, and consumes everything once there is
// room again; before one mapping per engine the consumer's own copy had made SQLITE_FULL a fatal
// backend error (run() threw "database or disk is full").
TEST(SqlLayer, ASqliteCheckpointStoreThatIsFullIsRetriedUntilThereIsRoom) {
  const std::string name = unique_name("sqlfull");
  const std::string dir = testing::temp_dir();
  const std::string log = dir + "/" + name + ".jsonl";
  {
    auto sink = open_file_sink("file:" + log);
    std::vector<StoredEvent> events;
    for (int i = 0; i < 300; ++i) {
      StoredEvent e;
      static_cast<Event&>(e) = Event::make("sql.full", "{}", "k" + std::to_string(i % 7));
      events.push_back(e);
    }
    for (auto& r : sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;
  }
  auto store = open_checkpoint_store("sqlite:" + dir + "/" + name + ".db");
  auto source = open_source("file:" + log);
  sqlite3* db = nullptr;  // the checkpoint store's connection, as the handler sees it
  bool full = false;
  std::vector<std::string> errors;
  std::set<std::string> handled;
  int calls = 0;
  ConsumerOptions o;
  o.group = "g";
  o.batch_size = 100;
  o.poll = 20ms;
  o.until_idle = 2s;
  o.on_error = [&](const std::string& e) {
    errors.push_back(e);
    // The consumer thread, between tries (the failed transaction rolled back): room again.
    if (db && full) sqlite3_exec(db, "PRAGMA max_page_count = 1000000", nullptr, nullptr, nullptr);
    full = false;
  };
  Consumer consumer(*source, *store, o);
  consumer.run([&](ConsumerBatch& b) {
    for (const auto& m : b.messages()) handled.insert(m.event.id.str());
    if (++calls > 1) return;
    // After the first batch's inbox rows: the file may not grow any more, so the next batch's
    // inbox rows do not fit.
    db = static_cast<sqlite3*>(b.tx().native());
    SqlTx tx(b.tx());
    auto pages = tx.query("PRAGMA page_count");
    ASSERT_EQ(pages.size(), 1u);
    tx.exec("PRAGMA max_page_count = " + *pages[0][0]);
    full = true;
  });
  EXPECT_EQ(handled.size(), 300u);
  auto c = consumer.counters();
  EXPECT_EQ(c.handled, 300u);
  EXPECT_EQ(c.parked, 0u);
  EXPECT_GE(c.errors, 1u) << "the checkpoint store never ran full";
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("full"), std::string::npos) << errors[0];
}

}  // namespace
}  // namespace outpost
