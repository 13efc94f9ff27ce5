// The unified-log demo (unified_log.h; docs/consumers.md, "The unified-log demo"): Rocket
// Rides' rides and their events, proven under faults.
//   outpost demo unified-log [--log URL] [--store URL] [--seconds N] [--double-send-rate R]
//     [--crash-rate R] [--seed N] [--json]
// An API loop writes rides and their ride.created events in one store transaction; a relay
// streams the events into the log, sending a whole batch twice with probability R (a relay that
// failed midway and retried); two consumer PROCESSES keep a running total of distance in SQL
// together with their checkpoints and inbox, and each kills itself with SIGKILL just before a
// commit with probability --crash-rate; the demo restarts them. After --seconds it stops the
// API, lets relay and consumers catch up, and compares both totals with the rides table.
// Exit 0 only when they agree. With --json one object is printed last:
//   {"rides":N,"source_total":X,"consumers":[{"name":"…","total":X,"rides":N,"crashes":N,
//    "skipped_duplicates":N}],"double_sends":N,"agree":true}
// Distances are summed in integer tenths, so "agree" is exact equality, not a float tolerance.

#include "unified_log.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "consume/sql.h"
#include "core/url.h"
#include "outpost/checkpoint_store.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/factory.h"
#include "outpost/relay.h"
#include "outpost/sink_wrapper.h"
#include "outpost/source.h"

namespace outpost::examples {
namespace {

using namespace std::chrono_literals;
using consume::SqlTx;
using SteadyClock = std::chrono::steady_clock;

constexpr int kConsumers = 2;

std::string totals_table(const std::string& run) {
  return "demo_" + run + "_totals";
}
std::string group_of(const std::string& run, const std::string& name) {
  return "demo_" + run + "_" + name;
}

// ---- the consumer process ------------------------------------------------------------------

}  // namespace

int run_unified_log_consumer(const UnifiedLogOptions& a) {
  auto source = open_source(a.log);
  auto store = open_checkpoint_store(a.checkpoint);
  const std::string totals = totals_table(a.run);
  // The demo created the table before starting us (two processes creating one PostgreSQL
  // table at once collide on its type name).
  store->transaction([&](TxHandle h) {
    SqlTx(h).exec("INSERT INTO " + totals + " VALUES ($1, 0, 0, 0) ON CONFLICT (name) DO NOTHING",
                  {a.name});
  });
  std::mt19937_64 rng(a.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  ConsumerOptions o;
  o.group = group_of(a.run, a.name);
  o.batch_size = 10;
  o.poll = 100ms;
  o.before_commit = [&] {
    // A real crash of this process between handling a batch and committing it.
    if (coin(rng) < a.crash_rate) ::kill(::getpid(), SIGKILL);
  };
  Consumer consumer(*source, *store, o);
  auto watching = a.watch_stop ? a.watch_stop([&consumer] { consumer.stop(); }) : nullptr;
  consumer.run([&](ConsumerBatch& batch) {
    std::int64_t tenths = 0, rides = 0;
    for (const auto& m : batch.messages()) {
      auto j = nlohmann::json::parse(m.event.payload, nullptr, false);
      if (j.is_discarded() || j.value("run", "") != a.run) continue;  // not this run's ride
      tenths += std::llround(j.value("distance", 0.0) * 10);
      ++rides;
    }
    SqlTx(batch.tx())
        .exec("UPDATE " + totals +
                  " SET tenths = tenths + CAST($2 AS BIGINT), rides = rides + "
                  "CAST($3 AS BIGINT), skipped = skipped + CAST($4 AS BIGINT) "
                  "WHERE name = $1",
              {a.name, std::to_string(tenths), std::to_string(rides),
               std::to_string(batch.duplicates())});
  });
  return 0;
}

namespace {

// ---- the relay's fault: whole batches sent twice ----------------------------------------------

class DoubleSendingSink final : public SinkWrapper {
 public:
  DoubleSendingSink(Sink& inner, double rate, std::uint64_t seed)
      : SinkWrapper(inner), rate_(rate), rng_(seed) {}
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    auto results = target().deliver(events);
    bool all_ok = std::all_of(results.begin(), results.end(), [](auto& r) { return r.ok(); });
    if (all_ok && !events.empty() && coin_(rng_) < rate_) {
      target().deliver(events);  // the retry of a batch whose confirmation was "lost"
      ++double_sends;
    }
    return results;
  }
  // The relay calls this one: through deliver() above, so the double sends happen.
  std::vector<DeliveryResult> deliver_bounded(std::span<const StoredEvent> events,
                                              const DeliveryControl&) override {
    return deliver(events);
  }
  std::atomic<std::int64_t> double_sends{0};

 private:
  double rate_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> coin_{0.0, 1.0};
};

// ---- the demo --------------------------------------------------------------------------------

struct Plan {
  std::string run;        // unique per run: table names, group names, payload tag
  std::string dir;        // temp dir when we made one (removed at the end)
  std::string store_url;  // outbox store
  std::string data_url;   // the same database as a checkpoint-store URL (rides, consumers)
  std::string log_url;    // as given
  std::string sink_url;   // the relay's: kafka:// without the consumer's `group`
};

// The log URL with its query parameter `name` removed.
std::string without_param(const std::string& url, const std::string& name) {
  auto q = url.find('?');
  if (q == std::string::npos) return url;
  std::string base = url.substr(0, q), kept;
  std::size_t at = q + 1;
  while (at <= url.size()) {
    auto amp = url.find('&', at);
    std::string kv = url.substr(at, amp == std::string::npos ? std::string::npos : amp - at);
    if (!kv.empty() && kv.rfind(name + "=", 0) != 0) kept += (kept.empty() ? "" : "&") + kv;
    if (amp == std::string::npos) break;
    at = amp + 1;
  }
  return kept.empty() ? base : base + "?" + kept;
}

std::string with_param(const std::string& url, const std::string& kv) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + kv;
}

Plan plan(const UnifiedLogOptions& a, std::mt19937_64& rng) {
  Plan p;
  char run[16];
  // Not from the seed: a second run with the same seed must not find the first run's tables.
  (void)rng;
  std::snprintf(run, sizeof run, "%08x", static_cast<unsigned>(std::random_device{}()));
  p.run = run;
  std::string store = a.store;
  // Every given URL is checked before anything (a temp dir, a file) is created.
  if (!store.empty()) {
    auto scheme = core::Url::parse(store).scheme();
    if (scheme != "sqlite" && scheme != "postgresql" && scheme != "postgres")
      throw ConfigError(
          "--store: the demo keeps rides and consumer totals in SQL: use sqlite:PATH "
          "or postgresql://…, not '" +
          scheme + ":'");
  }
  if (!a.log.empty()) {
    bool kafka = a.log.rfind("kafka:", 0) == 0;  // the demo names the Kafka groups itself
    open_source(kafka ? with_param(without_param(a.log, "group"), "group=check") : a.log);
  }
  if (store.empty() || a.log.empty()) {
    std::string templ = (std::filesystem::temp_directory_path() / "outpost-demo-XXXXXX").string();
    if (!::mkdtemp(templ.data())) throw Error(ErrorCode::backend, "demo", "mkdtemp failed");
    p.dir = templ;
  }
  if (store.empty()) store = "sqlite:" + p.dir + "/rides.db";
  auto u = core::Url::parse(store);
  if (u.scheme() == "sqlite") {
    p.data_url = "sqlite:" + (u.hierarchical() ? "/" : std::string()) + u.path();
  } else if (u.scheme() == "postgresql" || u.scheme() == "postgres") {
    p.data_url = store.substr(0, store.find('?'));
  } else {
    throw ConfigError(
        "--store: the demo keeps rides and consumer totals in SQL: use sqlite:PATH "
        "or postgresql://…, not '" +
        u.scheme() + ":'");
  }
  p.data_url = with_param(p.data_url, "prefix=demo_" + p.run);
  p.store_url = with_param(store, "table=demo_" + p.run + "_outbox");
  p.log_url = a.log.empty() ? "file:" + p.dir + "/log.jsonl" : a.log;
  p.sink_url = p.log_url.rfind("kafka:", 0) == 0 ? without_param(p.log_url, "group") : p.log_url;
  return p;
}

// What consumer `name` reads: on Kafka each demo consumer is its own Kafka group (both read
// every ride), so `group` is set per consumer; other logs take the URL as given.
std::string source_url(const Plan& p, const std::string& name) {
  if (p.log_url.rfind("kafka:", 0) != 0) return p.log_url;
  // One process per group: it takes every partition itself (assign=manual), so a restarted
  // consumer reads on at once instead of waiting out the killed member's session timeout.
  return with_param(with_param(p.sink_url, "group=" + group_of(p.run, name)), "assign=manual");
}

// Starts `outpost demo unified-log --role consumer ...` (this binary).
pid_t spawn_consumer(const UnifiedLogOptions& a, const Plan& p, int index, int restarts) {
  if (a.consumer_command.empty())
    throw ConfigError("the unified-log demo needs the command that starts its consumers");
  std::vector<std::string> args = a.consumer_command;
  args.insert(args.end(),
              {"--role", "consumer", "--name", "consumer" + std::to_string(index), "--log",
               source_url(p, "consumer" + std::to_string(index)), "--checkpoint", p.data_url,
               "--run", p.run, "--crash-rate", std::to_string(a.crash_rate), "--seed",
               std::to_string(a.seed * 1000 + static_cast<std::uint64_t>(index * 100 + restarts))});
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) throw Error(ErrorCode::backend, "demo", "fork failed");
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

struct ConsumerProc {
  std::string name;
  pid_t pid = -1;
  int crashes = 0;
  std::string failure;  // exited otherwise than by our SIGTERM or its own SIGKILL
};

}  // namespace

int run_unified_log_demo(UnifiedLogOptions a) {
  if (a.double_send_rate < 0 || a.double_send_rate > 1)
    throw ConfigError("--double-send-rate must be between 0 and 1");
  if (a.crash_rate < 0 || a.crash_rate >= 1) throw ConfigError("--crash-rate must be in [0, 1)");
  if (a.seed == 0) a.seed = std::random_device{}() | 1u;
  std::mt19937_64 rng(a.seed);
  Plan p = plan(a, rng);
  check_checkpoint_store_url(p.data_url);
  open_source(source_url(p, "consumer0"));  // the log URL is checked before anything is opened
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{p.dir};

  auto store = open_store(p.store_url);
  auto sink = open_sink(p.sink_url);
  DoubleSendingSink faulty(*sink, a.double_send_rate, rng());
  auto data = open_checkpoint_store(p.data_url);  // rides table and, later, the totals
  const std::string rides = "demo_" + p.run + "_rides";
  data->transaction([&](TxHandle h) {
    SqlTx tx(h);
    tx.script("CREATE TABLE IF NOT EXISTS " + rides + " (id " + tx.serial_key() +
              ", tenths BIGINT NOT NULL)");
    tx.script("CREATE TABLE IF NOT EXISTS " + totals_table(p.run) +
              " (name TEXT PRIMARY KEY, tenths BIGINT NOT NULL, rides BIGINT NOT NULL, "
              "skipped BIGINT NOT NULL)");
  });
  if (!a.json)
    std::cerr << "demo unified-log: run " << p.run << ", seed " << a.seed << ", log " << p.log_url
              << ", store " << core::Url::parse(p.store_url).redacted() << std::endl;

  std::atomic<bool> stop_api{false};
  auto watching = a.watch_stop ? a.watch_stop([&stop_api] { stop_api = true; }) : nullptr;

  RelayOptions ro;
  ro.batch_size = 20;
  ro.lease = 5s;
  ro.backoff_base = 10ms;
  ro.backoff_max = 1s;
  ro.poll_interval = 50ms;
  Relay relay(*store, faulty, ro);
  std::thread relay_thread([&] { relay.run(); });

  std::vector<ConsumerProc> procs(kConsumers);
  for (int i = 0; i < kConsumers; ++i) {
    procs[i].name = "consumer" + std::to_string(i);
    procs[i].pid = spawn_consumer(a, p, i, 0);
  }
  // Restarts consumers that crashed (SIGKILL by their own hand) until told to stop.
  std::mutex procs_mu;
  std::atomic<bool> stopping_consumers{false};
  std::thread supervisor([&] {
    while (true) {
      bool all_gone = true;
      for (int i = 0; i < kConsumers; ++i) {
        std::lock_guard lock(procs_mu);
        auto& c = procs[i];
        if (c.pid <= 0) continue;
        all_gone = false;
        int status = 0;
        if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
        c.pid = -1;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && !stopping_consumers) {
          ++c.crashes;
          c.pid = spawn_consumer(a, p, i, c.crashes);
        } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
          c.failure = c.name + " exited with status " + std::to_string(status);
        }
      }
      if (all_gone && stopping_consumers) return;
      std::this_thread::sleep_for(10ms);
    }
  });
  auto stop_consumers = [&] {
    stopping_consumers = true;
    {
      std::lock_guard lock(procs_mu);
      for (auto& c : procs)
        if (c.pid > 0) ::kill(c.pid, SIGTERM);
    }
    supervisor.join();
  };

  // The API: rides and their events in one transaction each.
  std::int64_t written = 0;
  try {
    std::uniform_int_distribution<int> distance(1, 9999), per_tx(1, 3);
    auto end = SteadyClock::now() + std::chrono::seconds(a.seconds);
    while (SteadyClock::now() < end && !stop_api) {
      std::vector<Event> events;
      data->transaction([&](TxHandle h) {
        SqlTx tx(h);
        for (int n = per_tx(rng); n > 0; --n) {
          int tenths = distance(rng);
          auto row = tx.query(
              "INSERT INTO " + rides + " (tenths) VALUES (CAST($1 AS BIGINT)) RETURNING id",
              {std::to_string(tenths)});
          nlohmann::json payload{
              {"run", p.run}, {"id", std::stoll(*row.at(0).at(0))}, {"distance", tenths / 10.0}};
          events.push_back(Event::make("ride.created", payload.dump(), "rides"));
        }
        store->append(events, h);
      });
      written += static_cast<std::int64_t>(events.size());
      std::this_thread::sleep_for(5ms);
    }
    // Drain: the relay delivers everything, then the consumers catch up (lag 0).
    auto drained = [&] {
      auto s = store->stats();
      return s.pending == 0 && s.leased == 0;
    };
    auto deadline = SteadyClock::now() + 120s;
    while (!drained() && SteadyClock::now() < deadline) std::this_thread::sleep_for(20ms);
    relay.stop();
    relay_thread.join();
    if (!drained()) throw Error(ErrorCode::timeout, "demo", "the relay did not drain within 120 s");
    std::vector<std::unique_ptr<Source>> sources;
    for (auto& c : procs) sources.push_back(open_source(source_url(p, c.name)));
    auto caught_up = [&] {
      for (int i = 0; i < kConsumers; ++i) {
        auto g = data->group(group_of(p.run, procs[i].name));
        if (!g || sources[i]->lag(g->position).value_or(1) != 0) return false;
      }
      return true;
    };
    while (!caught_up()) {
      if (SteadyClock::now() > deadline + 60s)
        throw Error(ErrorCode::timeout, "demo", "the consumers did not catch up within 180 s");
      std::lock_guard lock(procs_mu);
      for (auto& c : procs)
        if (!c.failure.empty()) throw Error(ErrorCode::backend, "demo", c.failure);
      std::this_thread::sleep_for(50ms);
    }
  } catch (...) {
    if (relay_thread.joinable()) {
      relay.stop();
      relay_thread.join();
    }
    stop_consumers();
    throw;
  }
  stop_consumers();
  faulty.close();
  for (auto& c : procs) open_source(source_url(p, c.name))->retire(group_of(p.run, c.name));

  // The proof.
  std::int64_t source_rides = 0, source_tenths = 0;
  struct Total {
    std::int64_t tenths = 0, rides = 0, skipped = 0;
  };
  std::vector<Total> totals(kConsumers);
  data->transaction([&](TxHandle h) {
    SqlTx tx(h);
    auto r = tx.query("SELECT count(*), COALESCE(SUM(tenths), 0) FROM " + rides);
    source_rides = std::stoll(*r[0][0]);
    source_tenths = std::stoll(*r[0][1]);
    for (int i = 0; i < kConsumers; ++i) {
      auto t =
          tx.query("SELECT tenths, rides, skipped FROM " + totals_table(p.run) + " WHERE name = $1",
                   {procs[i].name});
      if (!t.empty())
        totals[i] = {std::stoll(*t[0][0]), std::stoll(*t[0][1]), std::stoll(*t[0][2])};
    }
  });
  bool agree = source_rides == written;
  for (auto& t : totals) agree = agree && t.tenths == source_tenths && t.rides == source_rides;
  for (auto& c : procs) agree = agree && c.failure.empty();

  nlohmann::ordered_json j;
  j["rides"] = source_rides;
  j["source_total"] = source_tenths / 10.0;
  j["consumers"] = nlohmann::ordered_json::array();
  for (int i = 0; i < kConsumers; ++i)
    j["consumers"].push_back({{"name", procs[i].name},
                              {"total", totals[i].tenths / 10.0},
                              {"rides", totals[i].rides},
                              {"crashes", procs[i].crashes},
                              {"skipped_duplicates", totals[i].skipped}});
  j["double_sends"] = faulty.double_sends.load();
  j["agree"] = agree;
  std::ostringstream text;
  text << "rides " << source_rides << ", source total " << j["source_total"].dump() << "\n";
  for (auto& c : j["consumers"])
    text << c["name"].get<std::string>() << ": total " << c["total"].dump() << ", rides "
         << c["rides"] << ", crashes " << c["crashes"] << ", skipped duplicates "
         << c["skipped_duplicates"] << "\n";
  text << "double sends " << j["double_sends"] << "\n"
       << (agree ? "agree: both consumers' totals equal the rides table"
                 : "DISAGREE: the totals differ")
       << "\n";
  std::cout << text.str();
  if (a.json) std::cout << j.dump() << "\n";
  if (data->kind() == TxHandle::Kind::postgres) {
    // This run's tables go again (the store's outbox tables too); a temp dir goes as a whole.
    data->transaction([&](TxHandle h) {
      SqlTx tx(h);
      for (auto& r : tx.query("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                              "AND tablename LIKE $1",
                              {"demo\\_" + p.run + "\\_%"}))
        tx.exec("DROP TABLE IF EXISTS " + *r[0] + " CASCADE");
    });
  }
  return agree ? 0 : 1;
}

}  // namespace outpost::examples
