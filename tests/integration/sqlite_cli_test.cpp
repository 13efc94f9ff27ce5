// The `outpost` command line on a SQLite outbox, black box: the scenarios of issue 10 as a user
// runs them (a failing key must not stop other keys, also after SIGKILL of the relay holding
// its lease).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_process.h"
#include "hanging_webhook.h"
#include "refusing_webhook.h"
#include "server_process.h"

namespace outpost::testing {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Runs the outpost binary with `args` as a user who may read but not write `dir` (nobody when
// this test runs as root, who may write anything; else the caller, with `dir` made read-only).
// The binary is copied next to nothing private: nobody may not be able to reach the build tree.
CliResult run_cli_read_only(const std::filesystem::path& dir,
                            const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  TempDir io;
  fs::permissions(io.path(), fs::perms::all);  // nobody writes its stdout/stderr here
  const std::string bin = io / "outpost";
  // The launcher and the program it runs (apps/outpost/launcher.c), side by side as in the build.
  for (const char* name : {"outpost", "outpost-main"}) {
    fs::copy_file(fs::path(OUTPOST_BIN).parent_path() / name, io / name);
    fs::permissions(io / name, fs::perms::owner_all | fs::perms::group_read |
                                   fs::perms::group_exec | fs::perms::others_read |
                                   fs::perms::others_exec);
  }
  const bool root = ::geteuid() == 0;
  const auto dir_perms = fs::status(dir).permissions();
  std::vector<std::pair<fs::path, fs::perms>> saved;
  for (const auto& entry : fs::directory_iterator(dir))
    saved.emplace_back(entry.path(), entry.status().permissions());
  const auto r_x = fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                   fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir, r_x);
  for (const auto& [path, perms] : saved)
    fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);

  std::vector<std::string> argv{bin};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const std::string out_path = io / "stdout", err_path = io / "stderr";
  pid_t pid = ::fork();
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    if (root && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(126);
    ::execv(cargs[0], cargs.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  fs::permissions(dir, dir_perms);
  for (const auto& [path, perms] : saved) fs::permissions(path, perms);
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

class SqliteCliTest : public ::testing::Test {
 protected:
  std::string store() const { return "sqlite:" + dir_ / "outbox.db"; }
  std::string sink_path() const { return dir_ / "out.jsonl"; }

  std::string emit(const std::string& key) {
    auto r = run_cli({"emit", "--store", store(), "--type", "t", "--key", key, "--payload", "1"});
    EXPECT_EQ(r.code, 0) << r.all();
    auto ids = lines_of(r.out);
    return ids.empty() ? std::string() : ids[0];
  }

  json stats() {
    auto r = run_cli({"events", "--store", store(), "stats", "--json"});
    EXPECT_EQ(r.code, 0) << r.all();
    return r.code == 0 ? json::parse(r.out) : json::object();
  }

  // Polls `done` until it holds or `timeout` passes.
  static bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  }

  // After A1 is held back: emit B1, A2, C1, A3 one per transaction, run a relay into a file
  // and expect B1 and C1 delivered, while A's events wait or follow in order.
  void expect_other_keys_delivered() {
    const std::string b1 = emit("B"), a2 = emit("A"), c1 = emit("C"), a3 = emit("A");
    auto log = dir_ / "relay2.log";
    CliProcess relay({"relay", "--store", store(), "--sink", "file:" + sink_path()}, log);
    std::set<std::string> delivered;
    std::vector<std::string> a_order;
    auto read_sink = [&] {
      delivered.clear();
      a_order.clear();
      for (const auto& line : lines_of(read_file(sink_path()))) {
        auto e = json::parse(line);
        delivered.insert(e["id"].get<std::string>());
        if (e["key"] == "A") a_order.push_back(e["id"]);
      }
      return delivered.contains(b1) && delivered.contains(c1);
    };
    EXPECT_TRUE(eventually(read_sink, 30s))
        << "B1 and C1 were not delivered while A1 is held back: " << read_file(log);
    relay.signal(SIGTERM);
    ASSERT_EQ(relay.wait(30s), 0) << read_file(log);
    read_sink();
    // A1 may have come due and been delivered meanwhile; then A's events are in order.
    const std::vector<std::string> a_emitted{a1_, a2, a3};
    EXPECT_EQ(a_order,
              std::vector<std::string>(a_emitted.begin(), a_emitted.begin() + a_order.size()))
        << read_file(log);
    const std::string text = read_file(log);
    EXPECT_NE(text.find("store errors 0)"), std::string::npos) << text;
    EXPECT_EQ(text.find("out of step"), std::string::npos) << text;
  }

  TempDir dir_;
  std::string a1_;
};

TEST_F(SqliteCliTest, AFailingKeyDoesNotStopOtherKeys) {
  a1_ = emit("A");
  // A1 fails (the webhook refuses it: an attempt, docs/relay.md "Failure classes") and its retry
  // is minutes away.
  RefusingWebhook webhook;
  const std::string refused = webhook.url();
  auto log = dir_ / "relay1.log";
  {
    CliProcess relay({"relay", "--store", store(), "--sink", refused, "--backoff-base-ms", "600000",
                      "--backoff-max-ms", "600000", "--max-attempts", "10"},
                     log);
    // Claimed (attempts 1, or more if a short jittered retry came first) and no longer leased:
    // it failed and waits for its retry.
    ASSERT_TRUE(eventually(
        [&] {
          auto lines = lines_of(run_cli({"events", "--store", store(), "list"}).out);
          return lines.size() == 1 && json::parse(lines[0])["attempts"] >= 1 &&
                 stats().value("leased", -1) == 0;
        },
        30s))
        << read_file(log);
    relay.signal(SIGTERM);
    ASSERT_EQ(relay.wait(30s), 0) << read_file(log);
  }
  // `events blocked` names A's failing head, with its error and when it is retried.
  auto blocked = lines_of(run_cli({"events", "--store", store(), "blocked"}).out);
  ASSERT_EQ(blocked.size(), 1u);
  auto head = json::parse(blocked[0]);
  EXPECT_EQ(head["id"], a1_);
  EXPECT_EQ(head["key"], "A");
  EXPECT_GE(head["attempts"], 1);
  EXPECT_FALSE(head["last_error"].get<std::string>().empty()) << blocked[0];
  EXPECT_EQ(head.value("reason", ""), "failing") << blocked[0];
  // Full jitter: the retry is anywhere in [0, 600 s] from the failure (it was asserted > 60 s,
  // which failed one run in ten).
  ASSERT_TRUE(head.contains("next_attempt_in_s")) << blocked[0];
  EXPECT_LE(head["next_attempt_in_s"].get<double>(), 600.0) << blocked[0];
  EXPECT_TRUE(lines_of(run_cli({"events", "--store", store(), "leased"}).out).empty());
  expect_other_keys_delivered();
}

TEST_F(SqliteCliTest, ARelayKilledHoldingALeaseDoesNotStopOtherKeys) {
  a1_ = emit("A");
  // The relay leases A1 for ten minutes, hangs in the HTTP request, and is killed.
  HangingWebhook hangs_forever;
  std::string hangs =
      "http://127.0.0.1:" + std::to_string(hangs_forever.port()) + "/hook?timeout_ms=600000";
  CliProcess relay({"relay", "--store", store(), "--sink", hangs, "--lease-ms", "600000"},
                   dir_ / "relay1.log");
  ASSERT_TRUE(eventually([&] { return stats().value("leased", -1) == 1; }, 30s))
      << read_file(dir_ / "relay1.log");
  // `events leased` shows who holds A1 and until when; it is not failing, so not blocked.
  auto leased = lines_of(run_cli({"events", "--store", store(), "leased"}).out);
  ASSERT_EQ(leased.size(), 1u);
  auto held = json::parse(leased[0]);
  EXPECT_EQ(held["id"], a1_);
  EXPECT_FALSE(held.value("lease_owner", "").empty()) << leased[0];
  EXPECT_GT(held.value("lease_expires_in_s", 0.0), 60.0) << leased[0];
  EXPECT_TRUE(lines_of(run_cli({"events", "--store", store(), "blocked"}).out).empty());
  relay.signal(SIGKILL);
  relay.wait(30s);
  expect_other_keys_delivered();
}

}  // namespace
}  // namespace outpost::testing

namespace outpost::testing {
namespace {

TEST_F(SqliteCliTest, EventsWhereThereIsNoOutboxSaysSoAndCreatesNothing) {
  const std::string missing = dir_ / "missing.db";
  for (const std::vector<std::string>& op : {std::vector<std::string>{"stats"},
                                             {"list"},
                                             {"dead"},
                                             {"blocked"},
                                             {"leased"},
                                             {"retry", "--all"},
                                             {"discard", "--all"}}) {
    std::vector<std::string> args{"events", "--store", "sqlite:" + missing};
    args.insert(args.end(), op.begin(), op.end());
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 1) << op[0] << ": " << r.all();
    EXPECT_NE(r.err.find("no outbox"), std::string::npos) << op[0] << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(missing)) << op[0] << " created the file";
  }
  // A SQLite file of the application's without the outbox: named, and left as it was.
  const std::string other = dir_ / "app.db";
  ASSERT_EQ(run_cli({"emit", "--store", "sqlite:" + other + "?table=orders", "--type", "t",
                     "--payload", "1"})
                .code,
            0);
  const std::string before = read_file(other);
  auto r = run_cli({"events", "--store", "sqlite:" + other, "stats"});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("no outbox 'outbox'"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(other), before) << "the file was changed";
}

TEST_F(SqliteCliTest, InspectionWorksOnAReadOnlyDatabaseFile) {
  // One dead letter (the webhook refuses it) and one pending event.
  emit("A");
  RefusingWebhook webhook;
  const std::string refused = webhook.url();
  ASSERT_EQ(run_cli({"relay", "--store", store(), "--sink", refused, "--max-attempts", "1",
                     "--until-empty", "--quiet"})
                .code,
            3);  // --until-empty that dead-lettered events (docs/cli.md)
  const std::string pending = emit("B");
  ASSERT_FALSE(std::filesystem::exists(dir_ / "outbox.db-wal")) << "no writer is left";

  auto counts = run_cli_read_only(dir_.path(), {"events", "--store", store(), "stats", "--json"});
  ASSERT_EQ(counts.code, 0) << counts.all();
  auto s = json::parse(counts.out);
  EXPECT_EQ(s["pending"], 1);
  EXPECT_EQ(s["dead"], 1);
  auto list = run_cli_read_only(dir_.path(), {"events", "--store", store(), "list"});
  ASSERT_EQ(list.code, 0) << list.all();
  auto lines = lines_of(list.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(json::parse(lines[0])["id"], pending);
  auto dead = run_cli_read_only(dir_.path(), {"events", "--store", store(), "dead"});
  ASSERT_EQ(dead.code, 0) << dead.all();
  EXPECT_EQ(lines_of(dead.out).size(), 1u);
  for (const char* inspect : {"blocked", "leased"}) {
    auto r = run_cli_read_only(dir_.path(), {"events", "--store", store(), inspect});
    EXPECT_EQ(r.code, 0) << inspect << ": " << r.all();
    EXPECT_TRUE(r.out.empty()) << inspect << ": " << r.out;
  }
  // Writing is refused, as a runtime failure.
  auto retry = run_cli_read_only(dir_.path(), {"events", "--store", store(), "retry", "--all"});
  EXPECT_EQ(retry.code, 1) << retry.all();
  EXPECT_EQ(stats()["dead"], 1);
}

TEST_F(SqliteCliTest, NulInThePathIsRefusedBeforeAnythingIsCreated) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"events", "--store", "sqlite:" + dir_ / "a%00b.db", "stats"},
        {"emit", "--store", "sqlite:" + dir_ / "a%00b.db", "--type", "t", "--payload", "1"}}) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find("NUL"), std::string::npos) << r.err;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir_.path())) << "a file was created";
}

}  // namespace
}  // namespace outpost::testing
