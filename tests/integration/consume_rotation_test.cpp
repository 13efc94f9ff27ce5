// `outpost consume --from file:LOG` through log rotation, black box (issue 17 item 3): the file
// source follows the log as `tail -F` does (the renamed file is finished, then the new one read
// from byte 0), finds the file its checkpoint points into by identity after a restart, compares
// logs by canonical path, measures lag against the log as it is now, and says what it cannot
// read instead of skipping it (docs/consumers.md, "Log rotation").

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cli_process.h"
#include "outpost/json.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Appends events numbered from..from+n-1 as the file sink would (keys k0..k9); returns their ids.
std::vector<std::string> append_log(const std::string& path, int from, int n) {
  std::ofstream out(path, std::ios::app);
  std::vector<std::string> ids;
  for (int i = from; i < from + n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) =
        Event::make("ride", "{\"n\":" + std::to_string(i) + "}", "k" + std::to_string(i % 10));
    ids.push_back(e.id.str());
    out << to_json(e) << "\n";
  }
  return ids;
}

void add(std::vector<std::string>& to, const std::vector<std::string>& more) {
  to.insert(to.end(), more.begin(), more.end());
}

struct RotatedLog {
  TempDir dir;
  std::string log = dir / "log.jsonl";
  std::string cp = "sqlite:" + (dir / "cp.db");
  std::string out = dir / "out.jsonl";

  std::vector<std::string> consume(const std::string& from = {}) const {
    return {"consume", "--from", from.empty() ? "file:" + log : from,
            "--group", "g",      "--checkpoint",
            cp,        "--sink", "file:" + out,
            "--batch", "40"};
  }
  CliResult consume_until_idle(const std::string& from = {}) const {
    auto args = consume(from);
    args.insert(args.end(), {"--until-idle", "500"});
    return run_cli(args, {}, 60s);
  }
  std::vector<std::string> delivered() const {
    return fs::exists(out) ? event_ids_in(read_file(out)) : std::vector<std::string>{};
  }
  nlohmann::json group() const {
    auto r = run_cli({"consumers", "--checkpoint", cp, "list", "--json"});
    auto lines = lines_of(r.out);
    EXPECT_EQ(lines.size(), 1u) << r.all();
    return lines.empty() ? nlohmann::json{} : nlohmann::json::parse(lines[0]);
  }
  std::size_t dead() const {
    return lines_of(run_cli({"consumers", "--checkpoint", cp, "dead", "--group", "g"}).out).size();
  }
};

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Before: the restarted consumer went on at the old offset in the new file (a torn fragment
// parked, the 50 unread lines of the renamed file and the start of the new one never delivered,
// exit 0), and `consumers list` measured its lag in the wrong file.
TEST(ConsumeRotation, StoppedAcrossARotationWith50UnreadLinesDeliversAll250Once) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  auto r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  ASSERT_EQ(s.delivered(), ids);
  add(ids, append_log(s.log, 100, 50));  // unread when the log is rotated
  fs::rename(s.log, s.log + ".1");       // logrotate: mv LOG LOG.1; the writer reopens LOG
  add(ids, append_log(s.log, 150, 100));
  EXPECT_EQ(s.group()["lag"], 150) << "50 unread lines of log.jsonl.1 + 100 of the new file";

  r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered(), ids) << r.all();
  EXPECT_NE(r.err.find("parked 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("log.jsonl.1"), std::string::npos) << "the rotation is said: " << r.err;
  EXPECT_EQ(s.dead(), 0u);
  EXPECT_EQ(s.group()["lag"], 0);
}

// Before: a consumer running through a rotation never read the new file.
TEST(ConsumeRotation, RunningThroughRotationsDeliversEverything) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  CliProcess p(s.consume(), s.dir / "consume.log");
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 100; }, 60s))
      << read_file(s.dir / "consume.log");

  // Renamed, and the new file appears at once.
  add(ids, append_log(s.log, 100, 50));
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 150, 100));
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() >= ids.size(); }, 60s))
      << s.delivered().size() << " of " << ids.size() << "\n"
      << read_file(s.dir / "consume.log");
  // The line names the finished file where it is now, and the file reopened at the path (before:
  // the path both times, "read 'log.jsonl' to its end, now reading 'log.jsonl'").
  ASSERT_TRUE(wait_until(
      [&] { return read_file(s.dir / "consume.log").find("rotated: read") != std::string::npos; },
      60s));
  EXPECT_NE(read_file(s.dir / "consume.log")
                .find("rotated: read '" + s.log + ".1' to its end (byte " +
                      std::to_string(fs::file_size(s.log + ".1")) + "), now reading '" + s.log +
                      "' from byte 0"),
            std::string::npos)
      << read_file(s.dir / "consume.log");

  // logrotate's `create`: an empty new file at once while the writer still appends to the
  // renamed one until it reopens; and the old LOG.1 is replaced by the next one.
  fs::rename(s.log, s.log + ".1");
  std::ofstream(s.log).close();
  add(ids, append_log(s.log + ".1", 250, 30));
  std::this_thread::sleep_for(200ms);
  add(ids, append_log(s.log, 280, 70));
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() >= ids.size(); }, 60s))
      << s.delivered().size() << " of " << ids.size() << "\n"
      << read_file(s.dir / "consume.log");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(30s), 0) << read_file(s.dir / "consume.log");
  EXPECT_EQ(s.delivered(), ids) << read_file(s.dir / "consume.log");
  EXPECT_EQ(s.dead(), 0u);
  EXPECT_EQ(s.group()["lag"], 0);
}

// Before: `file:log.jsonl` from its directory and `file:DIR/./log.jsonl` were two logs (exit 2),
// while `file:log.jsonl` run from another directory was accepted as the group's log.
TEST(ConsumeRotation, ALogIsNamedByItsCanonicalPath) {
  RotatedLog s;
  const fs::path was = fs::current_path();
  struct Back {
    fs::path to;
    ~Back() { fs::current_path(to); }
  } back{was};
  auto ids = append_log(s.log, 0, 10);
  fs::current_path(s.dir.path());
  auto r = s.consume_until_idle("file:log.jsonl");
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.group()["from"], "file:" + (fs::canonical(s.dir.path()) / "log.jsonl").string());

  add(ids, append_log(s.log, 10, 5));
  fs::current_path(was);
  r = s.consume_until_idle("file:" + (s.dir.path() / "." / "log.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered(), ids);

  fs::create_directory(s.dir / "other");
  append_log(s.dir / "other/log.jsonl", 0, 3);
  fs::current_path(s.dir / "other");
  r = s.consume_until_idle("file:log.jsonl");
  EXPECT_EQ(r.code, 2) << "another directory's log.jsonl is another log: " << r.all();
  EXPECT_NE(r.err.find("use another group name"), std::string::npos) << r.err;
  EXPECT_EQ(s.delivered(), ids);
}

// Before: a restart after a rotation exited 1 ("shorter than the checkpoint") run after run until
// the new file grew past the old offset, then resumed mid-line and parked the torn fragment.
TEST(ConsumeRotation, RestartAfterRotationNeitherLoopsNorParksAFragment) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 200);
  ASSERT_EQ(s.consume_until_idle().code, 0);
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 200, 20));  // much shorter than the old checkpoint
  for (int run = 0; run < 2; ++run) {
    auto r = s.consume_until_idle();
    ASSERT_EQ(r.code, 0) << "run " << run << ": " << r.all();
    EXPECT_EQ(s.delivered(), ids);
  }
  fs::remove(s.log + ".1");               // the checkpoint is in the new file now
  add(ids, append_log(s.log, 220, 300));  // past the old offset
  auto r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered(), ids);
  EXPECT_EQ(s.dead(), 0u) << "a torn fragment was parked";
  EXPECT_EQ(s.group()["lag"], 0);
}

// A file replaced while part of it was unread, and gone: an error naming the unread range, said
// once, on every run; nothing of the new file is delivered around it. Before: exit 0, the 50
// unread lines lost silently.
TEST(ConsumeRotation, AReplacedAndLostFileIsAnErrorNamingTheUnreadRange) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  ASSERT_EQ(s.consume_until_idle().code, 0);
  const auto read_up_to = fs::file_size(s.log);
  append_log(s.log, 100, 50);
  fs::remove(s.log);  // replaced: the writer creates a new file
  append_log(s.log, 150, 100);
  for (int run = 0; run < 2; ++run) {
    auto r = s.consume_until_idle();
    EXPECT_EQ(r.code, 1) << r.all();
    const std::string range = "its bytes from " + std::to_string(read_up_to) + " to its end";
    EXPECT_EQ(count_of(r.err, range), 1u) << r.err;
    EXPECT_NE(r.err.find("were not read"), std::string::npos) << r.err;
    EXPECT_EQ(s.delivered(), ids) << "delivered around the lost range";
  }
}

// copytruncate: the log is copied to LOG.1 and truncated in place. The copy holds what was not
// read yet: read from the checkpoint to its end, then the truncated file from byte 0. Without a
// copy, the file is read again from byte 0 with a warning (as Filebeat does).
TEST(ConsumeRotation, TruncatedInPlaceReadsTheCopyThenTheFileFromTheStart) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  ASSERT_EQ(s.consume_until_idle().code, 0);
  add(ids, append_log(s.log, 100, 50));
  fs::copy_file(s.log, s.log + ".1");
  fs::resize_file(s.log, 0);
  add(ids, append_log(s.log, 150, 100));
  auto r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered(), ids) << r.all();
  EXPECT_EQ(s.dead(), 0u);

  fs::remove(s.log + ".1");
  fs::resize_file(s.log, 0);
  add(ids, append_log(s.log, 250, 10));
  r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered(), ids) << r.all();
  EXPECT_NE(r.err.find("truncated in place"), std::string::npos) << r.err;
  EXPECT_EQ(s.dead(), 0u);
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// B1: a writer that appends to the renamed file after the consumer moved on to the new one (a
// second writer process, a batch in flight on the old descriptor). Before: those lines were never
// read, with lag 0 and nothing in the log.
TEST(ConsumeRotation, LinesAppendedToTheRotatedFileAfterTheConsumerMovedOnAreRead) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  CliProcess p(s.consume(), s.dir / "consume.log");
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 100; }, 60s))
      << read_file(s.dir / "consume.log");
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 100, 40));
  ASSERT_TRUE(wait_until(
      [&] {
        return s.delivered().size() == 140 &&
               read_file(s.dir / "consume.log").find("rotated: read") != std::string::npos;
      },
      60s))
      << read_file(s.dir / "consume.log");
  add(ids, append_log(s.log + ".1", 140, 10));  // late, on the finished file
  add(ids, append_log(s.log, 150, 40));
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() >= ids.size(); }, 60s))
      << s.delivered().size() << " of " << ids.size() << "\n"
      << read_file(s.dir / "consume.log");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(30s), 0) << read_file(s.dir / "consume.log");
  EXPECT_TRUE(sorted(s.delivered()) == sorted(ids))
      << s.delivered().size() << " delivered of " << ids.size() << " (each once)";
  EXPECT_NE(read_file(s.dir / "consume.log").find("'" + s.log + ".1' grew after it was finished"),
            std::string::npos)
      << read_file(s.dir / "consume.log");
  EXPECT_EQ(s.dead(), 0u);
  EXPECT_EQ(s.group()["lag"], 0);
}

// The same across a restart: the checkpoint names the finished file and its offset beside the
// current one, so the late lines are counted in lag and read, and nothing is read twice.
TEST(ConsumeRotation, LateLinesOfTheRotatedFileAreReadAfterARestartAndCountedInLag) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  ASSERT_EQ(s.consume_until_idle().code, 0);
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 100, 50));
  auto r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  ASSERT_EQ(s.delivered(), ids);
  add(ids, append_log(s.log + ".1", 150, 10));  // late, while the consumer is stopped
  add(ids, append_log(s.log, 160, 5));
  EXPECT_EQ(s.group()["lag"], 15) << "10 late lines of log.jsonl.1 + 5 of the new file";
  for (int run = 0; run < 2; ++run) {
    r = s.consume_until_idle();
    ASSERT_EQ(r.code, 0) << "run " << run << ": " << r.all();
    EXPECT_TRUE(sorted(s.delivered()) == sorted(ids))
        << "run " << run << ": " << s.delivered().size() << " delivered of " << ids.size()
        << " (each once)\n"
        << r.all();
    EXPECT_EQ(s.delivered().size(), ids.size());
    EXPECT_EQ(s.group()["lag"], 0);
  }
  // The next rotation finishes the new file; the old one is no longer watched.
  fs::rename(s.log + ".1", s.log + ".2");
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 165, 5));
  r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_TRUE(sorted(s.delivered()) == sorted(ids))
      << s.delivered().size() << " delivered of " << ids.size() << "\n"
      << r.all();
  EXPECT_EQ(s.dead(), 0u);
}

// B1, a batch in flight on the old descriptor: the renamed file ends in half a line when the
// consumer moves on, and its writer finishes the line later. Before: the first half was skipped
// as a torn line and the second half parked as a message that is not an event; the event was
// never delivered.
TEST(ConsumeRotation, ALineOfTheRotatedFileFinishedAfterTheConsumerMovedOnIsReadWhole) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);
  CliProcess p(s.consume(), s.dir / "consume.log");
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 100; }, 60s))
      << read_file(s.dir / "consume.log");
  TempDir spare;  // one more event, written in two halves
  const std::string one = spare / "one.jsonl";
  add(ids, append_log(one, 100, 1));
  const std::string line = read_file(one);
  std::ofstream(s.log, std::ios::app) << line.substr(0, line.size() / 2);
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 101, 40));
  ASSERT_TRUE(wait_until(
      [&] { return read_file(s.dir / "consume.log").find("rotated: read") != std::string::npos; },
      60s))
      << read_file(s.dir / "consume.log");
  std::ofstream(s.log + ".1", std::ios::app) << line.substr(line.size() / 2);
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() >= ids.size(); }, 60s))
      << s.delivered().size() << " of " << ids.size() << "\n"
      << read_file(s.dir / "consume.log");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(30s), 0) << read_file(s.dir / "consume.log");
  EXPECT_TRUE(sorted(s.delivered()) == sorted(ids))
      << s.delivered().size() << " delivered of " << ids.size() << " (each once)";
  EXPECT_EQ(s.dead(), 0u) << "half a line parked";
  EXPECT_EQ(s.group()["lag"], 0);
}

// B1, two rotations on: the file finished before the last one is no longer read. A line its
// writer appends to it all the same is said, naming the file and the bytes, not lost in silence.
TEST(ConsumeRotation, GrowthOfAFileTwoRotationsBackIsSaidNamingTheFileAndBytes) {
  RotatedLog s;
  append_log(s.log, 0, 100);
  CliProcess p(s.consume(), s.dir / "consume.log");
  auto rotations = [&] { return count_of(read_file(s.dir / "consume.log"), "rotated: read"); };
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 100; }, 60s))
      << read_file(s.dir / "consume.log");
  fs::rename(s.log, s.log + ".1");
  append_log(s.log, 100, 10);
  ASSERT_TRUE(wait_until([&] { return rotations() == 1 && s.delivered().size() == 110; }, 60s))
      << read_file(s.dir / "consume.log");
  fs::rename(s.log + ".1", s.log + ".2");
  fs::rename(s.log, s.log + ".1");
  append_log(s.log, 110, 10);
  ASSERT_TRUE(wait_until([&] { return rotations() == 2 && s.delivered().size() == 120; }, 60s))
      << read_file(s.dir / "consume.log");
  const auto size = fs::file_size(s.log + ".2");
  append_log(s.log + ".2", 120, 3);
  const auto grown = fs::file_size(s.log + ".2");
  const std::string said = "'" + s.log + ".2' grew by " + std::to_string(grown - size) +
                           " bytes (" + std::to_string(size) + " to " + std::to_string(grown) +
                           ") after a later rotation finished another file: those lines are "
                           "not read";
  EXPECT_TRUE(wait_until(
      [&] { return read_file(s.dir / "consume.log").find(said) != std::string::npos; }, 60s))
      << read_file(s.dir / "consume.log");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(30s), 0) << read_file(s.dir / "consume.log");
  EXPECT_EQ(count_of(read_file(s.dir / "consume.log"), said), 1u) << "said once";
}

// A late write to the finished file makes it the newest by modification time. Before: at the
// next rotation the consumer took it (now LOG.2) for the file rotated after the one it read,
// and read it again from byte 0: every event of it handed on a second time (the inbox skipped
// them as duplicates here; one whose id it no longer holds is handled twice).
TEST(ConsumeRotation, ALateWriteToTheFinishedFileDoesNotMakeItReadAgainAtTheNextRotation) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);  // Z
  CliProcess p(s.consume(), s.dir / "consume.log");
  auto rotations = [&] { return count_of(read_file(s.dir / "consume.log"), "rotated: read"); };
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 100; }, 60s))
      << read_file(s.dir / "consume.log");
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 100, 40));  // A
  ASSERT_TRUE(wait_until([&] { return rotations() == 1 && s.delivered().size() == 140; }, 60s))
      << read_file(s.dir / "consume.log");
  // After A's last write, so Z's modification time is the newer one (whatever the clock's tick).
  std::this_thread::sleep_for(100ms);
  add(ids, append_log(s.log + ".1", 140, 10));  // late, on Z
  ASSERT_TRUE(wait_until([&] { return s.delivered().size() == 150; }, 60s))
      << read_file(s.dir / "consume.log");
  fs::rename(s.log + ".1", s.log + ".2");  // Z
  fs::rename(s.log, s.log + ".1");         // A
  add(ids, append_log(s.log, 150, 10));    // C
  ASSERT_TRUE(wait_until([&] { return rotations() >= 2 && s.delivered().size() >= 160; }, 60s))
      << s.delivered().size() << " of " << ids.size() << "\n"
      << read_file(s.dir / "consume.log");
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(30s), 0) << read_file(s.dir / "consume.log");
  EXPECT_EQ(s.delivered().size(), ids.size()) << read_file(s.dir / "consume.log");
  EXPECT_TRUE(sorted(s.delivered()) == sorted(ids)) << "each once";
  // Read once: the inbox would skip a second copy, counted as a duplicate.
  EXPECT_NE(read_file(s.dir / "consume.log").find(", duplicates 0,"), std::string::npos)
      << read_file(s.dir / "consume.log");
  EXPECT_EQ(rotations(), 2) << read_file(s.dir / "consume.log");
  EXPECT_EQ(read_file(s.dir / "consume.log").find("now reading '" + s.log + ".2'"),
            std::string::npos)
      << read_file(s.dir / "consume.log");
  EXPECT_EQ(s.dead(), 0u);
  EXPECT_EQ(s.group()["lag"], 0);
}

// The same order after a restart: the checkpoint is in LOG.2, whose late write came after
// LOG.1's last one. Before: LOG.1 was taken for an older file and skipped whole, and left out
// of lag.
TEST(ConsumeRotation, ALateWriteToTheCheckpointsFileDoesNotMakeTheNextRotatedOneSkipped) {
  RotatedLog s;
  auto ids = append_log(s.log, 0, 100);  // A
  ASSERT_EQ(s.consume_until_idle().code, 0);
  fs::rename(s.log, s.log + ".1");
  add(ids, append_log(s.log, 100, 20));  // B
  fs::rename(s.log + ".1", s.log + ".2");
  fs::rename(s.log, s.log + ".1");
  std::this_thread::sleep_for(100ms);
  add(ids, append_log(s.log + ".2", 120, 5));  // late, on A, after B's last write
  add(ids, append_log(s.log, 125, 10));        // D
  EXPECT_EQ(s.group()["lag"], 35) << "5 late lines of A + 20 of B + 10 of D";
  auto r = s.consume_until_idle();
  ASSERT_EQ(r.code, 0) << r.all();
  EXPECT_EQ(s.delivered().size(), ids.size()) << r.all();
  EXPECT_TRUE(sorted(s.delivered()) == sorted(ids)) << "each once";
  EXPECT_EQ(s.group()["lag"], 0);
}

}  // namespace
}  // namespace outpost::testing
