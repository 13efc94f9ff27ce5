// Black-box tests of the `outpost` command line (docs/cli.md): emit (flags, headers, stdin batch in
// one transaction), relay --until-empty to a file sink, events stats/list/dead/retry/discard,
// --metrics and SIGTERM drain, and the exit codes: 2 with the bad flag / URL part named, 1 for
// runtime failures.

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "cli_process.h"
#include "refusing_webhook.h"
#include "server_process.h"

namespace outpost::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

class CliTest : public ::testing::Test {
 protected:
  std::string store() const { return "sqlite:" + dir_ / "outbox.db"; }
  std::string sink_path() const { return dir_ / "out.jsonl"; }
  std::string sink() const { return "file:" + sink_path(); }

  // Emits `n` events through stdin (one transaction) and returns their ids.
  std::vector<std::string> emit_n(int n, const std::string& key = "k") {
    std::string input;
    for (int i = 0; i < n; ++i)
      input += R"({"type":"test.item","key":")" + key + R"(","payload":{"i":)" + std::to_string(i) +
               "}}\n";
    auto r = run_cli({"emit", "--store", store(), "-"}, input);
    EXPECT_EQ(r.code, 0) << r.all();
    auto ids = lines_of(r.out);
    EXPECT_EQ(ids.size(), std::size_t(n));
    return ids;
  }

  json stats() {
    auto r = run_cli({"events", "--store", store(), "stats", "--json"});
    EXPECT_EQ(r.code, 0) << r.all();
    return json::parse(r.out);
  }

  TempDir dir_;
};

TEST_F(CliTest, VersionAndHelpOnEachSubcommand) {
  auto v = run_cli({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_NE(v.out.find("outpost "), std::string::npos);
  auto h = run_cli({"--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("sqlite"), std::string::npos) << "help lists the supported schemes";
  const std::vector<std::pair<std::string, std::string>> subs{{"emit", "--payload"},
                                                              {"relay", "--until-empty"},
                                                              {"events", "--store"},
                                                              {"bench", "--events"}};
  for (const auto& [sub, flag] : subs) {
    auto r = run_cli({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub;
    EXPECT_NE(r.out.find(flag), std::string::npos) << sub << " --help mentions " << flag;
  }
}

TEST_F(CliTest, EmitWithFlagsIsListedWithHeadersAndPayload) {
  auto r =
      run_cli({"emit", "--store", store(), "--type", "order.placed", "--key", "order-7", "--header",
               "correlation_id=c-1", "--header", "x-user=a=b", "--payload", R"({"total":12.5})"});
  ASSERT_EQ(r.code, 0) << r.all();
  auto ids = lines_of(r.out);
  ASSERT_EQ(ids.size(), 1u);

  auto list = run_cli({"events", "--store", store(), "list"});
  ASSERT_EQ(list.code, 0) << list.all();
  auto lines = lines_of(list.out);
  ASSERT_EQ(lines.size(), 1u);
  auto e = json::parse(lines[0]);
  EXPECT_EQ(e["id"], ids[0]);
  EXPECT_EQ(e["type"], "order.placed");
  EXPECT_EQ(e["key"], "order-7");
  EXPECT_EQ(e["payload"]["total"], 12.5);
  EXPECT_EQ(e["headers"]["correlation_id"], "c-1");
  EXPECT_EQ(e["headers"]["x-user"], "a=b") << "only the first '=' splits NAME=VALUE";
  EXPECT_EQ(stats()["pending"], 1);
}

TEST_F(CliTest, EmitStdinKeepsGivenIdsAndOrder) {
  const std::string a = "0190a0b0-0000-7000-8000-000000000001";
  const std::string b = "0190a0b0-0000-7000-8000-000000000002";
  std::string input = R"({"id":")" + a + R"(","type":"t","key":"k","payload":{"n":1}})" + "\n" +
                      "\n" +  // blank lines carry no event
                      R"({"id":")" + b + R"(","type":"t","key":"k","payload":"plain text"})" +
                      "\n" + R"({"type":"t","payload":[1,2]})" + "\n";
  auto r = run_cli({"emit", "--store", store(), "-"}, input);
  ASSERT_EQ(r.code, 0) << r.all();
  auto ids = lines_of(r.out);
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], a);
  EXPECT_EQ(ids[1], b);

  auto list = lines_of(run_cli({"events", "--store", store(), "list"}).out);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(json::parse(list[0])["id"], a);
  EXPECT_EQ(json::parse(list[1])["id"], b);
  EXPECT_EQ(json::parse(list[1])["payload"], "plain text");
  EXPECT_EQ(json::parse(list[2])["payload"], json::parse("[1,2]"));
}

TEST_F(CliTest, EmitStdinBadLineWritesNothingAndNamesTheLine) {
  emit_n(2);  // the store exists and has 2 events before the bad batch
  std::string input = R"({"type":"t","payload":1})"
                      "\n"
                      R"({"type":"t","payload":2})"
                      "\n"
                      R"({"type":"","payload":3})"
                      "\n"
                      R"({"type":"t","payload":4})"
                      "\n";
  auto r = run_cli({"emit", "--store", store(), "-"}, input);
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("line 3"), std::string::npos) << r.err;
  EXPECT_EQ(stats()["pending"], 2) << "nothing of the bad batch was written";

  auto bad_json =
      run_cli({"emit", "--store", store(), "-"}, "{\"type\":\"t\",\"payload\":1}\n{oops\n");
  EXPECT_EQ(bad_json.code, 2);
  EXPECT_NE(bad_json.err.find("line 2"), std::string::npos) << bad_json.err;
  auto bad_id =
      run_cli({"emit", "--store", store(), "-"}, R"({"id":"nope","type":"t","payload":1})");
  EXPECT_EQ(bad_id.code, 2);
  EXPECT_NE(bad_id.err.find("id"), std::string::npos) << bad_id.err;
  EXPECT_EQ(stats()["pending"], 2);
}

TEST_F(CliTest, RelayUntilEmptyDeliversEverythingToTheFileSink) {
  auto ids = emit_n(250, "acct-1");
  auto more = emit_n(50, "");
  auto r =
      run_cli({"relay", "--store", store(), "--sink", sink(), "--until-empty", "--batch", "64"});
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_NE(r.err.find("delivered 300"), std::string::npos) << r.err;

  auto lines = lines_of(read_file(sink_path()));
  ASSERT_EQ(lines.size(), 300u);
  std::vector<std::string> delivered_key;
  std::set<std::string> all;
  for (const auto& l : lines) {
    auto e = json::parse(l);
    all.insert(e["id"]);
    if (e["key"] == "acct-1") delivered_key.push_back(e["id"]);
  }
  EXPECT_EQ(delivered_key, ids) << "one key is delivered in emit order";
  for (const auto& id : more) EXPECT_TRUE(all.count(id));
  auto s = stats();
  EXPECT_EQ(s["pending"], 0);
  EXPECT_EQ(s["leased"], 0);
  EXPECT_EQ(s["dead"], 0);
}

TEST_F(CliTest, DeadLettersCanBeListedRetriedAndDiscarded) {
  auto ids = emit_n(3, "");
  RefusingWebhook refusing;
  auto r = run_cli({"relay", "--store", store(), "--sink", refusing.url(), "--max-attempts", "1",
                    "--until-empty", "--quiet"});
  ASSERT_EQ(r.code, 3) << r.all();  // --until-empty that dead-lettered events (docs/cli.md)
  EXPECT_NE(r.err.find("dead 3"), std::string::npos) << r.err;
  auto s = stats();
  EXPECT_EQ(s["dead"], 3);
  EXPECT_EQ(s["pending"], 0);

  auto dead = run_cli({"events", "--store", store(), "dead"});
  ASSERT_EQ(dead.code, 0) << dead.all();
  auto lines = lines_of(dead.out);
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) {
    auto e = json::parse(l);
    EXPECT_EQ(e["last_error"], "refused: HTTP 422: no such account") << l;
    EXPECT_EQ(e["type"], "test.item");
  }
  EXPECT_EQ(lines_of(run_cli({"events", "--store", store(), "dead", "--limit", "2"}).out).size(),
            2u);

  auto retry = run_cli({"events", "--store", store(), "retry", ids[0]});
  ASSERT_EQ(retry.code, 0) << retry.all();
  EXPECT_NE(retry.out.find("retried 1"), std::string::npos) << retry.out;
  s = stats();
  EXPECT_EQ(s["dead"], 2);
  EXPECT_EQ(s["pending"], 1);

  auto discard = run_cli({"events", "--store", store(), "discard", ids[1]});
  ASSERT_EQ(discard.code, 0) << discard.all();
  EXPECT_EQ(stats()["dead"], 1);

  auto relay = run_cli({"relay", "--store", store(), "--sink", sink(), "--until-empty"});
  ASSERT_EQ(relay.code, 0) << relay.all();
  auto out = lines_of(read_file(sink_path()));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(json::parse(out[0])["id"], ids[0]) << "the retried event is delivered";

  ASSERT_EQ(run_cli({"events", "--store", store(), "retry", "--all"}).code, 0);
  EXPECT_EQ(stats()["pending"], 1);
  EXPECT_EQ(stats()["dead"], 0);
  ASSERT_EQ(run_cli({"relay", "--store", store(), "--sink", refusing.url(), "--max-attempts", "1",
                     "--until-empty", "--quiet"})
                .code,
            3);
  ASSERT_EQ(stats()["dead"], 1);
  auto all = run_cli({"events", "--store", store(), "discard", "--all"});
  ASSERT_EQ(all.code, 0) << all.all();
  EXPECT_EQ(stats()["dead"], 0);
}

// Exit code 2 and a message naming the bad flag / URL part.
void expect_usage_error(const std::vector<std::string>& args, const std::string& named) {
  auto r = run_cli(args);
  EXPECT_EQ(r.code, 2) << "args: " << ::testing::PrintToString(args) << "\n" << r.all();
  EXPECT_NE(r.err.find(named), std::string::npos)
      << "the message should name '" << named << "': " << r.err;
}

TEST_F(CliTest, UsageErrorsExitTwoAndNameTheBadPart) {
  expect_usage_error({"emit", "--type", "t", "--payload", "1"}, "--store");
  expect_usage_error({"emit", "--store", store(), "--payload", "1"}, "--type");
  expect_usage_error({"emit", "--store", store(), "--type", "t"}, "--payload");
  expect_usage_error(
      {"emit", "--store", store(), "--type", "t", "--payload", "1", "--header", "nokey"},
      "--header");
  expect_usage_error({"relay", "--store", store()}, "--sink");
  expect_usage_error({"relay", "--store", store(), "--sink", sink(), "--batch", "0"}, "--batch");
  expect_usage_error({"relay", "--store", store(), "--sink", sink(), "--max-attempts", "x"},
                     "--max-attempts");
  expect_usage_error({"relay", "--store", store(), "--sink", sink(), "--bogus"}, "--bogus");
  expect_usage_error({"relay", "--store", store(), "--sink", sink(), "--metrics", "nohostport"},
                     "--metrics");
  expect_usage_error({"events", "--store", store(), "retry", "not-a-uuid"}, "not-a-uuid");
  expect_usage_error({"events", "--store", store(), "discard"}, "--all");
  expect_usage_error({"events", "--store", store(), "frobnicate"}, "frobnicate");
  expect_usage_error({"nosuchcommand"}, "nosuchcommand");
}

TEST_F(CliTest, BadUrlsExitTwoAndNameTheUrlPart) {
  // Unknown scheme: named, and the supported ones listed.
  auto r = run_cli({"events", "--store", "mysql://localhost/db", "stats"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("mysql"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sqlite"), std::string::npos) << "lists supported schemes: " << r.err;
  expect_usage_error({"relay", "--store", store(), "--sink", "ftp://x/y", "--until-empty"}, "ftp");
  // Bad table names.
  expect_usage_error({"events", "--store", store() + "?table=x;drop", "stats"}, "x;drop");
  expect_usage_error({"events", "--store", store() + "?table=1abc", "stats"}, "1abc");
  // Unknown parameter (a typo must not be silently ignored).
  expect_usage_error({"events", "--store", store() + "?tabel=outbox", "stats"}, "tabel");
  expect_usage_error({"relay", "--store", store(), "--sink", sink() + "?fsink=1", "--until-empty"},
                     "fsink");
  expect_usage_error({"emit", "--store", "sqlite:", "--type", "t", "--payload", "1"}, "sqlite");
}

TEST_F(CliTest, RuntimeFailuresExitOne) {
  auto not_sqlite = dir_ / "not-a-db.txt";
  {
    std::ofstream f(not_sqlite);
    for (int i = 0; i < 200; ++i) f << "this is plainly not an SQLite database file\n";
  }
  auto r = run_cli({"events", "--store", "sqlite:" + not_sqlite, "stats"});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("not-a-db.txt"), std::string::npos) << "names the file: " << r.err;

  auto missing_dir = run_cli(
      {"emit", "--store", "sqlite:" + dir_ / "no/such/dir/x.db", "--type", "t", "--payload", "1"});
  EXPECT_EQ(missing_dir.code, 1) << missing_dir.all();
  EXPECT_FALSE(missing_dir.err.empty());
}

TEST_F(CliTest, RelayServesMetricsAndDrainsOnSigterm) {
  emit_n(20);
  auto log = dir_ / "relay.log";
  CliProcess relay({"relay", "--store", store(), "--sink", sink(), "--metrics", "127.0.0.1:0"},
                   log);
  // The relay prints the address it bound.
  std::smatch m;
  std::string text;
  const std::regex addr(R"(metrics on http://127\.0\.0\.1:(\d+)/metrics)");
  for (int i = 0; i < 500 && !std::regex_search(text, m, addr); ++i) {
    std::this_thread::sleep_for(10ms);
    text = read_file(log);
  }
  ASSERT_TRUE(std::regex_search(text, m, addr)) << text;
  int port = std::stoi(m[1]);

  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(5, 0);
  // Wait until the 20 events are delivered, as the metrics say.
  std::string body;
  for (int i = 0; i < 500; ++i) {
    auto res = client.Get("/metrics");
    ASSERT_TRUE(res) << "GET /metrics failed";
    ASSERT_EQ(res->status, 200);
    body = res->body;
    if (body.find("outpost_relay_delivered_total{pipeline=\"relay\",store=\"sqlite\",sink=\"file\"}"
                  " 20\n") != std::string::npos)
      break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(
      body.find(
          "outpost_relay_delivered_total{pipeline=\"relay\",store=\"sqlite\",sink=\"file\"} 20\n"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("# TYPE outpost_relay_delivered_total counter"), std::string::npos);
  EXPECT_NE(
      body.find("outpost_store_pending{pipeline=\"relay\",store=\"sqlite\",sink=\"file\"} 0\n"),
      std::string::npos)
      << body;
  EXPECT_NE(body.find("outpost_store_dead{pipeline=\"relay\",store=\"sqlite\",sink=\"file\"} 0\n"),
            std::string::npos)
      << body;
  auto health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // Still running (no --until-empty) until SIGTERM, then a clean exit with its summary.
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(relay.wait(0ms), -1) << "relay exited without a signal: " << read_file(log);
  relay.signal(SIGTERM);
  ASSERT_EQ(relay.wait(10s), 0) << "relay did not stop cleanly on SIGTERM: " << read_file(log);
  text = read_file(log);
  EXPECT_NE(text.find("delivered 20"), std::string::npos) << text;
  EXPECT_NE(text.find("after signal"), std::string::npos) << text;
  EXPECT_EQ(lines_of(read_file(sink_path())).size(), 20u);
}

TEST_F(CliTest, RelayExitsZeroOnSigint) {
  CliProcess relay({"relay", "--store", store(), "--sink", sink()}, dir_ / "relay.log");
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(relay.wait(0ms), -1) << read_file(dir_ / "relay.log");
  relay.signal(SIGINT);
  ASSERT_EQ(relay.wait(10s), 0) << read_file(dir_ / "relay.log");
  EXPECT_NE(read_file(dir_ / "relay.log").find("delivered 0"), std::string::npos);
}

TEST_F(CliTest, BenchPrintsTheDesignJsonLastWithABaseline) {
  auto r = run_cli({"bench", "--store", "sqlite:" + dir_ / "bench.db", "--events", "3000", "--rate",
                    "500", "--latency-seconds", "0.4", "--json"},
                   {}, 120s);
  ASSERT_EQ(r.code, 0) << r.all();
  auto lines = lines_of(r.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(r.out.find("events/s"), std::string::npos) << "a readable table comes first";
  auto j = json::parse(lines.back());
  for (const char* field : {"events", "events_per_s", "p50_ms", "p99_ms", "max_ms", "peak_rss_mb",
                            "baseline_events_per_s", "ratio"})
    EXPECT_TRUE(j.contains(field)) << field << " missing: " << lines.back();
  EXPECT_EQ(j["events"], 3000);
  EXPECT_GT(j["events_per_s"].get<double>(), 0);
  EXPECT_GT(j["baseline_events_per_s"].get<double>(), 0);
  EXPECT_NEAR(j["ratio"].get<double>(),
              j["events_per_s"].get<double>() / j["baseline_events_per_s"].get<double>(), 1e-3);
  EXPECT_EQ(j["latency_samples"], 200);
  EXPECT_LE(j["p50_ms"].get<double>(), j["p99_ms"].get<double>());
  EXPECT_LE(j["p99_ms"].get<double>(), j["max_ms"].get<double>());
  EXPECT_GT(j["peak_rss_mb"].get<double>(), 1.0);
}

// Issue 19: --relays N with a slow no-op sink reports each relay's share, the same phase with
// one relay and the ratio between them, and checks per-key order and duplicates.
TEST_F(CliTest, BenchReportsScaleOutAgainstOneRelayInTheSameRun) {
  auto r = run_cli({"bench", "--store", "sqlite:" + dir_ / "scale.db", "--events", "2000",
                    "--relays", "2", "--sink-delay-ms", "5", "--prefill", "--keys", "50",
                    "--latency-seconds", "0", "--no-backlog-check", "--no-baseline", "--json"},
                   {}, 120s);
  ASSERT_EQ(r.code, 0) << r.all();
  auto j = json::parse(lines_of(r.out).back());
  EXPECT_EQ(j["relays"], 2);
  EXPECT_EQ(j["sink_delay_ms"], 5);
  EXPECT_EQ(j["prefill"], true);
  ASSERT_EQ(j["per_relay_events_per_s"].size(), 2u) << r.out;
  double sum = 0;
  for (const auto& v : j["per_relay_events_per_s"]) sum += v.get<double>();
  EXPECT_NEAR(sum, j["events_per_s"].get<double>(), j["events_per_s"].get<double>() * 0.01);
  ASSERT_GT(j["single_relay_events_per_s"].get<double>(), 0);
  EXPECT_NEAR(j["scale_out"].get<double>(),
              j["events_per_s"].get<double>() / j["single_relay_events_per_s"].get<double>(), 1e-3);
  EXPECT_EQ(j["order_breaks"], 0);
  EXPECT_EQ(j["duplicates"], 0);
  // 5 ms per call of at most 100 events: one relay cannot pass 20,000 events/s.
  EXPECT_LT(j["single_relay_events_per_s"].get<double>(), 20000) << r.out;
}

TEST_F(CliTest, BenchRefusesASinkDelayWithARealSink) {
  auto r = run_cli(
      {"bench", "--store", "sqlite:" + dir_ / "d.db", "--sink", sink(), "--sink-delay-ms", "5"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("--sink-delay-ms"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "d.db"));
}

TEST_F(CliTest, BenchRefusesAStoreWithUndeliveredEvents) {
  emit_n(1);
  auto r = run_cli({"bench", "--store", store(), "--events", "10", "--json"});
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("undelivered"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace outpost::testing

namespace outpost::testing {
namespace {

// Issue 18 defect 8: the README's CLI block listed four commands of nine and docs/cli.md said
// "four subcommands". Every subcommand `outpost --help` lists is in the README's CLI block and
// named in docs/cli.md's opening sentence, whose count is the number of subcommands (found
// again in 2026-11-27: `schema` and `partitions` were missing from the README, `partitions` from
// docs/cli.md, which said "ten").
TEST(CliDocs, TheReadmeAndCliMdListEverySubcommandOfHelp) {
  auto help = run_cli({"--help"});
  ASSERT_EQ(help.code, 0) << help.all();
  std::vector<std::string> commands;
  {
    std::istringstream in(help.out);
    std::string line;
    bool in_list = false;
    std::regex entry("^  ([a-z][a-z-]*)  .*");
    for (std::smatch m; std::getline(in, line);) {
      if (line.rfind("Subcommands:", 0) == 0)
        in_list = true;
      else if (in_list && line.empty())
        break;
      else if (in_list && std::regex_match(line, m, entry))
        commands.push_back(m[1]);
    }
  }
  ASSERT_GE(commands.size(), 9u) << help.out;

  const std::string readme = read_file(std::string(OUTPOST_SOURCE_DIR) + "/README.md");
  auto cli_start = readme.find("## The CLI");
  ASSERT_NE(cli_start, std::string::npos);
  auto block_start = readme.find("```", cli_start);
  auto block_end = readme.find("```", block_start + 3);
  ASSERT_NE(block_end, std::string::npos);
  const std::string block = readme.substr(block_start, block_end - block_start);

  const std::string cli_md = read_file(std::string(OUTPOST_SOURCE_DIR) + "/docs/cli.md");
  const std::string opening = cli_md.substr(0, cli_md.find("\n\n", cli_md.find("`outpost` is")));
  const char* words[] = {"zero",  "one",   "two",  "three", "four",   "five",   "six",
                         "seven", "eight", "nine", "ten",   "eleven", "twelve", "thirteen"};
  ASSERT_LT(commands.size(), std::size(words));
  EXPECT_NE(opening.find(std::string("with ") + words[commands.size()] + " subcommands"),
            std::string::npos)
      << "docs/cli.md should say " << words[commands.size()] << " subcommands:\n"
      << opening;
  for (const auto& c : commands) {
    EXPECT_TRUE(std::regex_search(block, std::regex("\\boutpost " + c + "\\b")))
        << "README.md's CLI block has no `outpost " << c << "`";
    EXPECT_NE(opening.find("`" + c + "`"), std::string::npos)
        << "docs/cli.md's opening does not name `" << c << "`";
  }
}

}  // namespace
}  // namespace outpost::testing
