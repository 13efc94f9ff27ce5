// Consumers under process faults, per source (file, Redis Streams, Kafka mock, NATS JetStream):
// the consumer process (outpost_consume_worker: one effect row per message in SQLite, on the
// batch's transaction) is SIGKILLed at random moments 10 times while it consumes 20,000
// messages, then a final run: every message's effect exactly once and, per key, in log order.
// Kafka also: a second process joins the group mid-run and the first leaves (two rebalances):
// nothing lost, nothing applied twice. Waits are on conditions, with generous bounds.
// OUTPOST_CRASH_SEED=N reproduces a run.

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "cli_process.h"
#include "outpost/json.h"
#include "outpost/sinks/kafka.h"
#include "outpost/sinks/nats.h"
#include "outpost/sinks/redis_stream.h"
#include "store_cases.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kKeys = 50;

template <typename F>
bool wait_until(F&& condition, std::chrono::milliseconds bound) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

struct Effect {
  std::string id, key;
  long long n = 0, pid = 0;
};

// The effects table in commit order (empty before the worker created it).
std::vector<Effect> effects(const std::string& db_path) {
  std::vector<Effect> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_busy_timeout(db, 30'000);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT event_id, key, n, pid FROM effects ORDER BY rowid", -1, &st,
                         nullptr) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW)
      out.push_back({reinterpret_cast<const char*>(sqlite3_column_text(st, 0)),
                     reinterpret_cast<const char*>(sqlite3_column_text(st, 1)),
                     sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3)});
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return out;
}

// A number the query returns (0 before the worker created the table).
long long scalar(const std::string& db_path, const std::string& sql) {
  long long v = 0;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 30'000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
      v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return v;
}

std::size_t effect_count(const std::string& db_path) {
  return static_cast<std::size_t>(scalar(db_path, "SELECT count(*) FROM effects"));
}

// Every sent message's effect exactly once; per key, effects in send order (n increasing).
void expect_exactly_once_in_key_order(const std::vector<Effect>& got,
                                      const std::vector<std::string>& sent) {
  std::map<std::string, int> count;
  for (auto& e : got) ++count[e.id];
  std::size_t missing = 0, twice = 0;
  for (auto& id : sent)
    if (!count.count(id)) ++missing;
  for (auto& [id, c] : count) twice += c > 1;
  EXPECT_EQ(missing, 0u) << "messages without an effect";
  EXPECT_EQ(twice, 0u) << "messages whose effect happened more than once";
  EXPECT_EQ(got.size(), sent.size());
  std::map<std::string, long long> last;
  std::size_t out_of_order = 0;
  for (auto& e : got) {
    auto it = last.find(e.key);
    if (it != last.end() && e.n <= it->second) ++out_of_order;
    last[e.key] = e.n;
  }
  EXPECT_EQ(out_of_order, 0u) << "effects of a key out of log order";
}

class ConsumeKill : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& log = GetParam();
    const std::string name = unique_name("kill");
    auto need = [&](const char* var) -> std::string {
      if (auto v = env(var)) return *v;
      if (require_all_endpoints()) ADD_FAILURE() << var << " not set";
      return "";
    };
    if (log == "file") {
      url_ = "file:" + (dir_ / (name + ".jsonl"));
    } else if (log == "redis_stream") {
      auto r = need("OUTPOST_TEST_REDIS_URL");
      if (r.empty()) GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
      url_ = "redis-stream://" + r.substr(8, r.find('/', 8) - 8) + "/" + name;
    } else if (log == "kafka") {
      auto b = need("OUTPOST_TEST_KAFKA_BOOTSTRAP");
      if (b.empty()) GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
      sink_url_ = "kafka://" + b + "/" + name;
      // One process per group (assign=manual): a restarted process reads on at once instead of
      // waiting out the killed member's session timeout.
      url_ = sink_url_ + "?group=" + name + "&assign=manual";
    } else if (log == "nats") {
      auto n = need("OUTPOST_TEST_NATS_URL");
      if (n.empty()) GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
      url_ = n + "/" + name + "?stream=" + name + "&create=1";
    }
    if (sink_url_.empty()) sink_url_ = url_;
    db_ = dir_ / "cp.db";
  }

  // Appends `n` messages (keys k0..k49, payload {"n":N} with N counting on) to the log.
  void send(int n) {
    std::vector<StoredEvent> batch;
    for (int i = 0; i < n; ++i) {
      StoredEvent e;
      static_cast<Event&>(e) = Event::make("ride", "{\"n\":" + std::to_string(next_n_) + "}",
                                           "k" + std::to_string(next_n_ % kKeys));
      ++next_n_;
      sent_.push_back(e.id.str());
      batch.push_back(std::move(e));
    }
    if (GetParam() == "file") {
      std::ofstream out(url_.substr(5), std::ios::app);
      for (auto& e : batch) out << to_json(e) << "\n";
      return;
    }
    if (!sink_) {
      if (GetParam() == "redis_stream") sink_ = open_redis_stream_sink(sink_url_);
      if (GetParam() == "kafka") sink_ = open_kafka_sink(sink_url_);
      if (GetParam() == "nats") sink_ = open_nats_sink(sink_url_);
    }
    for (std::size_t at = 0; at < batch.size(); at += 1000) {
      std::size_t k = std::min<std::size_t>(1000, batch.size() - at);
      for (auto& r : sink_->deliver(std::span<const StoredEvent>(batch.data() + at, k)))
        ASSERT_TRUE(r.ok()) << r.error;
    }
  }

  std::vector<std::string> worker_args(const std::string& group, const std::string& url = "") {
    return {url.empty() ? url_ : url, "sqlite:" + db_, group, "100"};
  }

  TempDir dir_;
  std::string url_, sink_url_, db_;
  std::unique_ptr<Sink> sink_;
  std::vector<std::string> sent_;
  long long next_n_ = 0;
};

TEST_P(ConsumeKill, SigkillAtRandomMomentsThenAFinalRunAppliesEveryEffectOnceInKeyOrder) {
  constexpr int kMessages = 20'000, kKills = 10;
  send(kMessages);
  unsigned seed = std::random_device{}();
  if (const char* s = std::getenv("OUTPOST_CRASH_SEED"))
    seed = static_cast<unsigned>(std::stoul(s));
  std::mt19937 rng(seed);
  SCOPED_TRACE("OUTPOST_CRASH_SEED=" + std::to_string(seed));
  // Kill points spread over the run: the k-th process is killed once the effects passed the
  // k-th point (and it committed something itself), after a further random 0-9 ms.
  std::vector<std::size_t> points(kKills);
  for (auto& p : points) p = 100 + rng() % (kMessages * 4 / 5);
  std::sort(points.begin(), points.end());
  const std::string log = dir_ / "worker.log";
  int kills = 0;
  for (; kills < kKills; ++kills) {
    std::size_t before = effect_count(db_);
    if (before >= static_cast<std::size_t>(kMessages)) break;
    CliProcess p(worker_args("g"), log);
    ASSERT_TRUE(wait_until(
        [&] {
          auto n = effect_count(db_);
          return n > before && n >= points[static_cast<std::size_t>(kills)];
        },
        90s))
        << read_file(log);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 10));
    p.signal(SIGKILL);
    p.wait(30s);
  }
  // When the killed processes consumed everything already, the effects are all there at once:
  // wait until the last process blocked SIGTERM, or the signal can come while it is still
  // loading (exit 143 instead of draining).
  const std::string last_log = dir_ / "last.log";
  CliProcess last(worker_args("g"), last_log);
  ASSERT_TRUE(wait_until(
      [&] { return read_file(last_log).find("signals blocked") != std::string::npos; }, 30s))
      << read_file(last_log);
  ASSERT_TRUE(wait_until([&] { return effect_count(db_) >= sent_.size(); }, 120s))
      << effect_count(db_) << " of " << sent_.size() << "\n"
      << read_file(log) << read_file(last_log);
  last.signal(SIGTERM);
  EXPECT_EQ(last.wait(60s), 0) << read_file(last_log);
  EXPECT_GT(kills, 0);
  RecordProperty("kills", kills);
  expect_exactly_once_in_key_order(effects(db_), sent_);
}

// A commit that fails with a retryable error (a store outage) in a running consumer: it backs
// off, seeks back to its checkpoint and reads the batch again, in the same process (Kafka once
// skipped it: its seek only took effect at the next assignment).
TEST_P(ConsumeKill, AFailedCommitIsReadAgainByTheSameProcess) {
  send(3000);
  const std::string log = dir_ / "worker.log";
  auto args = worker_args("g");
  args.push_back("3,4,10");
  CliProcess p(args, log);
  ASSERT_TRUE(wait_until([&] { return effect_count(db_) >= sent_.size(); }, 90s))
      << effect_count(db_) << " of " << sent_.size() << "\n"
      << read_file(log);
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(60s), 0) << read_file(log);
  EXPECT_NE(read_file(log).find("injected store outage before commit 10"), std::string::npos)
      << read_file(log);
  expect_exactly_once_in_key_order(effects(db_), sent_);
}

INSTANTIATE_TEST_SUITE_P(Logs, ConsumeKill,
                         ::testing::Values("file", "redis_stream", "kafka", "nats"),
                         [](const auto& info) { return info.param; });

// Two processes in one Kafka group (assign=group): B joins while A consumes (A's partitions are
// rebalanced to both), then A leaves (SIGTERM: B takes every partition). Messages keep coming
// throughout. The checkpoint table and the shared inbox carry each partition across: every
// effect once, per key in order.
using ConsumeRebalance = ConsumeKill;

TEST_P(ConsumeRebalance, AConsumerJoiningAndOneLeavingMidRunLoseNothing) {
  // A short session: the mock cluster's coordinator otherwise takes ~45 s (the default session
  // timeout) to finish the rebalance when B joins.
  const std::string group_url = sink_url_ + "?group=" + unique_name("rb") +
                                "&session.timeout.ms=6000&heartbeat.interval.ms=500";
  send(5'000);
  const std::string log = dir_ / "worker.log";
  CliProcess a(worker_args("g", group_url), log);
  ASSERT_TRUE(wait_until([&] { return effect_count(db_) > 0; }, 90s)) << read_file(log);
  CliProcess b(worker_args("g", group_url), log);
  auto has_effects_of = [&](pid_t pid) {
    return scalar(db_, "SELECT count(*) FROM effects WHERE pid = " + std::to_string(pid)) > 0;
  };
  // Keep the log growing until B got partitions and handled some of it.
  auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!has_effects_of(b.pid()) && std::chrono::steady_clock::now() < deadline) {
    send(20);
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(has_effects_of(b.pid())) << "B never got a partition\n" << read_file(log);
  send(1'000);
  a.signal(SIGTERM);  // leaves the group: B is assigned A's partitions
  send(1'000);
  EXPECT_EQ(a.wait(60s), 0) << read_file(log);
  ASSERT_TRUE(wait_until([&] { return effect_count(db_) >= sent_.size(); }, 120s))
      << effect_count(db_) << " of " << sent_.size() << "\n"
      << read_file(log);
  b.signal(SIGTERM);
  EXPECT_EQ(b.wait(60s), 0) << read_file(log);
  expect_exactly_once_in_key_order(effects(db_), sent_);
}

INSTANTIATE_TEST_SUITE_P(Logs, ConsumeRebalance, ::testing::Values("kafka"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace outpost::testing
