// A SQLite outbox file removed or replaced under a running relay, black box (operator finding
// B2): the relay used to go on reading the removed file while the events written at the path
// piled up undelivered, with /metrics and /readyz saying pending 0 and ready. It stops naming the
// file; `outpost run` shows it in /readyz and a SIGHUP restarts the pipeline on the file at the
// path (docs/sqlite.md, "A file removed or replaced underneath").

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli_process.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

void emit(const std::string& db, int n) {
  for (int i = 0; i < n; ++i) {
    auto r = run_cli({"emit", "--store", "sqlite:" + db, "--type", "t", "--key",
                      "k" + std::to_string(i), "--payload", "{}"});
    ASSERT_EQ(r.code, 0) << r.err;
  }
}

void remove_db(const std::string& db) {
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(db + suffix);
}

std::size_t lines_in(const std::string& path) {
  return fs::exists(path) ? lines_of(read_file(path)).size() : 0;
}

TEST(SqliteReplaced, OutpostRelayExits1NamingTheRemovedFile) {
  TempDir dir;
  const std::string db = dir / "good.db", out = dir / "good.jsonl", log = dir / "relay.log";
  emit(db, 2);
  CliProcess relay({"relay", "--store", "sqlite:" + db, "--sink", "file:" + out}, log);
  ASSERT_TRUE(wait_until([&] { return lines_in(out) == 2; }, 60s)) << read_file(log);
  remove_db(db);
  emit(db, 3);  // a new file at the path
  EXPECT_EQ(relay.wait(60s), 1) << read_file(log);
  const std::string text = read_file(log);
  EXPECT_NE(text.find("the database file '" + fs::weakly_canonical(db).string() + "' was "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("while this store had it open"), std::string::npos) << text;

  // Started again, it relays the file at the path.
  auto r = run_cli({"relay", "--store", "sqlite:" + db, "--sink", "file:" + out, "--until-empty"},
                   {}, 60s);
  EXPECT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(lines_in(out), 5u);
}

TEST(SqliteReplaced, TheDaemonFailsReadinessNamingThePipelineAndASighupReopensIt) {
  TempDir dir;
  const std::string db = dir / "good.db", out = dir / "good.jsonl", log = dir / "run.log",
                    config = dir / "outpost.toml";
  std::ofstream(config) << "[http]\nlisten = \"127.0.0.1:0\"\n\n[[relay]]\nname = \"good\"\n"
                        << "store = \"sqlite:" << db << "\"\nsink = \"file:" << out
                        << "\"\n"
                        // Another pipeline keeps the daemon up (it ends once every one has).
                        << "\n[[relay]]\nname = \"other\"\nstore = \"sqlite:" << dir / "other.db"
                        << "\"\nsink = \"file:" << dir / "other.jsonl"
                        << "\"\n";
  emit(db, 2);
  CliProcess daemon({"run", "--config", config}, log);
  int port = -1;
  ASSERT_TRUE(wait_until(
      [&] {
        std::smatch m;
        const std::string text = read_file(log);
        if (!std::regex_search(text, m, std::regex(R"(http on 127\.0\.0\.1:(\d+))"))) return false;
        port = std::stoi(m[1]);
        return true;
      },
      60s))
      << read_file(log);
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(10, 0);
  ASSERT_TRUE(wait_until([&] { return lines_in(out) == 2; }, 60s)) << read_file(log);

  remove_db(db);
  emit(db, 3);
  std::string body;
  ASSERT_TRUE(wait_until(
      [&] {
        auto res = client.Get("/readyz");
        body = res ? res->body : "";
        return res && res->status == 503 &&
               body.find(fs::weakly_canonical(db).string()) != std::string::npos;
      },
      60s, 20ms))
      << body << "\n"
      << read_file(log);
  EXPECT_NE(body.find("\"pipeline\":\"good\""), std::string::npos) << body;
  EXPECT_EQ(lines_in(out), 2u);

  daemon.signal(SIGHUP);  // restarts the stopped pipeline: it opens the file at the path
  EXPECT_TRUE(wait_until([&] { return lines_in(out) == 5; }, 60s)) << read_file(log);
  EXPECT_TRUE(wait_until(
      [&] {
        auto res = client.Get("/readyz");
        body = res ? res->body : "";
        return res && res->status == 200;
      },
      60s, 20ms))
      << body;
  daemon.signal(SIGTERM);
  EXPECT_EQ(daemon.wait(60s), 0) << read_file(log);
}

}  // namespace
}  // namespace outpost::testing
