// The CheckpointStore conformance suite: what every checkpoint store engine must do alike
// (include/outpost/consumer.h, docs/consumers.md), run against every registered case
// (tests/support/checkpoint_cases.h; sqlite, postgres). A consumer reads an in-memory log (the
// suite's own Source, so only the store is under test) and writes its effects on batch.tx().
//
// - opening: existing state only when asked (nothing created), tables on first use otherwise;
// - the handler's effects, the inbox rows and the checkpoint commit in one transaction: a crash
//   before the commit leaves none of them, the replay handles every message once, and a message
//   delivered twice is skipped by its id;
// - what operators see: groups with their log, position and dead letters; a group bound to its
//   log; two store objects on one database share it all;
// - consumer dead letters: parked with their error, attempts, key, position and payload; retry
//   (by row id or event id, or all) hands them to the next run, discard removes them; ids that
//   are neither are refused before anything changes;
// - operators move a group (seek) and delete it: a running consumer of the group notices at its
//   next commit (that batch rolls back; after a seek it reads on from the new position, after a
//   delete it stops), the inbox stays unless asked, and checkpoint tables of an earlier version
//   (without the generation column) are brought up to date.

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "case_available.h"
#include "checkpoint_cases.h"
#include "consume/checkpoint_store.h"
#include "consume/sql.h"
#include "outpost/consumer.h"
#include "outpost/error.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
using consume::SqlTx;

// A log in memory: position "N" is just after the N-th message.
class VectorSource : public Source {
 public:
  VectorSource(std::string name, std::vector<Message> log) : url_("vector:" + name) {
    for (std::size_t i = 0; i < log.size(); ++i) log[i].position = std::to_string(i + 1);
    log_ = std::move(log);
  }
  std::string_view name() const override { return "vector"; }
  std::string url() const override { return url_; }
  void seek(const std::string& position) override {
    next_ = position.empty() ? 0 : std::stoul(position);
  }
  std::vector<Message> read(std::size_t max, Duration) override {
    if (auto hook = std::exchange(on_read, nullptr)) hook();
    std::vector<Message> out;
    while (next_ < log_.size() && out.size() < max) out.push_back(log_[next_++]);
    return out;
  }
  std::optional<std::int64_t> lag(const std::string& position) override {
    return static_cast<std::int64_t>(log_.size()) -
           static_cast<std::int64_t>(position.empty() ? 0 : std::stoul(position));
  }
  std::function<void()> on_read;  // runs once, at the start of the next read

 private:
  std::string url_;
  std::vector<Message> log_;
  std::size_t next_ = 0;
};

Message message(const std::string& key, const std::string& payload) {
  Message m;
  m.event.id = EventId::generate();
  m.event.type = "conf";
  m.event.key = key;
  m.event.payload = payload;
  return m;
}

class CheckpointConformance : public ::testing::TestWithParam<CheckpointCase> {
 protected:
  void SetUp() override {
    skip_unless_available(GetParam().name, GetParam().unavailable_reason());
    if (IsSkipped() || HasFatalFailure()) return;
    fixture_ = GetParam().make();
    // The effects table lives in the checkpoint store's database (the prefix keeps it apart).
    effects_ = "conf_effects";
    auto p = fixture_.url.find("prefix=");
    if (p != std::string::npos) effects_ = fixture_.url.substr(p + 7) + "_effects";
  }
  void TearDown() override {
    if (fixture_.cleanup) fixture_.cleanup();
  }

  ConsumerOptions options(const std::string& group = "g") {
    ConsumerOptions o;
    o.group = group;
    o.batch_size = 4;
    o.max_attempts = 1;
    o.backoff_base = 1ms;
    o.backoff_max = 2ms;
    o.poll = 1ms;
    return o;
  }

  // One effect row per handled message; payload "bad" fails the message.
  ConsumerHandler recorder() {
    return [this](ConsumerBatch& b) {
      SqlTx tx(b.tx());
      EXPECT_EQ(b.tx().kind(), kind_);
      tx.exec("CREATE TABLE IF NOT EXISTS " + effects_ + " (event_id TEXT, payload TEXT)");
      for (std::size_t i = 0; i < b.size(); ++i) {
        if (b[i].event.payload == "bad") {
          b.fail(i, "payload is bad");
          continue;
        }
        tx.exec("INSERT INTO " + effects_ + " VALUES ($1, $2)",
                {b[i].event.id.str(), b[i].event.payload});
      }
    };
  }

  // Runs `consumer` until a read brings nothing new.
  static void drain(Consumer& consumer, const ConsumerHandler& handler) {
    for (int i = 0; i < 1000 && consumer.run_once(handler) > 0; ++i) {
    }
  }

  // event id -> effects, read in a transaction of the store (the table is created if missing).
  std::map<std::string, int> effects(CheckpointStore& store) {
    std::map<std::string, int> out;
    store.transaction([&](TxHandle h) {
      SqlTx tx(h);
      tx.exec("CREATE TABLE IF NOT EXISTS " + effects_ + " (event_id TEXT, payload TEXT)");
      for (auto& r : tx.query("SELECT event_id FROM " + effects_)) ++out[*r[0]];
    });
    return out;
  }

  std::unique_ptr<CheckpointStore> open(CheckpointOpen mode = CheckpointOpen::create) {
    auto store = open_checkpoint_store(fixture_.url, mode);
    kind_ = store->kind();
    return store;
  }

  CheckpointFixture fixture_;
  std::string effects_;
  TxHandle::Kind kind_ = TxHandle::Kind::none;
};

TEST_P(CheckpointConformance, ExistingStateOnlyWhenAskedAndTablesOnFirstUseOtherwise) {
  try {
    open(CheckpointOpen::existing);
    FAIL() << "opened consumer state that is not there";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_NE(std::string(e.what()).find("there is no consumer state at"), std::string::npos)
        << e.what();
  }
  // Nothing was created by that: still nothing there.
  EXPECT_THROW(open(CheckpointOpen::existing), Error);
  auto store = open();
  EXPECT_TRUE(kind_ == TxHandle::Kind::sqlite || kind_ == TxHandle::Kind::postgres);
  EXPECT_TRUE(store->groups().empty());
  EXPECT_FALSE(store->group("g"));
  EXPECT_TRUE(store->dead("g", 10).empty());
  auto again = open(CheckpointOpen::existing);
  EXPECT_TRUE(again->groups().empty());
}

TEST_P(CheckpointConformance, EffectsInboxAndCheckpointCommitTogetherAndOnlyOnce) {
  std::vector<Message> log;
  for (int i = 0; i < 10; ++i) log.push_back(message("k" + std::to_string(i % 3), "p"));
  log.push_back(log[2]);  // delivered twice: skipped by its id
  VectorSource source("once", log);
  auto store = open();
  auto o = options();
  int commits = 0;
  o.before_commit = [&] {
    if (++commits == 2) throw std::runtime_error("crash before the second commit");
  };
  {
    Consumer crashing(source, *store, o);
    EXPECT_THROW(drain(crashing, recorder()), std::runtime_error);
  }
  // The first batch committed, the second left nothing: no effect, no checkpoint past it.
  auto first = effects(*store);
  EXPECT_EQ(first.size(), 4u);
  ASSERT_TRUE(store->group("g"));
  EXPECT_EQ(store->group("g")->position, "4");

  Consumer consumer(source, *store, options());
  drain(consumer, recorder());
  auto all = effects(*store);
  EXPECT_EQ(all.size(), 10u);
  for (const auto& [id, n] : all) EXPECT_EQ(n, 1) << id;
  auto c = consumer.counters();
  EXPECT_EQ(c.handled, 6u);
  EXPECT_EQ(c.duplicates, 1u);
  EXPECT_EQ(store->group("g")->position, "11");
}

TEST_P(CheckpointConformance, GroupsShowTheirLogPositionAndDeadLettersAndAreBoundToTheirLog) {
  VectorSource a("log-a", {message("k", "p"), message("k", "bad"), message("j", "p")});
  VectorSource b("log-b", {message("k", "p")});
  auto store = open();
  Consumer first(a, *store, options("first"));
  drain(first, recorder());
  Consumer second(b, *store, options("second"));
  drain(second, recorder());
  auto groups = store->groups();
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].group, "first");
  EXPECT_EQ(groups[0].source, "vector:log-a");
  EXPECT_EQ(groups[0].position, "3");
  EXPECT_EQ(groups[0].dead, 1);
  EXPECT_EQ(groups[1].group, "second");
  EXPECT_EQ(groups[1].dead, 0);
  EXPECT_LE(groups[1].updated_at, outpost::now());

  // Another log under a group's name is refused, not read from the other log's position.
  VectorSource other("log-c", {message("k", "p")});
  Consumer wrong(other, *store, options("first"));
  EXPECT_THROW(wrong.run_once(recorder()), ConfigError);
}

TEST_P(CheckpointConformance, TwoStoreObjectsOnOneDatabaseShareCheckpointsInboxAndDeadLetters) {
  std::vector<Message> log{message("k", "p"), message("k", "bad"), message("j", "p"),
                           message("j", "p")};
  auto one = open();
  auto two = open();
  VectorSource first_half("shared", {log[0], log[1]});
  Consumer c1(first_half, *one, options());
  drain(c1, recorder());
  ASSERT_TRUE(two->group("g"));
  EXPECT_EQ(two->group("g")->position, "2");
  ASSERT_EQ(two->dead("g", 10).size(), 1u);
  // The other object resumes after what the first committed and skips a redelivered id.
  VectorSource whole("shared", {log[0], log[1], log[2], log[3], log[0]});
  Consumer c2(whole, *two, options());
  drain(c2, recorder());
  EXPECT_EQ(c2.counters().read, 3u);
  EXPECT_EQ(c2.counters().duplicates, 1u);
  EXPECT_EQ(effects(*one).size(), 3u);
}

TEST_P(CheckpointConformance, DeadLettersAreListedRetriedAndDiscarded) {
  std::vector<Message> log{message("a", "bad"), message("b", "bad"), message("c", "bad"),
                           message("d", "p")};
  log[2].event.id = EventId{};  // a message without id is parked too, and listed without one
  VectorSource source("dead", log);
  auto store = open();
  auto o = options();
  o.ordered = false;
  Consumer consumer(source, *store, o);
  drain(consumer, recorder());
  auto dead = store->dead("g", 10);
  ASSERT_EQ(dead.size(), 3u);
  EXPECT_EQ(dead[0].group, "g");
  EXPECT_EQ(dead[0].event_id, log[0].event.id.str());
  EXPECT_EQ(dead[0].key, "a");
  EXPECT_EQ(dead[0].position, "1");
  EXPECT_EQ(dead[0].attempts, 1);
  EXPECT_EQ(dead[0].error, "payload is bad");
  // The message as read; a message without raw text is kept as its event's JSON (docs/cli.md,
  // "The JSON encoding").
  EXPECT_NE(dead[0].payload.find(log[0].event.id.str()), std::string::npos) << dead[0].payload;
  EXPECT_EQ(dead[0].state, "dead");
  EXPECT_LE(dead[0].dead_at, outpost::now());
  EXPECT_EQ(dead[2].event_id, "");
  EXPECT_LT(dead[0].id, dead[1].id);
  EXPECT_EQ(store->dead("g", 2).size(), 2u);
  EXPECT_TRUE(store->dead("other", 10).empty());

  // Ids that are neither a row id nor an event id change nothing.
  std::vector<std::string> bad{std::to_string(dead[0].id), "not-an-id"};
  EXPECT_THROW(store->retry("g", bad), ConfigError);
  EXPECT_THROW(store->discard("g", bad), ConfigError);
  EXPECT_EQ(store->dead("g", 10).size(), 3u);

  // Retry by event id (any case), discard by row id; the other group is untouched.
  std::string upper = log[0].event.id.str();
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  std::vector<std::string> by_event{upper};
  EXPECT_EQ(store->retry("g", by_event), 1u);
  EXPECT_EQ(store->retry("g", by_event), 0u) << "already waiting for its retry";
  EXPECT_EQ(store->retry("other", by_event), 0u);
  std::vector<std::string> by_row{std::to_string(dead[1].id)};
  EXPECT_EQ(store->discard("g", by_row), 1u);
  dead = store->dead("g", 10);
  ASSERT_EQ(dead.size(), 2u);
  EXPECT_EQ(dead[0].state, "retry");
  EXPECT_EQ(dead[0].attempts, 0);
  EXPECT_EQ(store->group("g")->dead, 2);

  // The next run hands the retried one to the handler again (it passes now) before reading on.
  Consumer again(source, *store, options());
  drain(again, [&](ConsumerBatch& b) {
    SqlTx tx(b.tx());
    tx.exec("CREATE TABLE IF NOT EXISTS " + effects_ + " (event_id TEXT, payload TEXT)");
    for (std::size_t i = 0; i < b.size(); ++i)
      tx.exec("INSERT INTO " + effects_ + " VALUES ($1, $2)",
              {b[i].event.id.str(), b[i].event.payload});
  });
  EXPECT_EQ(again.counters().retried, 1u);
  EXPECT_EQ(effects(*store).count(log[0].event.id.str()), 1u);
  dead = store->dead("g", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].key, "c");

  EXPECT_EQ(store->retry_all("g"), 1u);
  EXPECT_EQ(store->discard_all("g"), 1u);
  EXPECT_TRUE(store->dead("g", 10).empty());
  EXPECT_EQ(store->discard_all("g"), 0u);
}

TEST_P(CheckpointConformance, SeekMovesAGroupAndARunningConsumerReadsOnFromThere) {
  std::vector<Message> log;
  for (int i = 0; i < 6; ++i) log.push_back(message("k" + std::to_string(i), "p"));
  VectorSource source("seek", log);
  auto store = open();
  auto o = options();
  o.batch_size = 2;
  std::vector<std::string> notices;
  o.on_notice = [&](const std::string& m, bool) { notices.push_back(m); };
  Consumer consumer(source, *store, o);
  ASSERT_EQ(consumer.run_once(recorder()), 2u);
  auto operator_store = open(CheckpointOpen::existing);  // as `outpost consumers` opens it
  ASSERT_EQ(store->group("g")->position, "2");

  // No such group: nothing written, no group made.
  EXPECT_FALSE(operator_store->seek("nope", "1"));
  EXPECT_FALSE(operator_store->group("nope"));
  // Moved while the running consumer reads 3 and 4 from its own position: its commit finds the
  // group moved, the batch (effects, inbox rows, checkpoint) rolls back, it reads on from 5.
  source.on_read = [&] {
    EXPECT_EQ(operator_store->seek("g", "5"), std::optional<std::string>("2"));
  };
  EXPECT_EQ(consumer.run_once(recorder()), 2u);
  EXPECT_EQ(store->group("g")->position, "5");
  EXPECT_EQ(effects(*store).size(), 2u);
  ASSERT_FALSE(notices.empty());
  EXPECT_NE(notices.back().find("moved by an operator"), std::string::npos) << notices.back();
  drain(consumer, recorder());
  EXPECT_EQ(store->group("g")->position, "6");
  auto seen = effects(*store);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen.count(log[5].event.id.str()), 1u);
  EXPECT_EQ(seen.count(log[2].event.id.str()), 0u);

  // Moved while idle (at the end of its log): noticed before the next read.
  // Back to the beginning: what the group handled stays in its inbox and is skipped...
  EXPECT_EQ(operator_store->seek("g", ""), std::optional<std::string>("6"));
  drain(consumer, recorder());
  seen = effects(*store);
  EXPECT_EQ(seen.size(), 6u);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  // ...unless the inbox is emptied too: then every message is handled again.
  EXPECT_EQ(operator_store->seek("g", "", true), std::optional<std::string>("6"));
  drain(consumer, recorder());
  seen = effects(*store);
  for (const auto& [id, n] : seen) EXPECT_EQ(n, 2) << id;
  EXPECT_EQ(store->group("g")->position, "6");
}

TEST_P(CheckpointConformance, DeleteRemovesAGroupsStateAndARunningConsumerStops) {
  std::vector<Message> log{message("a", "p"), message("b", "bad"), message("c", "p"),
                           message("d", "p")};
  VectorSource source("delete", log);
  auto store = open();
  auto o = options();
  o.batch_size = 2;
  o.ordered = false;
  Consumer consumer(source, *store, o);
  ASSERT_EQ(consumer.run_once(recorder()), 2u);
  auto operator_store = open(CheckpointOpen::existing);
  VectorSource other("other", log);
  Consumer bystander(other, *store, options("h"));
  drain(bystander, recorder());

  EXPECT_FALSE(operator_store->delete_group("nope"));
  auto d = operator_store->delete_group("g");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->source, "vector:delete");
  EXPECT_EQ(d->position, "2");
  EXPECT_EQ(d->dead, 1);
  EXPECT_EQ(d->inbox, 2);  // both ids: a parked message's id stays in the inbox
  EXPECT_FALSE(operator_store->group("g"));
  EXPECT_TRUE(operator_store->dead("g", 10).empty());
  EXPECT_FALSE(operator_store->delete_group("g"));
  ASSERT_TRUE(operator_store->group("h")) << "other groups are untouched";
  EXPECT_EQ(operator_store->group("h")->dead, 1);

  // The running consumer stops at its next commit, which rolls back; the group stays deleted.
  try {
    consumer.run_once(recorder());
    ADD_FAILURE() << "the consumer of a deleted group read on";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found) << e.what();
    EXPECT_FALSE(e.retryable());
  }
  EXPECT_FALSE(store->group("g"));
  // A consumer started later begins the group afresh: everything is handled again.
  Consumer fresh(source, *store, o);
  drain(fresh, recorder());
  EXPECT_EQ(store->group("g")->position, "4");
  EXPECT_EQ(effects(*store)[log[0].event.id.str()], 3);  // g twice, h once
}

TEST_P(CheckpointConformance, CheckpointTablesOfAnEarlierVersionCanBeMoved) {
  {
    auto old = open();
    old->transaction([&](TxHandle h) {
      SqlTx tx(h);
      tx.exec("ALTER TABLE " + old->prefix() + "_checkpoints DROP COLUMN gen");
      tx.exec("INSERT INTO " + old->prefix() +
              "_checkpoints (grp, source, position, updated_at) VALUES ('g', 'vector:old', '3', "
              "0)");
    });
  }
  auto store = open(CheckpointOpen::existing);
  EXPECT_EQ(store->seek("g", "1"), std::optional<std::string>("3"));
  VectorSource source("old", {message("a", "p"), message("b", "p"), message("c", "p")});
  auto consumers = open();
  Consumer consumer(source, *consumers, options());
  drain(consumer, recorder());
  EXPECT_EQ(effects(*consumers).size(), 2u);
  EXPECT_EQ(consumers->group("g")->position, "3");
}

TEST_P(CheckpointConformance, ATransactionCommitsWhatItWroteOrNothingWhenItThrows) {
  auto store = open();
  store->transaction([&](TxHandle h) {
    EXPECT_EQ(h.kind(), kind_);
    SqlTx(h).exec("CREATE TABLE " + effects_ + " (event_id TEXT, payload TEXT)");
    SqlTx(h).exec("INSERT INTO " + effects_ + " VALUES ('kept', '')");
  });
  EXPECT_THROW(store->transaction([&](TxHandle h) {
    SqlTx(h).exec("INSERT INTO " + effects_ + " VALUES ('undone', '')");
    throw std::runtime_error("the caller's failure");
  }),
               std::runtime_error);
  auto rows = effects(*store);
  EXPECT_EQ(rows, (std::map<std::string, int>{{"kept", 1}}));
  // The store is usable after a rolled-back transaction.
  EXPECT_TRUE(store->groups().empty());
}

INSTANTIATE_TEST_SUITE_P(Checkpoint, CheckpointConformance, ::testing::ValuesIn(checkpoint_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace outpost::testing
