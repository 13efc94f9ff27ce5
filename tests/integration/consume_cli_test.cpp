// `outpost consume` and `outpost consumers`, black box: usage errors (exit 2, naming the bad
// flag or URL part, nothing opened or created), list --json, dead letters through an HTTP sink
// that refuses some events (parked, listed, retried and delivered, discarded), SIGTERM drains,
// and SIGKILL of the consume process at random moments while it bridges 20,000 messages: every
// message delivered, duplicates at most one batch per kill.
// OUTPOST_CRASH_SEED=N reproduces a run.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "cli_process.h"
#include "outpost/json.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

// Writes n events as the file sink would (keys k0..k9); returns their ids.
std::vector<std::string> write_log(const std::string& path, int n, int keys = 10) {
  std::ofstream out(path, std::ios::app);
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) =
        Event::make("ride", "{\"n\":" + std::to_string(i) + "}", "k" + std::to_string(i % keys));
    ids.push_back(e.id.str());
    out << to_json(e) << "\n";
  }
  return ids;
}

TEST(ConsumeCli, UsageErrorsNameTheProblemAndOpenNothing) {
  TempDir dir;
  std::string log = dir / "log.jsonl", cp = dir / "cp.db", out = dir / "out.jsonl";
  write_log(log, 1);
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases{
      {{"consume", "--from", "fil:" + log, "--group", "g", "--checkpoint", "sqlite:" + cp, "--sink",
        "file:" + out},
       "fil"},
      {{"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", "redis://h/0", "--sink",
        "file:" + out},
       "redis"},
      {{"consume", "--from", "file:" + log, "--group", "g", "--checkpoint",
        "sqlite:" + cp + "?prefix=a-b", "--sink", "file:" + out},
       "prefix"},
      {{"consume", "--from", "file:" + log + "?tail=1", "--group", "g", "--checkpoint",
        "sqlite:" + cp, "--sink", "file:" + out},
       "tail"},
      {{"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", "sqlite:" + cp,
        "--sink", "ftp://x"},
       "ftp"},
      {{"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", "sqlite:" + cp,
        "--sink", "file:" + out, "--batch", "0"},
       "--batch"},
      {{"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", "sqlite:" + cp,
        "--sink", "file:" + out, "--backoff-base-ms", "10", "--backoff-max-ms", "5"},
       "--backoff-max-ms"},
      {{"consume", "--from", "file:" + log, "--checkpoint", "sqlite:" + cp, "--sink",
        "file:" + out},
       "--group"},
      // A log in a directory that does not exist is a typo, not a log still to come: before, the
      // consumer waited for it silently forever (exit 0 with --until-idle).
      {{"consume", "--from", "file:" + (dir / "no-such-dir/log.jsonl"), "--group", "g",
        "--checkpoint", "sqlite:" + cp, "--sink", "file:" + out},
       "directory '" + (dir / "no-such-dir") + "' does not exist"},
      {{"consumers", "--checkpoint", "sqlite:" + cp, "retry", "--group", "g", "nope"}, "nope"},
      {{"consumers", "--checkpoint", "sqlite:" + cp, "retry", "--group", "g"}, "--all"},
      {{"consumers", "--checkpoint", "postgresql://u:hunter2@127.0.0.1:1/db?bad=1", "list"}, "bad"},
  };
  for (const auto& c : cases) {
    auto r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find(c.expect), std::string::npos)
        << "expected '" << c.expect << "' in: " << r.err;
    EXPECT_EQ(r.all().find("hunter2"), std::string::npos) << r.all();
    EXPECT_FALSE(std::filesystem::exists(cp)) << "opened the checkpoint store: " << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a + " ";
  return s;
}

std::size_t entries_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// `consumers` only inspects and edits consumer state that is there: a SQLite path that does not
// exist, or a database without the consumer tables, is exit 1 naming the place, and nothing is
// created. Before: `consumers --checkpoint sqlite:missing.db list` created the file and its
// tables and printed an empty list (exit 0), as `events` did for the outbox.
void expect_no_consumer_state(const std::string& checkpoint, const std::string& where) {
  const std::vector<std::vector<std::string>> operations{
      {"list"},
      {"list", "--json"},
      {"dead", "--group", "g"},
      {"retry", "--group", "g", "--all"},
      {"discard", "--group", "g", "1"},
  };
  // Twice: had the first round created the tables, the second would find them.
  for (int round = 0; round < 2; ++round) {
    for (const auto& op : operations) {
      std::vector<std::string> args{"consumers", "--checkpoint", checkpoint};
      args.insert(args.end(), op.begin(), op.end());
      auto r = run_cli(args);
      EXPECT_EQ(r.code, 1) << joined(args) << "\n" << r.all();
      EXPECT_NE(r.err.find("there is no consumer state at '" + where + "'"), std::string::npos)
          << joined(args) << "\n"
          << r.err;
      EXPECT_NE(r.err.find("nothing was created"), std::string::npos) << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
    }
  }
}

TEST(ConsumersCli, NeedConsumerStateThereAndCreateNothing) {
  TempDir dir;
  const std::string missing = dir / "missing.db";
  expect_no_consumer_state("sqlite:" + missing, "sqlite:" + missing);
  EXPECT_FALSE(std::filesystem::exists(missing));
  EXPECT_EQ(entries_in(dir.path()), 0u) << "something was created";

  // An existing database without consumer tables (an empty file is an empty SQLite database):
  // not switched to WAL, no table written.
  const std::string empty = dir / "empty.db";
  std::ofstream(empty).close();
  expect_no_consumer_state("sqlite:" + empty, "sqlite:" + empty);
  EXPECT_EQ(std::filesystem::file_size(empty), 0u) << "the database was written";
  EXPECT_EQ(entries_in(dir.path()), 1u) << "something was created";

  // Consumer state under another prefix is not this prefix's.
  std::string log = dir / "log.jsonl", cp = dir / "cp.db";
  write_log(log, 3);
  auto r = run_cli({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint",
                    "sqlite:" + cp, "--sink", "file:" + (dir / "out.jsonl"), "--until-idle", "1"});
  ASSERT_EQ(r.code, 0) << r.all();
  expect_no_consumer_state("sqlite:" + cp + "?prefix=other", "sqlite:" + cp);
  r = run_cli({"consumers", "--checkpoint", "sqlite:" + cp, "list", "--json"});
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;
}

TEST(ConsumersCli, NeedConsumerStateThereOnPostgres) {
  const char* pg = std::getenv("OUTPOST_TEST_PG_URL");
  if (!pg) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_PG_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";
  }
  std::string url = pg;
  // A prefix no other test uses, new on every run.
  std::string prefix =
      "nocons" + std::to_string(::getpid()) + "_" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
  url += (url.find('?') == std::string::npos ? "?" : "&") + std::string("prefix=") + prefix;
  auto r = run_cli({"consumers", "--checkpoint", url, "list"});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("there is no consumer state at '"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(prefix + "_checkpoints"), std::string::npos) << r.err;
  const std::string where =
      r.err.substr(r.err.find("state at '") + 10, r.err.find("'", r.err.find("state at '") + 10) -
                                                      (r.err.find("state at '") + 10));
  expect_no_consumer_state(url, where);
}

// Lead's defect 6: --until-idle counts time without a message, failed reads included. Before,
// every failed connection attempt restarted the idle clock, so a consume of an unreachable log
// retried forever. Now the outage is retried until --until-idle has passed without progress, then
// the run ends with its error (exit 1) and the summary.
TEST(ConsumeCli, UntilIdleEndsAnOutageWithItsError) {
  TempDir dir;
  const auto started = std::chrono::steady_clock::now();
  auto r = run_cli({"consume", "--from", "redis-stream://127.0.0.1:1/s", "--group", "g",
                    "--checkpoint", "sqlite:" + (dir / "cp.db"), "--sink",
                    "file:" + (dir / "out.jsonl"), "--until-idle", "1000"},
                   {}, std::chrono::seconds(60));
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1000))
      << "ended before --until-idle: " << r.all();
  EXPECT_NE(r.err.find("(retrying)"), std::string::npos) << "the outage was retried: " << r.err;
  EXPECT_NE(r.err.find("outpost: error (redis-stream, connection): cannot connect to "
                       "redis-stream://127.0.0.1:1/s"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("read 0, delivered 0"), std::string::npos) << "summary: " << r.err;
}

TEST(ConsumeCli, BridgesOnceListsGroupsAndDrainsOnSigterm) {
  TempDir dir;
  std::string log = dir / "log.jsonl", cp = "sqlite:" + (dir / "cp.db"), out = dir / "out.jsonl";
  auto ids = write_log(log, 250);
  // A double send of the first 50 lines.
  {
    std::string text = read_file(log);
    std::size_t cut = 0;
    for (int i = 0; i < 50; ++i) cut = text.find('\n', cut) + 1;
    std::ofstream(log, std::ios::app) << text.substr(0, cut);
  }
  CliProcess consume({"consume", "--from", "file:" + log, "--group", "bridge", "--checkpoint", cp,
                      "--sink", "file:" + out, "--batch", "40"},
                     dir / "consume.log");
  // Caught up once the group's lag is 0 (the double sends at the end read and skipped too).
  auto lag = [&] {
    auto r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
    auto lines = lines_of(r.out);
    return lines.empty() ? -1 : nlohmann::json::parse(lines[0])["lag"].get<int>();
  };
  ASSERT_TRUE(wait_until([&] { return lag() == 0; }, 60s)) << read_file(dir / "consume.log");
  consume.signal(SIGTERM);
  EXPECT_EQ(consume.wait(30s), 0) << read_file(dir / "consume.log");
  EXPECT_NE(read_file(dir / "consume.log").find("duplicates 50"), std::string::npos)
      << read_file(dir / "consume.log");
  EXPECT_EQ(event_ids_in(read_file(out)), ids);

  auto r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  auto j = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(j["group"], "bridge");
  EXPECT_EQ(j["from"], "file:" + log);
  EXPECT_EQ(j["lag"], 0);
  EXPECT_EQ(j["dead"], 0);
  // The byte offset, then the file's identity (docs/consumers.md, "Log rotation").
  EXPECT_EQ(j["position"].get<std::string>().rfind(
                std::to_string(std::filesystem::file_size(log)) + "@", 0),
            0u)
      << j;
  EXPECT_EQ(lines[0].rfind("{\"group\":", 0), 0u) << "fields in the documented order: " << lines[0];
  write_log(log, 7);
  r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
  EXPECT_EQ(nlohmann::json::parse(lines_of(r.out)[0])["lag"], 7) << r.out;
}

// An HTTP endpoint that refuses events whose payload contains "poison" while `refuse` is set.
class Endpoint {
 public:
  Endpoint() {
    server_.Post("/in", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      if (refuse && req.body.find("poison") != std::string::npos) {
        res.status = 500;
        return;
      }
      received.push_back(req.get_header_value("Idempotency-Key"));
      headers.push_back(req.headers);
      res.status = 200;
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~Endpoint() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/in"; }
  std::vector<std::string> got() {
    std::lock_guard lock(mu_);
    return received;
  }
  // Header `name` of each delivery, in order ("-" where it was missing).
  std::vector<std::string> got_header(const std::string& name) {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (const auto& h : headers) {
      auto it = h.find(name);
      out.push_back(it == h.end() ? "-" : it->second);
    }
    return out;
  }
  std::atomic<bool> refuse{true};

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> received;      // guarded by mu_
  std::vector<httplib::Headers> headers;  // guarded by mu_
};

// Issue 20 items 2 and 5: what `outpost consume` hands its sink carries each event's key position
// and trace context from the log, so the sink delivers them as the relay's sinks do
// (outpost-key-seq, traceparent, tracestate; docs/consumers.md), also for a message retried
// from the consumer's dead letters; an event without a key has no position.
TEST(ConsumeCli, TheSinkGetsTheKeyPositionAndTheTraceContext) {
  TempDir dir;
  Endpoint http;
  std::string log = dir / "log.jsonl", cp = "sqlite:" + (dir / "cp.db"), out = dir / "out.jsonl";
  const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  std::vector<std::string> ids;
  {
    std::ofstream f(log);
    const char* payloads[] = {"{\"ok\":1}", "{\"poison\":1}", "{\"ok\":2}"};
    const char* keys[] = {"acct-1", "acct-1", ""};
    for (int i = 0; i < 3; ++i) {
      StoredEvent e;
      static_cast<Event&>(e) = Event::make("t", payloads[i], keys[i]);
      e.seq = 100 + i;
      e.headers["traceparent"] = parent;
      e.headers["tracestate"] = "v=" + std::to_string(i);
      ids.push_back(e.id.str());
      f << to_json(e) << "\n";
    }
  }
  std::vector<std::string> consume{
      "consume", "--from", "file:" + log, "--group",        "h", "--checkpoint",
      cp,        "--sink", http.url(),    "--max-attempts", "1", "--until-idle",
      "300",     "--quiet"};
  auto r = run_cli(consume);
  ASSERT_EQ(r.code, 0) << r.all();
  http.refuse = false;
  ASSERT_EQ(run_cli({"consumers", "--checkpoint", cp, "retry", "--group", "h", "--all"}).code, 0);
  r = run_cli(consume);
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(http.got(), (std::vector<std::string>{ids[0], ids[2], ids[1]}));
  EXPECT_EQ(http.got_header("outpost-key-seq"), (std::vector<std::string>{"100", "-", "101"}));
  EXPECT_EQ(http.got_header("traceparent"), (std::vector<std::string>{parent, parent, parent}));
  EXPECT_EQ(http.got_header("tracestate"), (std::vector<std::string>{"v=0", "v=2", "v=1"}));

  // The file sink: the line's key_seq and headers.
  r = run_cli({"consume", "--from", "file:" + log, "--group", "f", "--checkpoint", cp, "--sink",
               "file:" + out, "--until-idle", "300", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.all();
  std::ifstream in(out);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].value("key_seq", 0), 100) << lines[0];
  EXPECT_EQ(lines[1].value("key_seq", 0), 101) << lines[1];
  EXPECT_FALSE(lines[2].contains("key_seq")) << lines[2];
  for (const auto& l : lines) EXPECT_EQ(l["headers"]["traceparent"], parent) << l;
}

TEST(ConsumeCli, RefusedMessagesAreParkedListedRetriedAndDiscarded) {
  TempDir dir;
  Endpoint http;
  std::string log = dir / "log.jsonl", cp = "sqlite:" + (dir / "cp.db");
  std::vector<std::string> ids;
  {
    std::ofstream out(log);
    const char* payloads[] = {"{\"ok\":1}", "{\"poison\":1}", "{\"ok\":2}", "{\"ok\":3}"};
    const char* keys[] = {"a", "a", "a", "b"};
    for (int i = 0; i < 4; ++i) {
      StoredEvent e;
      static_cast<Event&>(e) = Event::make("t", payloads[i], keys[i]);
      ids.push_back(e.id.str());
      out << to_json(e) << "\n";
    }
  }
  std::vector<std::string> consume{
      "consume", "--from",           "file:" + log, "--group",        "h",   "--checkpoint",
      cp,        "--sink",           http.url(),    "--max-attempts", "2",   "--backoff-base-ms",
      "1",       "--backoff-max-ms", "5",           "--until-idle",   "300", "--quiet"};
  auto r = run_cli(consume);
  ASSERT_EQ(r.code, 0) << r.all();
  // ids[1] refused twice -> parked; ids[2] (same key) parked behind it; key b flowed.
  EXPECT_EQ(http.got(), (std::vector<std::string>{ids[0], ids[3]}));
  r = run_cli({"consumers", "--checkpoint", cp, "dead", "--group", "h"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  auto d0 = nlohmann::json::parse(lines[0]), d1 = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(d0["event_id"], ids[1]);
  EXPECT_EQ(d0["attempts"], 2);
  EXPECT_NE(d0["error"].get<std::string>().find("500"), std::string::npos) << d0;
  EXPECT_NE(d0["payload"].dump().find("poison"), std::string::npos);
  EXPECT_EQ(d1["event_id"], ids[2]);
  r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
  EXPECT_EQ(nlohmann::json::parse(lines_of(r.out)[0])["dead"], 2);

  // Retry by event id and row id once the endpoint accepts: delivered in key order.
  http.refuse = false;
  r = run_cli({"consumers", "--checkpoint", cp, "retry", "--group", "h", ids[1],
               std::to_string(d1["row"].get<int>())});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.out.find("retried 2"), std::string::npos) << r.out;
  r = run_cli(consume);
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(http.got(), (std::vector<std::string>{ids[0], ids[3], ids[1], ids[2]}));
  EXPECT_EQ(lines_of(run_cli({"consumers", "--checkpoint", cp, "dead", "--group", "h"}).out).size(),
            0u);

  // Discard: a refused message parked again, then dropped.
  http.refuse = true;
  {
    std::ofstream out(log, std::ios::app);
    StoredEvent e;
    static_cast<Event&>(e) = Event::make("t", "{\"poison\":2}", "c");
    out << to_json(e) << "\n";
  }
  ASSERT_EQ(run_cli(consume).code, 0);
  r = run_cli({"consumers", "--checkpoint", cp, "discard", "--group", "h", "--all"});
  EXPECT_NE(r.out.find("discarded 1"), std::string::npos) << r.all();
  EXPECT_EQ(lines_of(run_cli({"consumers", "--checkpoint", cp, "dead", "--group", "h"}).out).size(),
            0u);
}

TEST(ConsumeCli, SigkillAtRandomMomentsThenAFinalRunDeliversEveryMessage) {
  constexpr int kMessages = 20'000, kKills = 10, kBatch = 100;
  TempDir dir;
  std::string log = dir / "log.jsonl", cp = "sqlite:" + (dir / "cp.db"), out = dir / "out.jsonl";
  auto ids = write_log(log, kMessages, 50);
  unsigned seed = std::random_device{}();
  if (const char* s = std::getenv("OUTPOST_CRASH_SEED"))
    seed = static_cast<unsigned>(std::stoul(s));
  std::mt19937 rng(seed);
  SCOPED_TRACE("OUTPOST_CRASH_SEED=" + std::to_string(seed));
  std::vector<std::string> args{
      "consume",     "--from",  "file:" + log,         "--group", "k", "--checkpoint", cp, "--sink",
      "file:" + out, "--batch", std::to_string(kBatch)};
  int kills = 0;
  for (; kills < kKills; ++kills) {
    std::size_t before = std::filesystem::exists(out) ? std::filesystem::file_size(out) : 0;
    CliProcess p(args, dir / "consume.log");
    // Kill at a random moment after this run delivered something.
    ASSERT_TRUE(wait_until(
        [&] { return std::filesystem::exists(out) && std::filesystem::file_size(out) > before; },
        60s))
        << read_file(dir / "consume.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 40));
    p.signal(SIGKILL);
    p.wait(30s);
    if (event_ids_in(read_file(out)).size() >= static_cast<std::size_t>(kMessages)) break;
  }
  auto args_final = args;
  args_final.insert(args_final.end(), {"--until-idle", "500"});
  auto r = run_cli(args_final, {}, 120s);
  ASSERT_EQ(r.code, 0) << r.all();
  std::unordered_map<std::string, int> seen;
  for (auto& id : event_ids_in(read_file(out))) ++seen[id];
  std::size_t duplicates = 0;
  for (auto& id : ids) {
    ASSERT_TRUE(seen.count(id)) << "lost " << id;
    duplicates += static_cast<std::size_t>(seen[id] - 1);
  }
  EXPECT_EQ(seen.size(), ids.size());
  EXPECT_LE(duplicates, static_cast<std::size_t>((kills + 1) * kBatch)) << "kills " << kills;
  // Per key, first deliveries come in log order.
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < ids.size(); ++i) index[ids[i]] = i;
  std::unordered_map<std::string, std::size_t> first_pos;
  std::vector<std::size_t> order;
  for (auto& id : event_ids_in(read_file(out)))
    if (first_pos.emplace(id, order.size()).second) order.push_back(index[id]);
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end())) << "first deliveries out of log order";
}

}  // namespace
}  // namespace outpost::testing

namespace outpost::testing {
namespace {

// Seed 001's proof as a test: 30% double sends, 30% consumer crashes (real SIGKILLs of the
// consumer processes before a commit), fixed seed; both totals equal the rides table.
// `broker_dedups`: the log drops a double send by event id itself (JetStream's Nats-Msg-Id
// within its duplicate window), so the consumers may never see one to skip.
void expect_demo_agrees(const std::vector<std::string>& extra, bool broker_dedups = false) {
  std::vector<std::string> args{
      "demo", "unified-log", "--seconds", "3",     "--double-send-rate", "0.3", "--crash-rate",
      "0.3",  "--seed",      "42",        "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_cli(args, {}, 300s);
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = lines_of(r.out);
  ASSERT_FALSE(lines.empty()) << r.all();
  auto j = nlohmann::json::parse(lines.back());
  EXPECT_TRUE(j["agree"].get<bool>()) << r.all();
  EXPECT_GT(j["rides"].get<int>(), 0);
  EXPECT_GT(j["double_sends"].get<int>(), 0) << "no fault was injected: " << lines.back();
  ASSERT_EQ(j["consumers"].size(), 2u);
  int crashes = 0, skipped = 0;
  for (auto& c : j["consumers"]) {
    EXPECT_EQ(c["total"], j["source_total"]);
    EXPECT_EQ(c["rides"], j["rides"]);
    crashes += c["crashes"].get<int>();
    skipped += c["skipped_duplicates"].get<int>();
  }
  EXPECT_GT(crashes, 0) << "no consumer crashed: " << lines.back();
  if (!broker_dedups) {
    EXPECT_GT(skipped, 0) << lines.back();
  }
}

TEST(UnifiedLogDemo, TotalsAgreeOnTheFileLogWithSqlite) {
  expect_demo_agrees({});
}

TEST(UnifiedLogDemo, TotalsAgreeOnTheFileLogWithPostgres) {
  const char* pg = std::getenv("OUTPOST_TEST_PG_URL");
  if (!pg) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_PG_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_PG_URL not set";
  }
  expect_demo_agrees({"--store", pg});
}

TEST(UnifiedLogDemo, TotalsAgreeOnRedisStreams) {
  const char* redis = std::getenv("OUTPOST_TEST_REDIS_URL");  // redis://127.0.0.1:PORT/0
  if (!redis) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  std::string r = redis;
  std::string hostport = r.substr(8, r.find('/', 8) - 8);
  std::string stream =
      "demo-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
  expect_demo_agrees({"--log", "redis-stream://" + hostport + "/" + stream});
}

TEST(UnifiedLogDemo, TotalsAgreeOnKafka) {
  const char* bootstrap = std::getenv("OUTPOST_TEST_KAFKA_BOOTSTRAP");  // the mock cluster
  if (!bootstrap) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
    GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
  }
  std::string topic =
      "demo-" + std::to_string(::getpid()) + "-" + std::to_string(std::random_device{}());
  expect_demo_agrees({"--log", std::string("kafka://") + bootstrap + "/" + topic});
}

TEST(UnifiedLogDemo, TotalsAgreeOnNatsJetStream) {
  const char* nats = std::getenv("OUTPOST_TEST_NATS_URL");  // nats://127.0.0.1:PORT
  if (!nats) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) FAIL() << "OUTPOST_TEST_NATS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
  }
  // The demo re-sends a batch at once, inside the stream's duplicate window (at least 100 ms),
  // so JetStream drops the copies by Nats-Msg-Id; the crashes still replay batches.
  std::string stream =
      "DEMO_" + std::to_string(::getpid()) + "_" + std::to_string(std::random_device{}() % 100000);
  expect_demo_agrees(
      {"--log", std::string(nats) + "/" + stream + ".rides?stream=" + stream + "&create=1"},
      /*broker_dedups=*/true);
}

TEST(ConsumeCli, KafkaSourceUrlsAreChecked) {
  TempDir dir;
  for (const char* url :
       {"kafka://127.0.0.1:1/t", "kafka://127.0.0.1:1/t?group=g&assign=both",
        "kafka://127.0.0.1:1/?group=g", "kafka://127.0.0.1:1/t?group=g&bogus=1"}) {
    auto r = run_cli({"consume", "--from", url, "--group", "g", "--checkpoint",
                      "sqlite:" + (dir / "cp.db"), "--sink", "file:" + (dir / "out.jsonl")});
    EXPECT_EQ(r.code, 2) << url << ": " << r.all();
  }
}

TEST(UnifiedLogDemo, BadFlagsAreUsageErrors) {
  auto r = run_cli({"demo", "unified-log", "--crash-rate", "1.5"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("--crash-rate"), std::string::npos) << r.err;
  r = run_cli({"demo", "unified-log", "--store", "redis://127.0.0.1:1/0"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("--store"), std::string::npos) << r.err;
  r = run_cli({"demo", "unified-log", "--log", "gopher://x/y"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("gopher"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace outpost::testing
