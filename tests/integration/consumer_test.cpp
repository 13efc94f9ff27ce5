// Checkpointed consumers on the file source with SQLite and PostgreSQL checkpoint stores:
// effects exactly once across duplicates and crashes before the commit, a partially written
// last line, consumer dead letters (retry with backoff, parked with error/attempts/position/
// payload, ordered and unordered keys, operator retry and discard), unparseable lines, and a
// group bound to its log.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>

#include "consume/checkpoint_store.h"
#include "consume/sql.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/json.h"
#include "outpost/sinks/file.h"
#include "outpost/source_wrapper.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using consume::SqlTx;
using testing::unique_name;

struct Crash : std::runtime_error {
  Crash() : std::runtime_error("injected crash before commit") {}
};

class ConsumerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    name_ = unique_name("ct");
    log_ = testing::temp_dir() + "/" + name_ + ".jsonl";
    if (GetParam() == "sqlite") {
      store_url_ = "sqlite:" + testing::temp_dir() + "/" + name_ + ".db?prefix=" + name_;
    } else {
      auto url = testing::env("OUTPOST_TEST_PG_URL");
      if (!url) {
        if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_PG_URL not set";
        GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";
      }
      store_url_ = *url + "?prefix=" + name_;
    }
    store_ = open_checkpoint_store(store_url_);
  }
  void TearDown() override {
    if (!store_) return;
    try {
      store_->transaction([&](TxHandle h) {
        SqlTx tx(h);
        for (const char* t : {"_effects", "_checkpoints", "_dead", "_inbox"})
          tx.exec(std::string("DROP TABLE IF EXISTS ") + name_ + t);
      });
    } catch (...) {
    }
  }

  // Appends events to the log through the real file sink.
  void append(const std::vector<Event>& events) {
    auto sink = open_file_sink("file:" + log_);
    std::vector<StoredEvent> stored;
    for (const auto& e : events) {
      StoredEvent s;
      static_cast<Event&>(s) = e;
      stored.push_back(s);
    }
    for (auto& r : sink->deliver(stored)) ASSERT_TRUE(r.ok()) << r.error;
  }
  void append_raw(const std::string& text) {
    std::ofstream out(log_, std::ios::app | std::ios::binary);
    out << text;
  }

  ConsumerOptions options() {
    ConsumerOptions o;
    o.group = "g1";
    o.batch_size = 7;
    o.max_attempts = 3;
    o.backoff_base = 1ms;
    o.backoff_max = 5ms;
    o.poll = 20ms;
    o.until_idle = 200ms;
    return o;
  }

  // The handler under test: one effect row per event; payload {"fail":true} fails it.
  ConsumerHandler recorder(std::set<std::string>* failing_keys = nullptr) {
    return [this, failing_keys](ConsumerBatch& b) {
      SqlTx tx(b.tx());
      tx.exec("CREATE TABLE IF NOT EXISTS " + name_ +
              "_effects (event_id TEXT, k TEXT, payload TEXT)");
      for (std::size_t i = 0; i < b.size(); ++i) {
        const auto& e = b[i].event;
        if (failing_keys && failing_keys->count(e.key)) {
          b.fail(i, "key " + e.key + " is failing");
          continue;
        }
        tx.exec("INSERT INTO " + name_ + "_effects VALUES ($1, $2, $3)",
                {e.id.str(), e.key, e.payload});
      }
    };
  }

  // event id -> number of effects, and payloads per key in effect order.
  std::map<std::string, int> effects() {
    std::map<std::string, int> out;
    store_->transaction([&](TxHandle h) {
      SqlTx tx(h);
      tx.exec("CREATE TABLE IF NOT EXISTS " + name_ +
              "_effects (event_id TEXT, k TEXT, payload TEXT)");
      for (auto& r : tx.query("SELECT event_id FROM " + name_ + "_effects")) ++out[*r[0]];
    });
    return out;
  }

  void run(ConsumerOptions o, const ConsumerHandler& h) {
    auto source = open_source("file:" + log_);
    Consumer c(*source, *store_, o);
    c.run(h);
    last_ = c.counters();
  }

  std::vector<Event> make(int n, const std::string& key_prefix = "k", int keys = 3) {
    std::vector<Event> out;
    for (int i = 0; i < n; ++i)
      out.push_back(Event::make("ride", "{\"n\":" + std::to_string(i) + "}",
                                key_prefix + std::to_string(i % keys)));
    return out;
  }

  std::string name_, log_, store_url_;
  std::unique_ptr<CheckpointStore> store_;
  ConsumerCounters last_;
};

TEST_P(ConsumerTest, EveryEventOnceAcrossDuplicatesAndACrashBeforeCommit) {
  auto events = make(40);
  append(events);
  append({events[3], events[4]});  // a double send
  append(make(5));
  // First run crashes before its third commit: its effects and checkpoint roll back together.
  int commits = 0;
  auto o = options();
  o.before_commit = [&] {
    if (++commits == 3) throw Crash();
  };
  EXPECT_THROW(run(o, recorder()), Crash);
  auto cp = store_->group("g1");
  ASSERT_TRUE(cp);
  EXPECT_EQ(cp->position.empty(), false);
  run(options(), recorder());
  auto fx = effects();
  EXPECT_EQ(fx.size(), 45u);
  for (auto& [id, n] : fx) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(last_.duplicates, 2u);
  // Caught up: nothing more to read, lag 0.
  auto source = open_source("file:" + log_);
  EXPECT_EQ(source->lag(store_->group("g1")->position), 0);
  EXPECT_EQ(source->lag(""), 47);
  run(options(), recorder());
  EXPECT_EQ(last_.read, 0u);
}

// A source that checks what the Consumer promises a source that can read ahead: never two
// calls at once, committed() positions in order; and records where reads ran.
class CheckedSource final : public SourceWrapper {
 public:
  CheckedSource(std::unique_ptr<Source> inner, bool ahead)
      : SourceWrapper(std::shared_ptr<Source>(std::move(inner))), ahead_(ahead) {}
  void seek(const std::string& position) override {
    Enter e(*this);
    target().seek(position);
  }
  std::vector<Message> read(std::size_t max, Duration wait) override {
    Enter e(*this);
    if (std::this_thread::get_id() != runner_) ++reads_elsewhere;
    std::this_thread::sleep_for(2ms);  // a window in which an overlapping call would show
    return target().read(max, wait);
  }
  void committed(const std::string& group, const std::string& position) override {
    Enter e(*this);
    committed_positions.push_back(position);
    target().committed(group, position);
  }
  bool can_read_ahead() const override { return ahead_; }

  std::thread::id runner_ = std::this_thread::get_id();  // the thread that calls Consumer::run
  std::atomic<int> overlaps{0}, reads_elsewhere{0};
  std::vector<std::string> committed_positions;  // serialized by the consumer (the point tested)

 private:
  struct Enter {
    explicit Enter(CheckedSource& s) : s(s) {
      if (s.in_use_.fetch_add(1) != 0) ++s.overlaps;
    }
    ~Enter() { s.in_use_.fetch_sub(1); }
    CheckedSource& s;
  };
  bool ahead_;
  std::atomic<int> in_use_{0};
};

// Reading ahead (file source) and not (the same source saying it cannot): the source is never
// used by two threads at once, the last committed() is the checkpoint, and the batch read ahead
// when a commit throws out of run() is read again by the same Consumer (nothing skipped).
TEST_P(ConsumerTest, ReadAheadKeepsSourceCallsApartAndLosesNothingOnStopOrThrow) {
  for (bool ahead : {true, false}) {
    SCOPED_TRACE(ahead ? "read ahead" : "sequential");
    TearDown();
    store_ = open_checkpoint_store(store_url_);
    std::filesystem::remove(log_);
    append(make(100, "k", 5));
    CheckedSource source(open_source("file:" + log_), ahead);
    auto o = options();
    int commits = 0;
    bool crash = false;
    o.before_commit = [&] {
      if (crash && ++commits == 2) throw Crash();
    };
    auto record = recorder();
    std::size_t seen = 0;
    // 1. stop() after 30 messages: a batch is read ahead by then; the checkpoint is the last
    // committed() position.
    {
      Consumer c(source, *store_, o);
      c.run([&](ConsumerBatch& b) {
        record(b);
        if ((seen += b.size()) >= 30) c.stop();
      });
    }
    EXPECT_EQ(effects().size(), 35u);  // five batches of 7
    EXPECT_EQ(source.committed_positions.back(), store_->group("g1")->position);
    // 2. A commit throws out of run() (the batch in hand rolled back, the next one read ahead);
    // 3. the same Consumer goes on: every event once, none skipped, none handled twice.
    Consumer c(source, *store_, o);
    crash = true;
    EXPECT_THROW(c.run(record), Crash);
    EXPECT_EQ(effects().size(), 42u);
    crash = false;
    c.run(record);
    auto fx = effects();
    EXPECT_EQ(fx.size(), 100u);
    for (auto& [id, n] : fx) EXPECT_EQ(n, 1) << id;
    EXPECT_EQ(c.counters().duplicates, 0u);
    EXPECT_EQ(source.overlaps.load(), 0);
    if (ahead)
      EXPECT_GT(source.reads_elsewhere.load(), 0);
    else
      EXPECT_EQ(source.reads_elsewhere.load(), 0);
    ASSERT_FALSE(source.committed_positions.empty());
    // Byte offsets (before the file's identity, which is the same throughout) in order.
    EXPECT_TRUE(std::is_sorted(
        source.committed_positions.begin(), source.committed_positions.end(),
        [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); }));
    EXPECT_EQ(source.committed_positions.back(), store_->group("g1")->position);
  }
}

TEST_P(ConsumerTest, PartiallyWrittenLastLineWaitsForItsNewline) {
  auto events = make(3);
  std::string line = to_json(StoredEvent{events[2], 0, 0});
  append({events[0], events[1]});
  append_raw(line.substr(0, 20));
  run(options(), recorder());
  EXPECT_EQ(effects().size(), 2u);
  append_raw(line.substr(20) + "\n");
  run(options(), recorder());
  EXPECT_EQ(effects().size(), 3u);
  EXPECT_EQ(store_->dead("g1", 10).size(), 0u);
}

TEST_P(ConsumerTest, PoisonMessagesAreParkedOrderedKeysBehindThemThenRetriedAndDelivered) {
  std::vector<Event> events;
  for (int i = 0; i < 6; ++i)
    events.push_back(
        Event::make("ride", "{\"n\":" + std::to_string(i) + "}", i % 2 ? "bad" : "good"));
  append(events);
  append_raw("this is not json\n");
  std::set<std::string> failing{"bad"};
  run(options(), recorder(&failing));
  auto fx = effects();
  EXPECT_EQ(fx.size(), 3u) << "the good key flowed on";
  auto dead = store_->dead("g1", 100);
  ASSERT_EQ(dead.size(), 4u);
  // The unparseable line is parked at once; the poison message after its attempts; the later
  // messages of its key behind it.
  EXPECT_NE(dead[0].error.find("not an outpost event"), std::string::npos) << dead[0].error;
  EXPECT_EQ(dead[0].event_id, "");
  EXPECT_EQ(dead[1].event_id, events[1].id.str());
  EXPECT_EQ(dead[1].attempts, 3);
  EXPECT_NE(dead[1].error.find("key bad is failing"), std::string::npos) << dead[1].error;
  EXPECT_NE(dead[1].payload.find(events[1].id.str()), std::string::npos);
  EXPECT_FALSE(dead[1].position.empty());
  EXPECT_EQ(dead[2].event_id, events[3].id.str());
  EXPECT_NE(dead[2].error.find("held behind"), std::string::npos) << dead[2].error;
  EXPECT_EQ(dead[3].event_id, events[5].id.str());
  EXPECT_EQ(store_->group("g1")->dead, 4);

  // A duplicate of a parked message is skipped, not handled around it.
  append({events[1]});
  failing.clear();
  run(options(), recorder(&failing));
  EXPECT_EQ(effects().size(), 3u);

  // The operator discards the garbage line and retries the rest: delivered in key order.
  std::vector<std::string> garbage{std::to_string(dead[0].id)};
  EXPECT_EQ(store_->discard("g1", garbage), 1u);
  EXPECT_EQ(store_->retry_all("g1"), 3u);
  run(options(), recorder(&failing));
  fx = effects();
  EXPECT_EQ(fx.size(), 6u);
  for (auto& [id, n] : fx) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(store_->dead("g1", 100).size(), 0u);
  EXPECT_EQ(last_.retried, 3u);
  std::vector<std::string> order;
  store_->transaction([&](TxHandle h) {
    SqlTx tx(h);
    for (auto& r : tx.query("SELECT payload FROM " + name_ + "_effects WHERE k = 'bad'"))
      order.push_back(*r[0]);
  });
  EXPECT_EQ(order, (std::vector<std::string>{"{\"n\":1}", "{\"n\":3}", "{\"n\":5}"}));
}

TEST_P(ConsumerTest, UnorderedLetsLaterMessagesOfAParkedKeyFlow) {
  std::vector<Event> events{Event::make("t", "{\"fail\":1}", "k"), Event::make("t", "{}", "k"),
                            Event::make("t", "{}", "k")};
  append(events);
  auto o = options();
  o.ordered = false;
  ConsumerHandler h = [this, inner = recorder()](ConsumerBatch& b) {
    for (std::size_t i = 0; i < b.size(); ++i)
      if (b[i].event.payload == "{\"fail\":1}") b.fail(i, "poison");
    // Record the others (a handler that skips its own failures keeps the rest).
    SqlTx tx(b.tx());
    tx.exec("CREATE TABLE IF NOT EXISTS " + name_ +
            "_effects (event_id TEXT, k TEXT, payload TEXT)");
    for (std::size_t i = 0; i < b.size(); ++i)
      if (b[i].event.payload != "{\"fail\":1}")
        tx.exec("INSERT INTO " + name_ + "_effects VALUES ($1, $2, $3)",
                {b[i].event.id.str(), b[i].event.key, b[i].event.payload});
  };
  run(o, h);
  EXPECT_EQ(effects().size(), 2u);
  auto dead = store_->dead("g1", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].error, "poison");
  EXPECT_EQ(store_->discard_all("g1"), 1u);
}

TEST_P(ConsumerTest, AThrowingHandlerIsNarrowedToTheMessageThatThrows) {
  auto events = make(10, "k", 10);  // distinct keys: nothing is held behind the poison
  append(events);
  std::string poison = events[4].id.str();
  int calls = 0;
  ConsumerHandler h = [&, inner = recorder()](ConsumerBatch& b) {
    ++calls;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (b[i].event.id.str() == poison) throw std::runtime_error("boom");
    inner(b);
  };
  auto o = options();
  o.batch_size = 100;
  run(o, h);
  auto fx = effects();
  EXPECT_EQ(fx.size(), 9u);
  EXPECT_EQ(fx.count(poison), 0u);
  auto dead = store_->dead("g1", 10);
  ASSERT_GE(dead.size(), 1u);
  EXPECT_EQ(dead[0].event_id, poison);
  EXPECT_EQ(dead[0].error, "boom");
}

// A destination that is down (UnavailableError, batch.unavailable()) pauses the consumer: no
// attempt counted, nothing parked, what was handled commits, and once the destination answers
// every message is handled once, in order. Before: UnavailableError was an ordinary exception
// (an attempt), so with max_attempts 3 the messages were parked.
TEST_P(ConsumerTest, AnUnavailableDestinationPausesWithoutAttemptsOrDeadLetters) {
  append(make(20));
  int outage = 8;  // handler calls that meet the outage
  ConsumerHandler h = [&, inner = recorder()](ConsumerBatch& b) {
    if (b.size() > 0 && outage > 0) {
      if (outage-- % 2 == 0) throw UnavailableError("down", Duration{0}, "test");
      // Busy after the first message: that one is handled, the rest wait.
      for (std::size_t i = 1; i < b.size(); ++i) b.unavailable(i, "busy");
      ConsumerBatch first(b.messages().subspan(0, 1), b.tx(), b.attempt());
      inner(first);
      return;
    }
    inner(b);
  };
  auto o = options();
  o.until_idle = 1s;  // not to end the run between the outage's probes on a slow machine
  run(o, h);
  auto fx = effects();
  EXPECT_EQ(fx.size(), 20u);
  for (auto& [id, n] : fx) EXPECT_EQ(n, 1) << id;
  EXPECT_TRUE(store_->dead("g1", 10).empty());
  EXPECT_EQ(last_.failures, 0u);
  EXPECT_EQ(last_.parked, 0u);
  EXPECT_GE(last_.pauses, 1u);
  EXPECT_GT(last_.unavailable, 0u);
  EXPECT_FALSE(last_.paused);

  // Down for good: with until_idle the run ends with the outage; still nothing parked.
  append(make(3));
  auto source = open_source("file:" + log_);
  Consumer c(*source, *store_, options());
  EXPECT_THROW(c.run([](ConsumerBatch& b) {
    if (b.size() > 0) throw UnavailableError("down for good");
  }),
               UnavailableError);
  EXPECT_EQ(c.counters().failures, 0u);
  EXPECT_TRUE(store_->dead("g1", 10).empty());
}

TEST_P(ConsumerTest, AGroupIsBoundToTheLogItReads) {
  append(make(2));
  run(options(), recorder());
  std::string other = log_ + ".other";
  auto source = open_source("file:" + other);
  Consumer c(*source, *store_, options());
  EXPECT_THROW(c.run(recorder()), ConfigError);
}

INSTANTIATE_TEST_SUITE_P(Stores, ConsumerTest, ::testing::Values("sqlite", "postgres"),
                         [](const auto& info) { return info.param; });

// A store opened after another was closed may get the same connection address; it must still
// create its tables (the "tables seen" cache once keyed on the address alone).
TEST(ConsumerConfig, EachNewStoreCreatesItsTablesAlsoAtAReusedAddress) {
  std::string log = testing::temp_dir() + "/" + unique_name("reuse") + ".jsonl";
  std::ofstream(log) << to_json(StoredEvent{Event::make("t", "{}"), 0, 0}) << "\n";
  for (int i = 0; i < 6; ++i) {
    auto path = testing::temp_dir() + "/" + unique_name("reuse") + ".db";
    auto store = open_checkpoint_store("sqlite:" + path);
    auto source = open_source("file:" + log);
    ConsumerOptions o;
    o.group = "g";
    o.poll = 10ms;
    Consumer c(*source, *store, o);
    EXPECT_NO_THROW(c.run_once([](ConsumerBatch&) {})) << "store " << i;
  }
}

TEST(ConsumerConfig, BadUrlsAndOptionsNameTheProblem) {
  EXPECT_THROW(open_source("kafkaa://x/t"), ConfigError);
  EXPECT_THROW(open_source("file:"), ConfigError);
  EXPECT_THROW(open_source("file:x.jsonl?tail=1"), ConfigError);
  EXPECT_THROW(check_checkpoint_store_url("redis://x"), ConfigError);
  EXPECT_THROW(check_checkpoint_store_url("sqlite:x.db?prefix=a;b"), ConfigError);
  EXPECT_THROW(check_checkpoint_store_url("sqlite:x.db?prefx=a"), ConfigError);
  EXPECT_NO_THROW(check_checkpoint_store_url("postgresql://u:secret@h:1/db?prefix=c"));
  try {
    check_checkpoint_store_url("postgresql://u:secret@h:1/db?bogus=1");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
  }
  // The PostgreSQL connection parameters are read by the store's own parser
  // (src/stores/postgres/config.h), libpq's values checked as for the outbox (docs/postgres.md):
  // the consumer's copy of the parse took any sslmode and target_session_attrs, which failed
  // only at connect time (exit 1) or not at all.
  for (const auto& [query, named] : std::vector<std::pair<std::string, std::string>>{
           {"sslmode=bogus", "'sslmode'"},
           {"sslmode=", "'sslmode'"},
           {"target_session_attrs=x", "'target_session_attrs'"},
           {"connect_timeout=abc", "'connect_timeout'"},
           {"timeout_ms=0", "'timeout_ms'"}}) {
    try {
      check_checkpoint_store_url("postgresql://u:secret@h:1/db?prefix=c&" + query);
      ADD_FAILURE() << query << " was taken";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("secret"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(check_checkpoint_store_url(
      "postgresql://u@h:1/db?sslmode=verify-full&target_session_attrs=read-write&"
      "application_name=billing&connect_timeout=3&timeout_ms=2000&prefix=c"));
}

// A source scheme registered with the factory (how the broker sources beside their sinks add
// theirs) opens through open_source() and is listed by source_schemes(); an unknown one lists it.
std::unique_ptr<Source> open_test_log(std::string_view url) {
  return open_source("file:" + std::string(url.substr(url.find(':') + 1)));
}

TEST(SourceRegistry, ARegisteredSchemeOpensThroughOpenSourceAndIsListed) {
  auto path = (std::filesystem::temp_directory_path() / unique_name("registry_log")).string();
  std::ofstream(path) << "";
  EXPECT_THROW(open_source("test-log:" + path), ConfigError);
  register_source_scheme("Test-Log", &open_test_log);
  auto source = open_source("test-log:" + path);
  EXPECT_EQ(source->name(), "file");
  auto schemes = source_schemes();
  EXPECT_EQ(schemes.front(), "file");
  EXPECT_NE(std::find(schemes.begin(), schemes.end(), "test-log"), schemes.end());
  try {
    open_source("gopher://h/x");
    ADD_FAILURE() << "an unknown scheme opened";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("test-log"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace outpost
