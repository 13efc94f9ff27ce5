// `outpost check|run --config` and the CLI's input and output rules at their edges, black box:
// what a config file gets wrong is exit 2 naming the key, its line and the limit, before
// anything is opened; a closed stdout ends a command quietly, a failing one is exit 1.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_process.h"

namespace outpost::testing {
namespace {

std::size_t entries_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

std::string relay_table(const TempDir& dir) {
  return "[[relay]]\nname = \"r\"\nstore = \"sqlite:" + dir / "o.db" +
         "\"\nsink = \"file:" + dir / "out.jsonl" + "\"\n";
}

// Runs `check` and `run` on `text` and expects exit 2 with each of `says`, nothing created.
void expect_refused(const TempDir& dir, const std::string& text,
                    const std::vector<std::string>& says) {
  const std::string config = dir / "outpost.toml";
  std::ofstream(config, std::ios::trunc) << text;
  for (const char* command : {"check", "run"}) {
    auto r = run_cli({command, "--config", config}, {}, std::chrono::seconds(30));
    EXPECT_EQ(r.code, 2) << command << "\n" << text << "\n" << r.all();
    for (const auto& s : says)
      EXPECT_NE(r.err.find(s), std::string::npos) << command << ": " << s << "\n" << r.err;
    EXPECT_EQ(entries_in(dir.path()), 1u) << command << ": something was created";
  }
}

// An integer beyond the 64-bit range is named as written, with the key and its limits. Before:
// toml11 saturated it and the message said "got 9223372036854775807".
TEST(CliConfig, AnIntegerBeyondTheRangeIsNamedAsWritten) {
  TempDir dir;
  expect_refused(dir, relay_table(dir) + "batch = 99999999999999999999\n",
                 {"outpost.toml:5: ", "key 'batch': must be 1-100000, got 99999999999999999999"});
  expect_refused(dir, relay_table(dir) + "batch = -99999999999999999999\n",
                 {"outpost.toml:5: ", "key 'batch': must be 1-100000, got -99999999999999999999"});
}

// Every sink scheme's URL is checked before anything opens, by `check` as by `run`: a pipeline
// after a good one whose sink URL has a misspelt or bad parameter is exit 2 naming it, and the
// good pipeline's store and file are not created. Before: http(s), nats and redis-stream had no
// parse-only check, so `check` said ok and `run` created the first pipeline's files, then failed.
TEST(CliConfig, EverySinksUrlIsCheckedBeforeAnythingOpens) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"http://127.0.0.1:1/x?timout_ms=5", "timout_ms"},
      {"https://127.0.0.1:1/x?concurency=3", "concurency"},
      {"http://127.0.0.1:1/x?concurrency=0", "concurrency"},
      {"http://127.0.0.1:1/x?timeout_ms=abc", "timeout_ms"},
      {"nats://127.0.0.1:1/x?strem=E", "stream"},
      {"redis-stream://127.0.0.1:1/x?maxln=5", "maxln"},
      {"kafka://127.0.0.1:1/x?timout_ms=5", "timout_ms"},
      {"file:/tmp/x.jsonl?x=1", "'x'"},
  };
  for (const auto& [url, names] : bad) {
    TempDir dir;
    expect_refused(dir,
                   relay_table(dir) + "\n[[relay]]\nname = \"bad\"\nstore = \"sqlite:" +
                       dir / "b.db" + "\"\nsink = \"" + url + "\"\n",
                   {"outpost.toml:9: [[relay]] 'bad': key 'sink': ", names});
  }
}

// A [[consume]] log URL is checked with the others, by `check` as by `run`, before the relay
// before it opens. Before: `check` said ok for any bad `from`.
TEST(CliConfig, AConsumeLogUrlIsCheckedBeforeAnythingOpens) {
  for (const std::string& from :
       {std::string("fil:/tmp/x.jsonl"), std::string("file:/tmp/x.jsonl?tail=1"),
        std::string("kafka://127.0.0.1:1/t"), std::string("redis-stream://127.0.0.1:1/s?grup=g")}) {
    TempDir dir;
    expect_refused(dir,
                   relay_table(dir) + "\n[[consume]]\nname = \"c\"\nfrom = \"" + from +
                       "\"\ngroup = \"g\"\ncheckpoint = \"sqlite:" + dir / "cp.db" +
                       "\"\nsink = \"file:" + dir / "c.jsonl" + "\"\n",
                   {"outpost.toml:8: [[consume]] 'c': key 'from': "});
  }
}

// backoff_base_ms > backoff_max_ms names the line of the key at fault. Before: the line of the
// [[relay]] / [[consume]] table header.
TEST(CliConfig, BackoffOrderNamesTheKeysLine) {
  TempDir dir;
  expect_refused(dir, relay_table(dir) + "backoff_base_ms = 5000\n\nbackoff_max_ms = 10\n",
                 {"outpost.toml:7: ", "key 'backoff_max_ms' (10) must be >= backoff_base_ms"});
  // Only the base given: the default maximum is below it, and the base's line is named.
  expect_refused(dir, relay_table(dir) + "\nbackoff_base_ms = 7200000\n",
                 {"outpost.toml:6: ", "backoff_max_ms"});
}

// [http] listen = "" is a mistake, not "no HTTP server" (leave the key out for that). Before:
// accepted, and the daemon ran without the server the file asked for.
TEST(CliConfig, AnEmptyHttpListenIsRefused) {
  TempDir dir;
  expect_refused(dir, "[http]\nlisten = \"\"\n\n" + relay_table(dir),
                 {"outpost.toml:2: ", "key 'listen'"});
}

// An event type is printed by `events`, the dashboard and the log: `emit --type` and the "type"
// field of `emit -` refuse control characters (C0, DEL) as consumer group names do, exit 2
// naming the field, before the store is opened. Before: written as given.
TEST(CliConfig, EmitRefusesControlCharactersInTheType) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "e.db";
  for (const std::string& type :
       {std::string("a\x1b[31m"), std::string("a\nb"), std::string("a\x7f")}) {
    auto r = run_cli({"emit", "--store", store, "--type", type, "--payload", "{}"}, {},
                     std::chrono::seconds(30));
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find("--type must not contain control characters"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  }
  auto r = run_cli({"emit", "--store", store, "-"},
                   "{\"type\":\"ok\",\"payload\":{}}\n{\"type\":\"a\\u001bb\",\"payload\":{}}\n",
                   std::chrono::seconds(30));
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("stdin line 2: field 'type' must not contain control characters"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(entries_in(dir.path()), 0u) << "the store was created";
}

// Runs outpost with `args`, stdout a pipe whose reader is already gone (what `| head -1` leaves
// once head has exited) or `stdout_path`; returns the exit code (128+signal when killed) and
// stderr.
std::pair<int, std::string> run_with_stdout(const std::vector<std::string>& args,
                                            const std::string& stdout_path = {}) {
  TempDir io;
  const std::string err_path = io / "stderr";
  int fds[2];
  if (pipe(fds) != 0) return {-1, "pipe failed"};
  close(fds[0]);  // no reader: every write is EPIPE
  pid_t pid = fork();
  if (pid == 0) {
    int out = stdout_path.empty() ? fds[1] : open(stdout_path.c_str(), O_WRONLY);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0) _exit(125);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv{const_cast<char*>(OUTPOST_BIN)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(OUTPOST_BIN, argv.data());
    _exit(127);
  }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(err_path);
  std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), err};
}

// One rule for every command's output: a reader that went away (`outpost schema | head -1`)
// ends the command quietly with its own exit code, as `events list | head` did; a stdout that
// cannot be written (a full disk) is exit 1 naming it. Before: `schema` exited 1 on a closed
// pipe, and `events list` exited 0 with its output lost on /dev/full.
TEST(CliOutput, AClosedStdoutIsQuietAndAFailingOneIsExit1) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "o.db";
  ASSERT_EQ(run_cli({"emit", "--store", store, "--type", "t", "--payload", "{}"}).code, 0);
  const std::vector<std::vector<std::string>> commands{
      {"schema", "--store", "redis://127.0.0.1:1/0"},
      {"schema", "--store", store},
      {"events", "--store", store, "list"},
  };
  for (const auto& args : commands) {
    auto [code, err] = run_with_stdout(args);
    EXPECT_EQ(code, 0) << args[0] << " " << args[2] << "\n" << err;
    EXPECT_EQ(err, "") << args[0] << " " << args[2];
    if (std::filesystem::exists("/dev/full")) {
      auto [full_code, full_err] = run_with_stdout(args, "/dev/full");
      EXPECT_EQ(full_code, 1) << args[0] << " " << args[2] << "\n" << full_err;
      EXPECT_NE(full_err.find("writing standard output"), std::string::npos) << full_err;
    }
  }
}

}  // namespace
}  // namespace outpost::testing
