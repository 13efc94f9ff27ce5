// Operator findings on `outpost relay` and `outpost run`, black box:
//  - a SQLite row written through the emit contract whose headers are not JSON
//  (docs/emit-contract.md):
//    `outpost relay` exits 1 with the store's error instead of retrying the claim forever; in the
//    daemon that pipeline stops, shown failed in /readyz and /api/overview, the others go on.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sqlite3.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli_process.h"
#include "daemon_process.h"
#ifdef OUTPOST_TEST_HAVE_CONSUME
#include "private_postgres.h"
#endif

namespace {

using namespace outpost::testing;
using namespace std::chrono_literals;

// Runs SQL on a SQLite file as another process's writer would (sqlite3 CLI, a Python script).
void sql(const std::string& db, const std::string& statements) {
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(h, statements.c_str(), nullptr, nullptr, &error);
  std::string why = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(h);
  ASSERT_EQ(rc, SQLITE_OK) << why;
}

// The outbox of `outpost schema`, created as docs/emit-contract.md says (`schema | sqlite3`).
void create_outbox(const std::string& db) {
  auto r = run_cli({"schema", "--store", "sqlite:" + db});
  ASSERT_EQ(r.code, 0) << r.err;
  sql(db, r.out);
}

// One event through the emit contract (two INSERTs in one transaction) whose headers are not a
// JSON object: the row the store cannot read.
void insert_unreadable_row(const std::string& db, const std::string& key) {
  sql(db, "BEGIN IMMEDIATE; INSERT INTO outbox (key) VALUES ('" + key +
              "'); INSERT INTO outbox_body (seq, id, type, payload, occurred_at, headers) VALUES "
              "(last_insert_rowid(), randomblob(16), 'bad', CAST('{\"a\":2}' AS BLOB), "
              "1795765968724000, 'not json'); COMMIT;");
}

void emit(const std::string& db, const std::string& key, int n = 1) {
  for (int i = 0; i < n; ++i) {
    auto r = run_cli(
        {"emit", "--store", "sqlite:" + db, "--type", "good", "--key", key, "--payload", "{}"});
    ASSERT_EQ(r.code, 0) << r.err;
  }
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// F9: the row was retried forever ("claim failed (backing off): headers column is not a JSON
// object" until killed); docs/emit-contract.md: exit 1 with the store's error. Whether the row is
// the first one (read by the start-up check) or reached by a later claim, with and without
// --until-empty: one error, exit 1.
TEST(RelayCorruptRow, OutpostRelayExitsOneWithTheStoresErrorInsteadOfRetrying) {
  struct Case {
    bool bad_first;
    bool until_empty;
  };
  for (auto c : {Case{true, true}, Case{false, true}, Case{false, false}, Case{true, false}}) {
    SCOPED_TRACE(std::string(c.bad_first ? "bad row first" : "good rows first") +
                 (c.until_empty ? ", --until-empty" : ""));
    TempDir dir;
    const std::string db = dir / "o.db";
    create_outbox(db);
    if (c.bad_first) insert_unreadable_row(db, "k1");
    emit(db, "k2", 2);
    if (!c.bad_first) insert_unreadable_row(db, "k1");
    std::vector<std::string> args{
        "relay", "--store", "sqlite:" + db, "--sink", "file:" + dir / "out.jsonl", "--batch", "1"};
    if (c.until_empty) args.push_back("--until-empty");
    auto r = run_cli(args, {}, 60s);
    EXPECT_EQ(r.code, 1) << r.all();
    EXPECT_NE(r.err.find("outpost: error (sqlite, corrupt): headers column is not a JSON object"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("backing off"), std::string::npos) << r.err;
    EXPECT_LE(count_of(r.err, "claim failed"), 1u) << r.err;
  }
}

// Operator finding A9 and the rest of F9: the error names the row, so an operator can fix or
// delete it; a state row whose body INSERT never came (a writer outside one transaction) stops
// the relay the same way instead of stalling every key with a claim error naming nothing.
TEST(RelayCorruptRow, TheErrorNamesTheRowAndARowWithoutItsBodyIsOneToo) {
  TempDir dir;
  const std::string db = dir / "o.db";
  create_outbox(db);
  emit(db, "k2", 2);
  insert_unreadable_row(db, "k1");  // seq 3
  auto r = run_cli(
      {"relay", "--store", "sqlite:" + db, "--sink", "file:" + dir / "out.jsonl", "--until-empty"},
      {}, 60s);
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("headers column is not a JSON object (row seq 3, event "), std::string::npos)
      << r.err;
  auto list = run_cli({"events", "--store", "sqlite:" + db, "list"});
  EXPECT_EQ(list.code, 1) << list.all();
  EXPECT_NE(list.err.find("(row seq 3, event "), std::string::npos) << list.err;

  const std::string db2 = dir / "o2.db";
  create_outbox(db2);
  emit(db2, "k2", 2);
  sql(db2, "INSERT INTO outbox (key) VALUES ('k1');");  // seq 3, its body INSERT forgotten
  emit(db2, "k3");
  r = run_cli({"relay", "--store", "sqlite:" + db2, "--sink", "file:" + dir / "out2.jsonl",
               "--until-empty"},
              {}, 60s);
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("corrupt"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("without a row in 'outbox_body' (row seq 3;"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("backing off"), std::string::npos) << r.err;
}

class DaemonOperatorTest : public DaemonFixture {
 protected:
  // The lines of the log that contain `text`.
  std::vector<std::string> lines_with(const std::string& text) const {
    std::vector<std::string> out;
    std::istringstream in(log());
    for (std::string line; std::getline(in, line);)
      if (line.find(text) != std::string::npos) out.push_back(line);
    return out;
  }
};

// F9 in the daemon: the pipeline whose outbox holds the row stops with the store's error, shown
// as a failure in /readyz (503, loop_alive) and /api/overview; the daemon and its other pipelines
// go on. Before, it retried the claim forever and looked healthy.
TEST_F(DaemonOperatorTest, ARowTheStoreCannotReadStopsOnlyItsPipelineAndShowsWhy) {
  const std::string good = dir_ / "good.db", bad = dir_ / "bad.db";
  emit(good, "a");
  create_outbox(bad);
  emit(bad, "k2");
  insert_unreadable_row(bad, "k1");
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\n" +
                   relay("good", "sqlite:" + good, "file:" + dir_ / "good.jsonl") +
                   relay("bad", "sqlite:" + bad, "file:" + dir_ / "bad.jsonl", "batch = 1\n"));
  ASSERT_GT(port, 0) << log();
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(20, 0);
  std::string body;
  int status = 0;
  ASSERT_TRUE(eventually([&] {
    auto r = client.Get("/readyz");
    if (!r) return false;
    status = r->status;
    body = r->body;
    return body.find("\"pipeline\":\"bad\"") != std::string::npos;
  })) << log();
  EXPECT_EQ(status, 503) << body;
  EXPECT_NE(body.find("\"check\":\"loop_alive\""), std::string::npos) << body;
  EXPECT_NE(body.find("error (sqlite, corrupt): headers column is not a JSON object"),
            std::string::npos)
      << body;
  EXPECT_EQ(body.find("\"pipeline\":\"good\""), std::string::npos) << body;
  EXPECT_TRUE(log_has("[bad] stopped by an error: error (sqlite, corrupt)")) << log();
  EXPECT_FALSE(log_has("backing off")) << log();

  auto overview = client.Get("/api/overview");
  ASSERT_TRUE(overview);
  auto j = nlohmann::json::parse(overview->body);
  int seen = 0;
  for (const auto& p : j["pipelines"]) {
    if (p["name"] == "bad") {
      ++seen;
      EXPECT_EQ(p["running"], false) << p.dump();
      EXPECT_NE(p["failure"].get<std::string>().find("corrupt"), std::string::npos) << p.dump();
    } else if (p["name"] == "good") {
      ++seen;
      EXPECT_EQ(p["running"], true) << p.dump();
    }
  }
  EXPECT_EQ(seen, 2) << overview->body;
  // The other pipeline goes on: what is emitted now is delivered.
  emit(good, "b");
  EXPECT_TRUE(eventually([&] { return event_ids_in(read_file(dir_ / "good.jsonl")).size() == 2; }))
      << log();
  auto healthz = client.Get("/healthz");
  ASSERT_TRUE(healthz);
  EXPECT_EQ(healthz->status, 200);
  // The operator fixes the row; a SIGHUP starts the stopped pipeline again, which delivers both.
  sql(bad, "UPDATE outbox_body SET headers = NULL WHERE type = 'bad'");
  daemon_->signal(SIGHUP);
  EXPECT_TRUE(eventually([&] { return event_ids_in(read_file(dir_ / "bad.jsonl")).size() == 2; }))
      << log();
  EXPECT_TRUE(eventually([&] {
    auto r = client.Get("/readyz");
    return r && r->status == 200;
  })) << log();
  daemon_->signal(SIGTERM);
  EXPECT_EQ(daemon_->wait(60s), 0) << log();
}

// A port on 127.0.0.1 that nothing listens on, for now.
int free_port() {
  httplib::Server probe;
  return probe.bind_to_any_port("127.0.0.1");
}

// F6: the lines of a sink's or destination's pause carried no pipeline: JSON lines had no
// "pipeline" field and text lines no "[name]" for a consumer's "group 'g': destination down ..." /
// "... back after ...". Every line of a pipeline names it, relays and consumers, both formats.
TEST_F(DaemonOperatorTest, PauseLinesOfRelaysAndConsumersNameTheirPipeline) {
#ifndef OUTPOST_TEST_HAVE_CONSUME
  GTEST_SKIP() << "this build has no consume";
#endif
  const std::string source = dir_ / "s.db", log_file = dir_ / "log.jsonl";
  emit(source, "a", 2);
  auto r = run_cli(
      {"relay", "--store", "sqlite:" + source, "--sink", "file:" + log_file, "--until-empty"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const std::string format : {"json", "text"}) {
    SCOPED_TRACE(format);
    const int hook_port = free_port();
    ASSERT_GT(hook_port, 0);
    const std::string hook = "http://127.0.0.1:" + std::to_string(hook_port);
    const std::string relay_db = dir_ / ("r-" + format + ".db");
    emit(relay_db, "b");
    const std::string fast = "backoff_base_ms = 100\nbackoff_max_ms = 1000\n";
    start("[log]\nformat = \"" + format + "\"\n" +
              relay("rel", "sqlite:" + relay_db, hook + "/y", fast) +
              "\n[[consume]]\nname = \"webhook-c\"\nfrom = \"file:" + log_file +
              "\"\ngroup = \"g\"\ncheckpoint = \"sqlite:" + dir_ / ("cp-" + format + ".db") +
              "\"\nsink = \"" + hook + "/x\"\n" + fast,
          /*http=*/false);
    ASSERT_TRUE(eventually([&] {
      return log_has("sink 'http' down since") && log_has("destination down since");
    })) << log();
    // The destination comes up: both pauses end.
    httplib::Server server;
    server.Post(".*", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    ASSERT_TRUE(server.bind_to_port("127.0.0.1", hook_port));
    std::thread serving([&] { server.listen_after_bind(); });
    EXPECT_TRUE(eventually([&] {
      return log_has("sink 'http' is back after") && log_has("destination back after");
    })) << log();
    daemon_->signal(SIGTERM);
    EXPECT_EQ(daemon_->wait(60s), 0) << log();
    server.stop();
    serving.join();
    const std::vector<std::pair<std::string, std::string>> pipeline_of{
        {"sink 'http' down since", "rel"},
        {"sink 'http' is back after", "rel"},
        {"group 'g': destination down since", "webhook-c"},
        {"group 'g': destination back after", "webhook-c"}};
    for (const auto& [what, pipeline] : pipeline_of) {
      auto lines = lines_with(what);
      EXPECT_EQ(lines.size(), 1u) << what << "\n" << log();
      for (const auto& line : lines) {
        if (format == "json") {
          auto j = nlohmann::json::parse(line.substr(line.find('{')));
          EXPECT_EQ(j.value("pipeline", ""), pipeline) << line;
        } else {
          EXPECT_EQ(line.rfind("outpost run: [" + pipeline + "] " + what, 0), 0u) << line;
        }
      }
    }
    daemon_.reset();
    std::filesystem::remove(log_);
  }
}

// N1: after "claim failed (backing off)" lines the relay never said its store was back (a
// consumer says "the log and the checkpoint store work again after ..."). Now once per outage.
TEST(RelayStoreBack, OutpostRelaySaysOnceThatItsStoreWorksAgain) {
  TempDir dir;
  const std::string db = dir / "o.db";
  emit(db, "a");
  const std::string log = dir / "relay.log";
  CliProcess relay({"relay", "--store", "sqlite:" + db + "?busy_timeout_ms=50", "--sink",
                    "file:" + dir / "out.jsonl"},
                   log);
  ASSERT_TRUE(eventually([&] { return event_ids_in(read_file(dir / "out.jsonl")).size() == 1; }))
      << read_file(log);
  // Another process holds the database's write lock: the relay's claims fail and back off.
  sqlite3* h = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(h, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  // (A claim, or the settling of the batch just delivered: either is retried.)
  const bool failing = eventually([&] { return count_of(read_file(log), "locked") >= 2; });
  sqlite3_exec(h, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(h);
  ASSERT_TRUE(failing) << read_file(log);
  emit(db, "b");
  EXPECT_TRUE(eventually([&] { return event_ids_in(read_file(dir / "out.jsonl")).size() == 2; }))
      << read_file(log);
  EXPECT_TRUE(eventually([&] {
    return read_file(log).find("outpost relay: the store works again after") != std::string::npos;
  })) << read_file(log);
  relay.signal(SIGTERM);
  EXPECT_EQ(relay.wait(60s), 0) << read_file(log);
  const std::string all = read_file(log);
  EXPECT_EQ(count_of(all, "the store works again after"), 1u) << all;
  EXPECT_NE(all.find(" failed calls)"), std::string::npos) << all;
}

#ifdef OUTPOST_TEST_HAVE_CONSUME
// N4: after PostgreSQL restarted, the first /readyz failed `store_connected` for a [[consume]]
// whose checkpoint store is on it ("schema on PostgreSQL ...: FATAL: terminating connection due
// to administrator command"), although the pipeline was fine: the probe's pooled connection was
// stale. The check is now tried once more on a fresh connection. (A [[relay]] on the same server
// is checked too: its store's pool drops a broken connection, it did not flap.)
TEST_F(DaemonOperatorTest, ReadinessDoesNotFlapAfterPostgresRestarts) {
  std::unique_ptr<PrivateCluster> pg;
  try {
    pg = std::make_unique<PrivateCluster>();
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no private PostgreSQL cluster: " << e.what();
  }
  write_file(dir_ / "log.jsonl", "");
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\n\n[[consume]]\nname = \"c\"\nfrom = \"file:" +
                   dir_ / "log.jsonl" + "\"\ngroup = \"g\"\ncheckpoint = \"" + pg->url() +
                   "\"\nsink = \"file:" + dir_ / "out.jsonl" + "\"\n" +
                   relay("r", pg->url(), "file:" + dir_ / "r.jsonl"));
  ASSERT_GT(port, 0) << log();
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(20, 0);
  std::string body;
  ASSERT_TRUE(eventually([&] {
    auto r = client.Get("/readyz");
    body = r ? std::to_string(r->status) + " " + r->body : "no answer";
    return body.rfind("200 ", 0) == 0;
  })) << body
      << log();
  for (int i = 0; i < 2; ++i) {
    pg->restart();  // -m fast: the server ends every session; pg_ctl -w returns once it accepts
    auto r = client.Get("/readyz");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << "restart " << i << ": " << r->body << log();
    EXPECT_EQ(r->body.find("store_connected"), std::string::npos) << r->body;
  }
}
#endif

}  // namespace
