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
