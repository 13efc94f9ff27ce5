// `outpost consumers seek|delete`, black box, on a file log with the SQLite and the PostgreSQL
// checkpoint store (docs/consumers.md, "Moving and deleting a group"): usage errors (exit 2
// naming the value, nothing opened or created), a group that does not exist (exit 1 naming it,
// nothing written), each TARGET (beginning, end, a time, a position; a position that is not a
// line start refused), --reprocess, and a running `outpost consume` that notices a seek (reads on
// from there) and a delete (stops with exit 1).

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "cli_process.h"
#include "outpost/json.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

// n events as the file sink writes them, occurred an hour apart from 2026-01-01T00:00:00Z on.
std::vector<std::string> write_log(const std::string& path, int n) {
  std::ofstream out(path, std::ios::app);
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) = Event::make("ride", "{\"n\":" + std::to_string(i) + "}", "k");
    e.occurred_at = *parse_rfc3339("2026-01-01T00:00:00Z") + std::chrono::hours(i);
    ids.push_back(e.id.str());
    out << to_json(e) << "\n";
  }
  return ids;
}

// The checkpoint stores under test: SQLite in `dir`, PostgreSQL when OUTPOST_TEST_PG_URL is set
// (a prefix new on every run).
std::vector<std::string> checkpoint_urls(const TempDir& dir) {
  std::vector<std::string> urls{"sqlite:" + (dir / "cp.db")};
  if (const char* pg = std::getenv("OUTPOST_TEST_PG_URL")) {
    std::string url = pg;
    url += (url.find('?') == std::string::npos ? "?" : "&") + std::string("prefix=grp") +
           std::to_string(::getpid()) + "_" +
           std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000);
    urls.push_back(url);
  } else if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) {
    ADD_FAILURE() << "OUTPOST_TEST_PG_URL not set";
  }
  return urls;
}

CliResult consume_until_idle(const std::string& log, const std::string& cp,
                             const std::string& out) {
  return run_cli({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", cp, "--sink",
                  "file:" + out, "--until-idle", "300", "--quiet"});
}

// "moved group 'g' (LOG) from OLD to NEW" -> NEW.
std::string moved_to(const std::string& out) {
  auto at = out.rfind(" to ");
  EXPECT_NE(out.find("moved group 'g' (file:"), std::string::npos) << out;
  return at == std::string::npos ? "" : out.substr(at + 4, out.find('\n', at) - at - 4);
}

std::string byte_offset(const std::string& position) {
  return position.substr(0, position.find('@'));
}

TEST(ConsumerGroupsCli, BadInputIsExit2BeforeAnythingIsOpened) {
  TempDir dir;
  const std::string cp = "sqlite:" + (dir / "cp.db");
  struct Case {
    std::vector<std::string> args;
    std::string names;
  };
  std::vector<Case> cases{
      {{"consumers", "--checkpoint", cp, "seek", "--group", "g", "--to", ""}, "--to"},
      {{"consumers", "--checkpoint", cp, "seek", "--group", "g"}, "--to"},
      {{"consumers", "--checkpoint", cp, "seek", "--to", "end"}, "--group"},
      {{"consumers", "--checkpoint", cp, "seek", "--group", "g", "--to", "end", "--from",
        "fil:x.jsonl"},
       "fil"},
      {{"consumers", "--checkpoint", cp, "delete", "--group", "g", "--from", "nats://h/s"},
       "stream"},
      {{"consumers", "--checkpoint", "sqlite:" + (dir / "cp.db") + "?bad=1", "delete", "--group",
        "g"},
       "bad"},
      // libpq's values are checked when the URL is read, as for the outbox store (port 1:
      // had anything been opened, the error would be a refused connection, exit 1).
      {{"consumers", "--checkpoint", "postgresql://u@127.0.0.1:1/db?sslmode=bogus", "list"},
       "parameter 'sslmode' must be one of"},
      {{"consume", "--from", "file:" + (dir / "log.jsonl"), "--group", "g", "--checkpoint",
        "postgresql://u@127.0.0.1:1/db?target_session_attrs=x", "--sink",
        "file:" + (dir / "out.jsonl")},
       "parameter 'target_session_attrs' must be one of"},
      // --limit as every listing takes it (docs/cli.md, "Integer flags").
      {{"consumers", "--checkpoint", cp, "dead", "--group", "g", "--limit", "0"},
       "--limit: must be a whole number from 1 to 100000000, got '0'"},
      {{"consumers", "--checkpoint", cp, "dead", "--group", "g", "--limit", "-1"},
       "--limit: must be a whole number from 1 to 100000000, got '-1'"},
  };
  for (const auto& c : cases) {
    auto r = run_cli(c.args);
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find(c.names), std::string::npos) << r.err;
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "something was created";
}

TEST(ConsumerGroupsCli, SeekMovesAGroupToEachTargetAndDeleteForgetsIt) {
  TempDir dir;
  for (const auto& cp : checkpoint_urls(dir)) {
    SCOPED_TRACE(cp);
    const std::string log = dir / "log.jsonl", out = dir / "out.jsonl";
    std::filesystem::remove(log);
    std::filesystem::remove(out);
    auto ids = write_log(log, 6);
    auto r = consume_until_idle(log, cp, out);
    ASSERT_EQ(r.code, 0) << r.all();
    ASSERT_EQ(lines_of(read_file(out)).size(), 6u);
    const std::string end = std::to_string(std::filesystem::file_size(log));

    // A group that is not there: exit 1 naming it, nothing made.
    for (const std::vector<std::string>& op :
         {std::vector<std::string>{"seek", "--group", "nope", "--to", "beginning"},
          std::vector<std::string>{"delete", "--group", "nope"}}) {
      std::vector<std::string> args{"consumers", "--checkpoint", cp};
      args.insert(args.end(), op.begin(), op.end());
      r = run_cli(args);
      EXPECT_EQ(r.code, 1) << r.all();
      EXPECT_NE(r.err.find("no consumer group 'nope'"), std::string::npos) << r.err;
    }
    r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
    EXPECT_EQ(lines_of(r.out).size(), 1u) << r.out;

    auto seek = [&](const std::string& to, std::vector<std::string> more = {}) {
      std::vector<std::string> args{"consumers", "--checkpoint", cp, "seek", "--group",
                                    "g",         "--to",         to};
      args.insert(args.end(), more.begin(), more.end());
      return run_cli(args);
    };
    // A time: the first line whose event occurred at or after it is read next.
    r = seek("2026-01-01T02:30:00Z");
    ASSERT_EQ(r.code, 0) << r.all();
    const std::string third_line = moved_to(r.out);
    EXPECT_NE(r.out.find("from " + end + "@"), std::string::npos) << r.out;
    const std::string text = read_file(log);
    std::size_t start = 0;
    for (int i = 0; i < 3; ++i) start = text.find('\n', start) + 1;
    EXPECT_EQ(byte_offset(third_line), std::to_string(start)) << r.out;
    // Handled before: skipped as duplicates (the inbox stays).
    r = consume_until_idle(log, cp, out);
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(lines_of(read_file(out)).size(), 6u);

    // Not a line start: exit 2 naming it, nothing written.
    r = seek("5");
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find("'5'"), std::string::npos) << r.err;
    // Not a time and not a position (before: only the file source's words about checkpoints):
    // exit 2 saying what --to takes, nothing written.
    for (const char* bad : {"yesterday", "2026-13-45T00:00:00Z"}) {
      r = seek(bad);
      EXPECT_EQ(r.code, 2) << r.all();
      EXPECT_NE(r.err.find(std::string("--to '") + bad +
                           "': expected beginning, end, a position "
                           "of the group's log or an RFC 3339 time"),
                std::string::npos)
          << r.err;
    }
    r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
    EXPECT_NE(r.out.find("\"position\":\"" + end + "@"), std::string::npos) << r.out;

    // A position as `list` shows it, then --reprocess: handled again from there.
    r = seek(third_line, {"--reprocess"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(moved_to(r.out), third_line);
    r = consume_until_idle(log, cp, out);
    ASSERT_EQ(r.code, 0) << r.all();
    auto delivered = event_ids_in(read_file(out));
    ASSERT_EQ(delivered.size(), 9u);
    EXPECT_EQ(std::vector<std::string>(delivered.begin() + 6, delivered.end()),
              std::vector<std::string>(ids.begin() + 3, ids.end()));

    // The beginning and the end.
    r = seek("beginning");
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(byte_offset(moved_to(r.out)), "0");
    r = seek("end");
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(byte_offset(moved_to(r.out)), end);

    // Delete: checkpoint, dead letters and inbox (the 3 ids handled since --reprocess) gone; a
    // later consumer begins afresh.
    r = run_cli({"consumers", "--checkpoint", cp, "delete", "--group", "g"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_NE(r.out.find("deleted group 'g' (file:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("0 dead letters, 3 inbox rows"), std::string::npos) << r.out;
    r = run_cli({"consumers", "--checkpoint", cp, "delete", "--group", "g"});
    EXPECT_EQ(r.code, 1) << r.all();
    r = consume_until_idle(log, cp, out);
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(lines_of(read_file(out)).size(), 15u);
  }
}

TEST(ConsumerGroupsCli, ARunningConsumerReadsOnFromASeekAndStopsWhenItsGroupIsDeleted) {
  TempDir dir;
  for (const auto& cp : checkpoint_urls(dir)) {
    SCOPED_TRACE(cp);
    const std::string log = dir / "log.jsonl", out = dir / "out.jsonl", err = dir / "consume.log";
    for (const auto& f : {log, out, err}) std::filesystem::remove(f);
    write_log(log, 4);
    CliProcess consume({"consume", "--from", "file:" + log, "--group", "g", "--checkpoint", cp,
                        "--sink", "file:" + out},
                       err);
    auto lines = [&] { return lines_of(read_file(out)).size(); };
    ASSERT_TRUE(wait_until([&] { return lines() == 4; }, 60s)) << read_file(err);
    // Committed once it delivered: wait for the checkpoint to be at the end.
    const std::string end = std::to_string(std::filesystem::file_size(log));
    ASSERT_TRUE(wait_until(
        [&] {
          auto r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
          return r.out.find("\"position\":\"" + end + "@") != std::string::npos;
        },
        60s, 50ms));

    // Idle at the end of its log, it notices the move and handles everything again.
    auto r = run_cli({"consumers", "--checkpoint", cp, "seek", "--group", "g", "--to", "beginning",
                      "--reprocess"});
    ASSERT_EQ(r.code, 0) << r.all();
    ASSERT_TRUE(wait_until([&] { return lines() == 8; }, 60s)) << read_file(err);
    EXPECT_NE(read_file(err).find("moved by an operator"), std::string::npos) << read_file(err);

    r = run_cli({"consumers", "--checkpoint", cp, "delete", "--group", "g"});
    ASSERT_EQ(r.code, 0) << r.all();
    EXPECT_EQ(consume.wait(60s), 1) << read_file(err);
    EXPECT_NE(read_file(err).find("consumer group 'g' was deleted while this consumer ran"),
              std::string::npos)
        << read_file(err);
    r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
    EXPECT_EQ(r.out.find("\"group\":\"g\""), std::string::npos) << "recreated: " << r.out;
  }
}

}  // namespace
}  // namespace outpost::testing
