// `outpost check|run --config` and the CLI's input rules at their edges, black box: what a config
// file gets wrong is exit 2 naming the key, its line and the limit, before anything is opened.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
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

}  // namespace
}  // namespace outpost::testing
