// The `outpost` command line as a black-box tester drives it: only the CLI, URL and config
// contracts of README.md and docs/, on every store this machine has (SQLite file always;
// PostgreSQL, Redis and Redis Cluster from OUTPOST_TEST_PG_URL / OUTPOST_TEST_REDIS_URL /
// OUTPOST_TEST_REDIS_CLUSTER_URL, skipped when unset unless OUTPOST_TEST_REQUIRE_ALL=1). Each
// case here pins a defect found that way (see the comment on each test).

#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "cli_process.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace
}  // namespace outpost::testing

namespace outpost::testing {
namespace {

// Secrets: a password holding an unencoded '/' (generated passwords often do) was printed whole by
// every scheme (parse errors quoted the URL and the piece read as port; sinks connected to the
// piece read as host and stored "connect Zq7Sek:6379" in the dead letter's last_error).
TEST(BlackboxSecrets, APasswordWithASlashIsNeverPrinted) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "s.db";
  auto leaks = [](const CliResult& r) {
    return r.all().find("Zq7Sek") != std::string::npos ||
           r.all().find("retPw9") != std::string::npos;
  };
  for (const std::string url :
       {"redis://u:Zq7Sek/retPw9@127.0.0.1:1/0", "redis://Zq7Sek/retPw9@127.0.0.1:1/0",
        "redis://:Zq7Sek/retPw9@127.0.0.1:1/0", "postgresql://app:Zq7Sek/retPw9@127.0.0.1:1/db",
        "redis-sentinel://u:Zq7Sek/retPw9@127.0.0.1:1/m"}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"events", "--store", url, "stats"},
          {"emit", "--store", url, "--type", "t", "--payload", "1"},
          {"relay", "--store", url, "--sink", "file:" + dir / "o.jsonl", "--until-empty"}}) {
      auto r = run_cli(args, {}, 30s);
      EXPECT_EQ(r.code, 2) << joined(args) << "\n" << r.all();
      EXPECT_FALSE(leaks(r)) << joined(args) << "\n" << r.all();
    }
  }
  for (const std::string sink :
       {"http://u:Zq7Sek/retPw9@127.0.0.1:1/h?timeout_ms=2000",
        "https://Zq7Sek/retPw9@127.0.0.1:1/h?timeout_ms=2000",
        "redis-stream://Zq7Sek/retPw9@127.0.0.1:1/s", "nats://Zq7Sek/retPw9@127.0.0.1:1/s?stream=S",
        "kafka://u:Zq7Sek/retPw9@127.0.0.1:1/t"}) {
    ASSERT_EQ(run_cli({"emit", "--store", store, "--type", "t", "--payload", "1"}).code, 0);
    auto r =
        run_cli({"relay", "--store", store, "--sink", sink, "--until-empty", "--max-attempts", "1"},
                {}, 60s);
    EXPECT_NE(r.code, -1) << sink << "\n" << r.all();
    EXPECT_FALSE(leaks(r)) << sink << "\n" << r.all();
  }
  auto dead = run_cli({"events", "--store", store, "dead"});
  EXPECT_FALSE(leaks(dead)) << dead.all();
}

}  // namespace
}  // namespace outpost::testing

namespace outpost::testing {
namespace {

std::string getenv_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A PostgreSQL URL with a table name unique to this process and call, or "" (the test skips, or
// fails under OUTPOST_TEST_REQUIRE_ALL=1) when OUTPOST_TEST_PG_URL is not set.
std::string postgres_url(const std::string& param) {
  std::string base = getenv_or_empty("OUTPOST_TEST_PG_URL");
  if (base.empty()) return "";
  return base + (base.find('?') == std::string::npos ? "?" : "&") + param;
}

std::string unique_name(const std::string& prefix) {
  static int counter = 0;
  return prefix + std::to_string(::getpid()) + "_" + std::to_string(::time(nullptr) % 100000) +
         "_" + std::to_string(counter++);
}

#define OUTPOST_REQUIRE_ENDPOINT(url, var)                                          \
  if ((url).empty()) {                                                              \
    if (getenv_or_empty("OUTPOST_TEST_REQUIRE_ALL") == "1") FAIL() << var " unset"; \
    GTEST_SKIP() << var " not set";                                                 \
  }

// `outpost events` on a PostgreSQL table that does not exist created the outbox (three tables,
// functions, a version row) and reported zeros; docs/cli.md: events never creates an outbox and
// says there is none (exit 1), as on SQLite. And an outbox table dropped by hand was never
// created again (its version row stayed): every emit failed with "relation does not exist".
TEST(BlackboxPostgres, EventsWhereThereIsNoOutboxSaysSoAndCreatesNothing) {
  const std::string table = unique_name("bbnone");
  const std::string store = postgres_url("table=" + table);
  OUTPOST_REQUIRE_ENDPOINT(store, "OUTPOST_TEST_PG_URL");
  for (const std::vector<std::string>& op : {std::vector<std::string>{"stats"},
                                             {"list"},
                                             {"dead"},
                                             {"retry", "--all"},
                                             {"discard", "--all"}}) {
    std::vector<std::string> args{"events", "--store", store};
    args.insert(args.end(), op.begin(), op.end());
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 1) << op[0] << ": " << r.all();
    EXPECT_NE(r.err.find("no outbox"), std::string::npos) << op[0] << ": " << r.err;
  }
  // Nothing was created: the first emit creates the outbox and its event is the only one.
  auto e = run_cli({"emit", "--store", store, "--type", "t", "--payload", "1"});
  ASSERT_EQ(e.code, 0) << e.all();
  auto list = run_cli({"events", "--store", store, "list"});
  ASSERT_EQ(list.code, 0) << list.all();
  EXPECT_EQ(lines_of(list.out).size(), 1u) << list.out;
}

}  // namespace
}  // namespace outpost::testing
