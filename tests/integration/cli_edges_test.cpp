// The `outpost` command line at its edges, black box: secrets in store and sink URLs never
// reach stdout or stderr on any scheme or error path (issue 10 defect 5); usage errors and bad
// input are exit 2 before anything is opened or created (defects 7 and 10).

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.h"
#include "refusing_webhook.h"
#include "wait_until.h"

namespace outpost::testing {
namespace {

// Unique enough that it cannot appear in a message by chance; no character that URLs encode.
constexpr const char* kSecret = "Zq7SekretPw9";

struct Case {
  std::vector<std::string> args;
  int code;  // expected exit code
};

std::string with_secret(std::string text) {
  for (auto p = text.find("PW"); p != std::string::npos; p = text.find("PW", p))
    text.replace(p, 2, kSecret);
  return text;
}

class CliSecretsTest : public ::testing::Test {
 protected:
  std::string store() const { return "sqlite:" + dir_ / "outbox.db"; }

  void expect_no_secret(const Case& c) {
    std::vector<std::string> args;
    for (const auto& a : c.args) args.push_back(with_secret(a));
    auto r = run_cli(args);
    std::string cmd;
    for (const auto& a : args) cmd += a + " ";
    EXPECT_EQ(r.code, c.code) << cmd << "\n" << r.all();
    EXPECT_FALSE(r.err.empty()) << cmd << ": an error path says something";
    EXPECT_EQ(r.all().find(kSecret), std::string::npos) << cmd << "\n" << r.all();
  }

  TempDir dir_;
};

// Bad parameters, unreachable servers and unsupported schemes for every store scheme.
TEST_F(CliSecretsTest, StoreUrlErrorsNeverPrintTheSecret) {
  const std::string db = dir_ / "x.db";
  const std::vector<Case> cases{
      // bad parameter (exit 2)
      {{"emit", "--store", "sqlite:" + db + "?password=PW&bogus=1", "--type", "t", "--payload",
        "1"},
       2},
      {{"events", "--store", "postgresql://app:PW@127.0.0.1:1/db?bogus=1", "stats"}, 2},
      {{"events", "--store", "postgres://app@127.0.0.1:1/db?password=PW", "stats"}, 2},
      {{"events", "--store", "redis://PW@127.0.0.1:1/0?bogus=1", "stats"}, 2},
      {{"events", "--store", "redis://user:PW@127.0.0.1:1/0?timeout_ms=x", "stats"}, 2},
      {{"events", "--store", "redis://PW@127.0.0.1:99999/0", "stats"}, 2},
      {{"events", "--store", "memory:?token=PW", "stats"}, 2},
      // unreachable server (exit 1)
      {{"events", "--store", "postgresql://app:PW@127.0.0.1:1/db", "stats"}, 1},
      {{"events", "--store", "redis://PW@127.0.0.1:1/0", "stats"}, 1},
      {{"events", "--store", "redis://user:PW@127.0.0.1:1/0", "stats"}, 1},
      // unsupported scheme (exit 2)
      {{"events", "--store", "amqp://user:PW@127.0.0.1:1/vhost", "stats"}, 2},
      {{"events", "--store", "rediss://PW@127.0.0.1:1/0", "stats"}, 2},
      // a flag's value that the parser echoes
      {{"relay", "--store", "redis://PW@127.0.0.1:1/0", "--sink", "file:x", "--batch",
        "redis://PW@h/0"},
       2},
      {{"emit", "--store=redis://PW@127.0.0.1:1/0", "--type", "t", "--payload", "1", "extra",
        "redis://PW@h"},
       2},
  };
  for (const auto& c : cases) expect_no_secret(c);
}

// Bad parameters and unsupported schemes for every sink scheme, and connection failures at open.
TEST_F(CliSecretsTest, SinkUrlErrorsNeverPrintTheSecret) {
  auto relay = [&](const std::string& sink, int code) {
    return Case{{"relay", "--store", "memory:", "--sink", sink, "--until-empty"}, code};
  };
  const std::vector<Case> cases{
      relay("file:" + dir_ / "o.jsonl?secret=PW", 2),
      relay("http://user:PW@127.0.0.1:1/hook?header.Authorization=Bearer%20PW&concurrenc=2", 2),
      relay("https://PW@127.0.0.1:1/hook?header.Authorization=PW&timeout_ms=0", 2),
      relay("kafka://127.0.0.1:1/t?sasl.password=PW&no.such.property=1", 2),
      relay("kafka://127.0.0.1:1/t?ssl.key.password=PW&bogus=1", 2),
      relay("kafka://user:PW@127.0.0.1:1/t", 2),
      relay("redis-stream://PW@127.0.0.1:1/s?bogus=1", 2),
      relay("redis-stream://user:PW@127.0.0.1:1/s?maxlen=x", 2),
      relay("nats://PW@127.0.0.1:1/s?stream=S&bogus=1", 2),
      relay("nats://user:PW@127.0.0.1:1/s?bogus=1", 2),
      relay("amqp://user:PW@127.0.0.1:1/x", 2),
      relay("nats://PW@127.0.0.1:1/s?stream=S", 1),  // connects at open
  };
  for (const auto& c : cases) expect_no_secret(c);
}

// Delivery failures, to a destination that is down and to one that refuses: the relay's error
// lines, its summary and the dead letter's last_error (printed by `events dead`).
TEST_F(CliSecretsTest, DeliveryFailuresNeverPrintTheSecret) {
  // A destination that cannot be reached is down, not refusing (docs/relay.md, "Failure
  // classes"): the relay pauses and says so once, with the sink's error ("sink ... down since
  // ...: unavailable: ..."), instead of dead-lettering. Each relay runs until it said that, then
  // is stopped with SIGTERM; nothing it printed holds the secret.
  const std::vector<std::string> down_sinks{
      "http://user:PW@127.0.0.1:1/hook?token=PW&timeout_ms=2000",
      "https://PW@127.0.0.1:1/hook?header.Authorization=Bearer%20PW&timeout_ms=2000",
      "kafka://127.0.0.1:1/t?sasl.username=u&sasl.password=PW&timeout_ms=300",
      "redis-stream://PW@127.0.0.1:1/s?timeout_ms=2000",
  };
  ASSERT_EQ(run_cli({"emit", "--store", store(), "--type", "t", "--payload", "{}"}).code, 0);
  int n = 0;
  for (const auto& sink : down_sinks) {
    const std::string log = dir_ / ("relay-" + std::to_string(++n) + ".log");
    CliProcess relay({"relay", "--store", store(), "--sink", with_secret(sink)}, log);
    EXPECT_TRUE(wait_until([&] { return read_file(log).find("down since") != std::string::npos; },
                           std::chrono::seconds(60), std::chrono::milliseconds(50)))
        << sink << "\n"
        << read_file(log);
    relay.signal(SIGTERM);
    EXPECT_EQ(relay.wait(std::chrono::seconds(30)), 0) << sink << "\n" << read_file(log);
    EXPECT_EQ(read_file(log).find(kSecret), std::string::npos) << sink << "\n" << read_file(log);
  }
  // A webhook that answers and refuses the event: an attempt, then a dead letter whose last
  // error names the sink; neither the relay's output nor the dead letter holds the secret.
  RefusingWebhook refusing;
  const std::string port = std::to_string(refusing.port());
  bool first = true;
  for (const std::string& sink :
       {"http://user:PW@127.0.0.1:" + port + "/hook?token=PW",
        "http://127.0.0.1:" + port + "/hook?header.Authorization=Bearer%20PW"}) {
    if (!first) {
      ASSERT_EQ(run_cli({"events", "--store", store(), "retry", "--all"}).code, 0);
    }
    first = false;
    auto r = run_cli({"relay", "--store", store(), "--sink", with_secret(sink), "--until-empty",
                      "--max-attempts", "1"});
    EXPECT_EQ(r.code, 3) << sink << "\n" << r.all();  // dead-lettered (docs/cli.md, relay)
    EXPECT_NE(r.err.find("dead 1"), std::string::npos) << r.all();
    EXPECT_EQ(r.all().find(kSecret), std::string::npos) << sink << "\n" << r.all();
  }
  auto dead = run_cli({"events", "--store", store(), "dead"});
  EXPECT_EQ(dead.code, 0) << dead.all();
  EXPECT_EQ(lines_of(dead.out).size(), 1u) << dead.out;
  EXPECT_NE(dead.out.find("HTTP 422"), std::string::npos) << dead.out;
  EXPECT_EQ(dead.all().find(kSecret), std::string::npos) << dead.all();
}

// A TOML syntax or duplicate-key error in `check|run --config` names FILE:LINE and toml11's
// words, never the source line toml11 quotes: that line may hold a password or admin_token.
TEST_F(CliSecretsTest, ConfigSyntaxErrorsNeverQuoteTheSecretLine) {
  struct Bad {
    std::string text;
    int line;
  };
  const std::vector<Bad> bad{
      {"[[relay]]\nname = \"x\"\nstore = \"redis://PW@127.0.0.1:6379/0\" sink\n", 3},
      {"[http]\nlisten = \"127.0.0.1:9100\"\nadmin_token = \"s3cretPW\"\n"
       "admin_token = \"s3cretPW\"\n",
       4},
  };
  auto file = dir_ / "bad.toml";
  for (const auto& b : bad) {
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out << with_secret(b.text);
    }
    for (const char* cmd : {"check", "run"}) {
      auto r = run_cli({cmd, "--config", file}, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 2) << cmd << " " << b.text << "\n" << r.all();
      EXPECT_NE(r.err.find(file + ":" + std::to_string(b.line) + ": not valid TOML: "),
                std::string::npos)
          << r.err;
      EXPECT_EQ(r.all().find(kSecret), std::string::npos) << r.all();
    }
  }
}

// Issue 10 defect 6: `emit -` -> `events list` and -> the file sink give back every JSON value
// and every string exactly; binary travels base64; what cannot be kept is refused (exit 2).
// A missing required flag printed CLI11's bare "--store is required", without the documented
// "outpost: error:" prefix (docs/cli.md) every other usage error has. Found by trying the CLI.
TEST(CliUsageErrors, AMissingRequiredFlagHasThePrefixAndNamesTheCommand) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> calls{
      {"emit", {"emit", "--type", "t", "--payload", "{}"}},
      {"relay", {"relay", "--store", "sqlite:/nonexistent/x.db"}},
      {"consumers list", {"consumers", "list"}},
      {"consumers seek", {"consumers", "--checkpoint", "sqlite:/nonexistent/c.db", "seek"}},
  };
  for (const auto& [command, args] : calls) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << command << ": " << r.all();
    EXPECT_EQ(r.err.rfind("outpost: error: " + command + ": ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("is required"), std::string::npos) << r.err;
  }
}

TEST(CliRoundTrip, EmitListAndFileSinkKeepEveryPayload) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "rt.db";
  const std::vector<std::string> payloads{
      R"("payload":"123")",
      R"("payload":"{\"a\":1}")",
      R"("payload":"null")",
      R"("payload":"")",
      R"("payload":null)",
      R"("payload":123456789012345678901234567890)",
      R"("payload":{"a":1.10,"b":[1e2,-0]})",
      R"("payload_base64":"AP/DKAo=")",
  };
  std::string input;
  for (const auto& p : payloads) input += R"({"type":"t","key":"k",)" + p + "}\n";
  auto emit = run_cli({"emit", "--store", store, "-"}, input);
  ASSERT_EQ(emit.code, 0) << emit.all();

  auto list = run_cli({"events", "--store", store, "list"});
  ASSERT_EQ(list.code, 0) << list.all();
  auto lines = lines_of(list.out);
  ASSERT_EQ(lines.size(), payloads.size());
  for (std::size_t i = 0; i < lines.size(); ++i)
    EXPECT_NE(lines[i].find("," + payloads[i] + ","), std::string::npos)
        << "payload " << i << " changed: " << lines[i];

  // Re-emitting what was listed lists the same lines (ids kept).
  auto again = run_cli({"emit", "--store", "sqlite:" + dir / "rt2.db", "-"}, list.out);
  ASSERT_EQ(again.code, 0) << again.all();
  auto list2 = run_cli({"events", "--store", "sqlite:" + dir / "rt2.db", "list"});
  EXPECT_EQ(list2.out, list.out);

  auto relay = run_cli({"relay", "--store", store, "--sink", "file:" + dir / "out.jsonl",
                        "--until-empty", "--quiet"});
  ASSERT_EQ(relay.code, 0) << relay.all();
  auto file = lines_of(read_file(dir / "out.jsonl"));
  ASSERT_EQ(file.size(), payloads.size());
  for (std::size_t i = 0; i < file.size(); ++i)
    EXPECT_NE(file[i].find("," + payloads[i] + ","), std::string::npos)
        << "payload " << i << " changed in the file sink: " << file[i];

  for (const char* bad :
       {R"({"type":"t","payload":1,"payload_base64":"QQ=="})",
        R"({"type":"t","payload_base64":"QQ"})",
        R"({"type":"t","payload":[1],"headers":{"content_type":"text/plain"}})"}) {
    auto r = run_cli({"emit", "--store", store, "-"}, std::string("\n") + bad + "\n");
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.all();
    EXPECT_NE(r.err.find("stdin line 2"), std::string::npos) << r.err;
  }
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += a.substr(0, 60) + " ";
  return s;
}

std::size_t entries_in(const std::filesystem::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// Issue 10 defect 10: a usage error is exit 2 naming the bad part, and nothing is created: not
// the SQLite file, not the sink's file. Before: the relay opened the store first, so a bad sink
// URL or --metrics address left an outbox database (or PostgreSQL tables) behind; a bad store
// parameter was found only by opening (and a PostgreSQL one only after connecting).
TEST(CliUsage, RelayAndBenchCreateNothingOnABadFlagOrUrl) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "outbox.db";
  const std::string sink = "file:" + dir / "out.jsonl";
  struct Usage {
    std::vector<std::string> args;
    std::string names;  // what the message must name
  };
  const std::vector<Usage> cases{
      {{"relay", "--store", store, "--sink", "amqp://x"}, "amqp"},
      {{"relay", "--store", store, "--sink", sink, "--metrics", "bogus"}, "--metrics"},
      {{"relay", "--store", store, "--sink", sink, "--metrics", "127.0.0.1:99999"}, "--metrics"},
      {{"relay", "--store", store, "--sink", sink, "--metrics", "256.1.1.1:0"}, "256.1.1.1"},
      {{"relay", "--store", store, "--sink", sink, "--metrics", "[::g]:0"}, "::g"},
      {{"relay", "--store", store, "--sink", sink, "--metrics", "no_such host:0"}, "no_such"},
      // Lead's defect 5: a name that does not resolve was found at bind, after the store and
      // sink were opened (exit 1, files left behind).
      {{"relay", "--store", store, "--sink", sink, "--metrics", "unresolvable.invalid:0"},
       "host 'unresolvable.invalid' does not resolve"},
      {{"relay", "--store", store, "--sink", "http://127.0.0.1:1/x?timeout_ms=0"}, "timeout_ms"},
      {{"relay", "--store", store, "--sink", "nats://127.0.0.1:1/subject"}, "stream"},
      {{"relay", "--store", store, "--sink", "kafka://127.0.0.1:1/t?partitioner=murmur3"},
       "parameter 'partitioner' is 'murmur3'; it must be one of murmur2_random"},
      {{"relay", "--store", store, "--sink", sink, "--batch", "0"}, "--batch"},
      {{"relay", "--store", store, "--sink", sink, "--no-such-flag"}, "--no-such-flag"},
      {{"relay", "--store", store + "?tabel=x", "--sink", sink}, "tabel"},
      {{"relay", "--store", store + "%00tail", "--sink", sink}, "NUL"},
      {{"relay", "--store", "postgresql://u@127.0.0.1:1/db?tabel=x", "--sink", sink}, "tabel"},
      {{"relay", "--store", "redis://127.0.0.1:1/0?prefx=x", "--sink", sink}, "prefx"},
      {{"relay", "--store", "memory:?x=1", "--sink", sink}, "'x'"},
      {{"relay", "--store", "amqp://h/x", "--sink", sink}, "amqp"},
      {{"emit", "--store", store + "?synchronous=off", "--type", "t", "--payload", "1"},
       "synchronous"},
      {{"events", "--store", store + "?tabel=x", "stats"}, "tabel"},
      {{"bench", "--store", store, "--sink", "amqp://x"}, "amqp"},
      {{"bench", "--store", store + "?synchronous=off", "--sink", sink}, "synchronous"},
  };
  for (const auto& c : cases) {
    auto r = run_cli(c.args, {}, std::chrono::seconds(30));
    EXPECT_EQ(r.code, 2) << joined(c.args) << "\n" << r.all();
    EXPECT_NE(r.err.find(c.names), std::string::npos) << joined(c.args) << "\n" << r.err;
    EXPECT_EQ(entries_in(dir.path()), 0u) << joined(c.args) << ": something was created";
    std::filesystem::remove_all(dir.path());
    std::filesystem::create_directories(dir.path());
  }
}

// Lead's defect 2: every integer flag of every command takes decimal digits only (as integer URL
// parameters do), exit 2 naming the flag, nothing created. Before: CLI11 read integers with
// strtoll(..., 0), so `--batch 0x10` was 16, `--limit 010` was 8, and ' 5' or '+5' passed.
TEST(CliUsage, IntegerFlagsAreDecimalOnEveryCommand) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "o.db", sink = "file:" + dir / "out.jsonl";
  const std::vector<std::vector<std::string>> commands{
      {"relay", "--store", store, "--sink", sink, "--batch"},
      {"relay", "--store", store, "--sink", sink, "--lease-ms"},
      {"relay", "--store", store, "--sink", sink, "--max-attempts"},
      {"relay", "--store", store, "--sink", sink, "--concurrency"},
      {"relay", "--store", store, "--sink", sink, "--deliver-timeout-ms"},
      {"events", "--store", store, "list", "--limit"},
      {"events", "--store", store, "dead", "--limit"},
      {"bench", "--store", store, "--events"},
      {"bench", "--store", store, "--keys"},
      {"consume", "--from", "file:" + dir / "log", "--group", "g", "--checkpoint", store, "--sink",
       sink, "--until-idle"},
      {"consume", "--from", "file:" + dir / "log", "--group", "g", "--checkpoint", store, "--sink",
       sink, "--batch"},
      {"consumers", "--checkpoint", store, "dead", "--group", "g", "--limit"},
      {"demo", "unified-log", "--log", "file:" + dir / "log", "--seed"},
      {"demo", "unified-log", "--log", "file:" + dir / "log", "--seconds"},
  };
  for (const auto& command : commands) {
    const std::string& flag = command.back();
    for (const char* value : {"0x10", "+5", " 5", "5 ", "5x", "1e3", "99999999999999999999", ""}) {
      auto args = command;
      args.push_back(value);
      auto r = run_cli(args, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 2) << joined(args) << "\n" << r.all();
      EXPECT_NE(r.err.find(flag), std::string::npos) << joined(args) << "\n" << r.err;
      EXPECT_EQ(entries_in(dir.path()), 0u) << joined(args) << ": something was created";
    }
  }
  // Negative numbers: refused by unsigned flags, and by the range of signed ones.
  for (const auto& command : {commands[0], commands[1], commands[9]}) {
    auto args = command;
    args.push_back("-5");
    auto r = run_cli(args, {}, std::chrono::seconds(30));
    EXPECT_EQ(r.code, 2) << joined(args) << "\n" << r.all();
    EXPECT_NE(r.err.find(command.back()), std::string::npos) << joined(args) << "\n" << r.err;
    EXPECT_EQ(entries_in(dir.path()), 0u) << joined(args);
  }

  // Leading zeros are decimal: --limit 010 lists ten events of twelve (octal would be eight).
  std::string lines;
  for (int i = 0; i < 12; ++i)
    lines += R"({"type":"t","payload":1})"
             "\n";
  auto emit = run_cli({"emit", "--store", store, "-"}, lines);
  ASSERT_EQ(emit.code, 0) << emit.all();
  auto list = run_cli({"events", "--store", store, "list", "--limit", "010"});
  EXPECT_EQ(list.code, 0) << list.all();
  EXPECT_EQ(lines_of(list.out).size(), 10u) << list.out;
}

// Lead's defect 3: one rule for numbers in payloads on both paths of emit. Before: `emit -` with
// "payload":1e400 was exit 2 but `emit --payload 1e400` stored the text "1e400" (a number in,
// a string out). Now both refuse a number beyond double range (exit 2 naming it, nothing
// created) and both keep it as text when it is given as text.
TEST(CliUsage, EmitRefusesNumbersBeyondDoubleRangeOnBothPaths) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "o.db";
  for (const std::string payload : {"1e400", "-1e999", R"({"a":[1,1E+309]})"}) {
    const std::string number = payload == "-1e999"  ? "-1e999"
                               : payload == "1e400" ? "1e400"
                                                    : "1E+309";
    auto flag = run_cli({"emit", "--store", store, "--type", "t", "--payload", payload});
    EXPECT_EQ(flag.code, 2) << payload << "\n" << flag.all();
    EXPECT_NE(flag.err.find("--payload: number '" + number + "' is beyond the range"),
              std::string::npos)
        << flag.err;
    auto line = run_cli({"emit", "--store", store, "-"}, R"({"type":"t","payload":1})"
                                                         "\n"
                                                         R"({"type":"t","key":"k","payload":)" +
                                                             payload + "}\n");
    EXPECT_EQ(line.code, 2) << payload << "\n" << line.all();
    EXPECT_NE(
        line.err.find("stdin line 2: event JSON: number '" + number + "' is beyond the range"),
        std::string::npos)
        << line.err;
    EXPECT_EQ(entries_in(dir.path()), 0u) << payload << ": something was created";
  }
  // Given as text it is text on both paths, and numbers within range stay JSON as written.
  ASSERT_EQ(run_cli({"emit", "--store", store, "--type", "t", "--payload", "1e400", "--header",
                     "content_type=text/plain"})
                .code,
            0);
  ASSERT_EQ(run_cli({"emit", "--store", store, "-"}, R"({"type":"t","payload":"1e400"})"
                                                     "\n")
                .code,
            0);
  ASSERT_EQ(run_cli({"emit", "--store", store, "--type", "t", "--payload", "1e308"}).code, 0);
  auto list = run_cli({"events", "--store", store, "list"});
  auto lines = lines_of(list.out);
  ASSERT_EQ(lines.size(), 3u) << list.all();
  EXPECT_NE(lines[0].find(R"("payload":"1e400")"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"("payload":"1e400")"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find(R"("payload":1e308,)"), std::string::npos) << lines[2];
}

// Lead's defect 4: duplicate ids in one `emit -` input name both stdin lines (exit 2, before
// anything is opened), and an id the store already holds names its line (exit 1, the store's
// conflict), on every store. Before: exit 1 after opening (the SQLite file created), the message
// naming only the id, in each store's own words.
TEST(CliUsage, EmitNamesTheStdinLinesOfADuplicateId) {
  TempDir dir;
  std::vector<std::string> stores{"sqlite:" + dir / "d.db"};
  const std::string tag = std::to_string(::getpid());
  for (const char* env : {"OUTPOST_TEST_PG_URL", "OUTPOST_TEST_REDIS_URL"}) {
    const char* url = std::getenv(env);
    if (!url) {
      if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) ADD_FAILURE() << env << " not set";
      continue;
    }
    std::string u = url;
    const bool postgres = std::string(env).find("_PG_") != std::string::npos;
    u += std::string(u.find('?') == std::string::npos ? "?" : "&") +
         (postgres ? "table=dupids" : "prefix=dupids") + tag;
    stores.push_back(u);
  }
  const std::string id = "01a20da8-adca-71e4-8841-f908814bd06c";
  const std::string one = R"({"type":"t","payload":1})";
  const std::string with_id = R"({"id":")" + id + R"(","type":"t","payload":1})";
  for (const auto& store : stores) {
    auto twice =
        run_cli({"emit", "--store", store, "-"}, one + "\n" + with_id + "\n\n" + with_id + "\n");
    EXPECT_EQ(twice.code, 2) << store << "\n" << twice.all();
    EXPECT_NE(twice.err.find("stdin line 4: duplicate event id " + id + " (also on stdin line 2)"),
              std::string::npos)
        << store << "\n"
        << twice.err;
    EXPECT_TRUE(twice.out.empty()) << twice.out;
    EXPECT_EQ(entries_in(dir.path()), 0u) << store << ": something was created";
    auto first = run_cli({"emit", "--store", store, "-"}, one + "\n" + with_id + "\n");
    ASSERT_EQ(first.code, 0) << store << "\n" << first.all();
    auto again = run_cli({"emit", "--store", store, "-"}, one + "\n" + with_id + "\n");
    EXPECT_EQ(again.code, 1) << store << "\n" << again.all();
    EXPECT_NE(again.err.find("conflict): stdin line 2: duplicate event id " + id),
              std::string::npos)
        << store << "\n"
        << again.err;
    std::filesystem::remove_all(dir.path());
    std::filesystem::create_directories(dir.path());
  }
}

// Lead's defect 5, the daemon: [http] listen goes through the same rule as --metrics (syntax
// when the file is read, the host resolved by check and before run opens anything).
TEST(CliUsage, HttpListenHostMustResolveBeforeAnythingIsOpened) {
  TempDir dir;
  const std::string config = dir / "outpost.toml";
  for (const auto& [listen, says] : std::vector<std::pair<std::string, std::string>>{
           {"unresolvable.invalid:0", "host 'unresolvable.invalid' does not resolve"},
           {"256.1.1.1:0", "host '256.1.1.1' is not an IPv4 or IPv6 address or a host name"},
           {"127.0.0.1", "must be HOST:PORT"}}) {
    std::ofstream(config) << "[http]\nlisten = \"" << listen
                          << "\"\n\n[[relay]]\nname = \"r\"\nstore = \"sqlite:" << dir / "o.db"
                          << "\"\nsink = \"file:" << dir / "out.jsonl"
                          << "\"\n";
    for (const char* command : {"check", "run"}) {
      auto r = run_cli({command, "--config", config}, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 2) << command << " " << listen << "\n" << r.all();
      EXPECT_NE(r.err.find(says), std::string::npos) << command << "\n" << r.err;
      EXPECT_NE(r.err.find(config), std::string::npos) << command << "\n" << r.err;
      EXPECT_EQ(entries_in(dir.path()), 1u)
          << command << " " << listen << ": something was created";
    }
  }
}

// RFC 3339 offsets stop at 23:59 (operator s8, A1 addendum): `emit --at` with +25:00 was stored
// as a time 25 hours earlier; now exit 2 naming the value, before the store is opened.
TEST(CliUsage, EmitAtRefusesAnOffsetBeyondRfc3339) {
  TempDir dir;
  for (const std::string at :
       {"2026-11-27T09:00:00+25:00", "2026-11-27T09:00:00-24:00", "2026-11-27T09:00:00+01:60"}) {
    auto r = run_cli({"emit", "--store", "sqlite:" + dir / "o.db", "--type", "t", "--payload", "{}",
                      "--at", at});
    EXPECT_EQ(r.code, 2) << at << "\n" << r.all();
    EXPECT_NE(r.err.find("--at"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'" + at + "'"), std::string::npos) << r.err;
    EXPECT_EQ(entries_in(dir.path()), 0u) << at << ": the store was created";
  }
}

// An error message quotes what it refuses (a pipeline name, a key, a URL): its control
// characters are escaped as in the log (docs/operations.md, "Logs"), so a config file or an
// argument can neither send an escape sequence to the operator's terminal nor forge a second
// error line. Before: `check`, `run` and `relay` printed them raw.
TEST(CliUsage, ErrorMessagesEscapeControlCharactersOfWhatTheyQuote) {
  TempDir dir;
  const std::string config = dir / "outpost.toml";
  const std::string tail =
      "store = \"sqlite:" + dir / "o.db" + "\"\nsink = \"file:" + dir / "out.jsonl" + "\"\n";
  auto clean = [](const std::string& err) {
    return err.find('\x1b') == std::string::npos && err.find("\xc2\x9b") == std::string::npos;
  };
  for (const std::string& table :
       {std::string("[[relay]]\nname = \"a\\u001b[31mred\\u009b\"\n"),
        std::string("[[relay]]\nname = \"a\\nb\"\n"),
        std::string("[[relay]]\nname = \"a\"\n\"bad\\nkey\\u001b\" = 1\n")}) {
    std::ofstream(config) << table << tail;
    for (const char* command : {"check", "run"}) {
      auto r = run_cli({command, "--config", config}, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 2) << command << " " << table << "\n" << r.all();
      EXPECT_TRUE(clean(r.err)) << command << " " << table << "\n" << r.err;
      // One problem, one line.
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command << "\n" << r.err;
      EXPECT_TRUE(r.err.find("\\x1b") != std::string::npos ||
                  r.err.find("\\n") != std::string::npos)
          << r.err;
      EXPECT_EQ(entries_in(dir.path()), 1u) << command << ": something was created";
    }
  }
  auto r = run_cli({"relay", "--store", "sqlite:" + dir / "x\x1b[31m.db?y=1", "--sink",
                    "file:" + dir / "out.jsonl", "--until-empty"},
                   {}, std::chrono::seconds(30));
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_TRUE(clean(r.err)) << r.err;
  EXPECT_NE(r.err.find("unknown parameter 'y'"), std::string::npos) << r.err;
  r = run_cli({"relay", "--store", "sqlite:" + dir / "x.db", "--sink", "file:" + dir / "o.jsonl",
               "--log-format", "\x1b[2J"},
              {}, std::chrono::seconds(30));
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_TRUE(clean(r.err)) << r.err;
  EXPECT_EQ(entries_in(dir.path()), 1u) << "something was created";
}

// A consumer group's name is stored and printed by `consumers list`, the dashboard and the log:
// `consume --group` and a [[consume]] `group` refuse control characters (and, as the file did,
// more than 200 bytes) before anything is opened. Before: the CLI took any bytes, created the
// checkpoint store and `consumers list` then printed the escape sequence raw.
TEST(CliUsage, ConsumerGroupNamesRefuseControlCharacters) {
  TempDir dir;
  std::ofstream(dir / "log.jsonl") << "";
  for (const std::string& group :
       {std::string("g\x1b[31m"), std::string("g\nh"), std::string(201, 'g')}) {
    auto r = run_cli(
        {"consume", "--from", "file:" + dir / "log.jsonl", "--group", group, "--checkpoint",
         "sqlite:" + dir / "ck.db", "--sink", "file:" + dir / "out.jsonl", "--until-idle", "500"},
        {}, std::chrono::seconds(30));
    EXPECT_EQ(r.code, 2) << r.all();
    EXPECT_NE(r.err.find("--group must"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_EQ(entries_in(dir.path()), 1u) << "something was created";
  }
  // `consumers` applies the same rule before opening anything (it opened the store and echoed a
  // control character raw in "no consumer group '...'", exit 1).
  for (const std::string& group : {std::string(), std::string("a\x01b"), std::string(201, 'g')}) {
    for (std::vector<std::string> op : {std::vector<std::string>{"delete"},
                                        {"seek", "--to", "end"},
                                        {"dead"},
                                        {"retry", "--all"}}) {
      std::vector<std::string> args{"consumers", "--checkpoint", "sqlite:" + dir / "ck.db"};
      args.insert(args.end(), op.begin(), op.end());
      args.insert(args.end(), {"--group", group});
      auto r = run_cli(args);
      EXPECT_EQ(r.code, 2) << op[0] << ": " << r.all();
      EXPECT_NE(r.err.find("--group must"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find('\x01'), std::string::npos) << r.err;
      EXPECT_EQ(entries_in(dir.path()), 1u) << "something was created";
    }
  }
  const std::string config = dir / "outpost.toml";
  std::ofstream(config) << "[[consume]]\nname = \"c\"\nfrom = \"file:" << dir / "log.jsonl"
                        << "\"\ngroup = \"g\\u001b[31m\"\ncheckpoint = \"sqlite:" << dir / "ck.db"
                        << "\"\nsink = \"file:" << dir / "out.jsonl"
                        << "\"\n";
  auto r = run_cli({"check", "--config", config}, {}, std::chrono::seconds(30));
  EXPECT_EQ(r.code, 2) << r.all();
  EXPECT_NE(r.err.find("key 'group': must not contain control characters"), std::string::npos)
      << r.err;
  EXPECT_EQ(entries_in(dir.path()), 2u) << "something was created";
}

// A store that cannot be read ends `relay` and `run` at start with exit 1 naming why, the same on
// every store. Before: PostgreSQL (which connects when opened) exited 1, while a relay on Redis
// (which connects lazily) retried an unreachable server or a refused password forever, and `emit`
// and `events` on Redis exited 2 for a refused password where PostgreSQL exits 1.
TEST(CliUsage, AStoreThatCannotBeReadEndsTheRelayAtStartOnEveryStore) {
  TempDir dir;
  std::vector<std::pair<std::string, std::string>> stores{
      // URL, what the error says
      {"postgresql://app:PW@127.0.0.1:1/db?connect_timeout=2", "cannot connect"},
      {"redis://user:PW@127.0.0.1:1/0?timeout_ms=500", "cannot reach Redis"}};
  if (const char* url = std::getenv("OUTPOST_TEST_REDIS_URL")) {
    // The test server has no password: Redis refuses AUTH with one ("ERR AUTH ... called
    // without any password configured"), as it refuses a wrong one (WRONGPASS).
    std::string u = url;
    u.insert(u.find("://") + 3, ":PW@");
    stores.push_back({u, "(URL password)"});
    // With a second seed that is not there, the refusal is still what is reported.
    const auto path = u.find('/', u.find('@'));
    stores.push_back(
        {u.insert(path == std::string::npos ? u.size() : path, ",127.0.0.1:1"), "(URL password)"});
  } else if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) {
    ADD_FAILURE() << "OUTPOST_TEST_REDIS_URL not set";
  }
  const std::string config = dir / "outpost.toml";
  for (const auto& [store_url, says] : stores) {
    const std::string store = with_secret(store_url);
    std::ofstream(config) << "[[relay]]\nname = \"r\"\nstore = \"" << store
                          << "\"\nsink = \"file:" << dir / "out.jsonl"
                          << "\"\n";
    const std::vector<std::vector<std::string>> commands{
        {"relay", "--store", store, "--sink", "file:" + dir / "out.jsonl"},
        {"relay", "--store", store, "--sink", "file:" + dir / "out.jsonl", "--until-empty"},
        {"run", "--config", config},
        {"emit", "--store", store, "--type", "t", "--payload", "{}"},
        {"events", "--store", store, "stats"}};
    for (const auto& args : commands) {
      auto r = run_cli(args, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 1) << args[0] << " " << store_url << "\n" << r.all();
      EXPECT_NE(r.err.find(says), std::string::npos) << args[0] << " " << store_url << "\n"
                                                     << r.err;
      EXPECT_EQ(r.all().find(kSecret), std::string::npos) << r.all();
    }
  }
}

// A Redis Streams log that refuses the password: `consume` ends with exit 1 saying so (and why,
// in the server's words). Before: "...: AUTH: " and nothing after it, for every error reply.
TEST(CliUsage, ConsumeNamesARefusedPasswordOnARedisStreamsLog) {
  const char* url = std::getenv("OUTPOST_TEST_REDIS_URL");
  if (!url) {
    if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) ADD_FAILURE() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  TempDir dir;
  std::string from = std::string(url) + "/refused_log";
  from.replace(0, from.find("://") + 3, "redis-stream://:" + std::string(kSecret) + "@");
  auto r =
      run_cli({"consume", "--group", "g", "--from", from, "--checkpoint", "sqlite:" + dir / "ck.db",
               "--sink", "file:" + dir / "out.jsonl", "--until-idle", "2000"},
              {}, std::chrono::seconds(30));
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("AUTH (URL password): ERR"), std::string::npos) << r.err;
  EXPECT_EQ(r.all().find(kSecret), std::string::npos) << r.all();
}

// Before: CLI11's Range let NaN through (every comparison with NaN is false) and `bench --rate
// nan` hung in the latency phase; infinity is refused the same way.
TEST(CliUsage, BenchRefusesNaN) {
  TempDir dir;
  for (const char* flag : {"--rate", "--latency-seconds"}) {
    for (const char* value : {"nan", "NaN", "inf", "-5"}) {
      std::vector<std::string> args{"bench", "--store", "sqlite:" + dir / "b.db", flag, value};
      auto r = run_cli(args, {}, std::chrono::seconds(30));
      EXPECT_EQ(r.code, 2) << joined(args) << "\n" << r.all();
      EXPECT_NE(r.err.find(flag), std::string::npos) << r.err;
      EXPECT_EQ(entries_in(dir.path()), 0u) << joined(args);
    }
  }
}

// retry/discard without ids and without --all (or with both) is a usage error whatever the
// store holds. Before: the store was opened first, so on a path without an outbox it was exit 1
// "there is no outbox".
TEST(CliUsage, EventsRetryAndDiscardCheckTheirArgumentsFirst) {
  TempDir dir;
  const std::string store = "sqlite:" + dir / "none.db";
  const std::string id = "01a20da8-adca-71e4-8841-f908814bd06c";
  const std::vector<std::vector<std::string>> cases{
      {"events", "--store", store, "retry"},
      {"events", "--store", store, "discard"},
      {"events", "--store", store, "retry", "--all", id},
      {"events", "--store", store, "discard", "--all", id},
  };
  for (const auto& args : cases) {
    auto r = run_cli(args);
    EXPECT_EQ(r.code, 2) << joined(args) << "\n" << r.all();
    EXPECT_NE(r.err.find("--all"), std::string::npos) << joined(args) << "\n" << r.err;
    EXPECT_EQ(entries_in(dir.path()), 0u) << joined(args);
  }
}

// Issue 10 defect 7: type, key and headers are UTF-8 without NUL within the documented limits;
// `emit` refuses anything else with exit 2 naming the field and the stdin line, before opening
// the store.
TEST(CliUsage, EmitRefusesBadFieldsNamingTheLine) {
  TempDir dir;
  const std::string db = dir / "never.db";
  const std::vector<std::pair<std::string, std::string>> lines{
      {R"({"type":"t","key":"a\u0000b","payload":1})", "key contains NUL"},
      {R"({"type":"t\u0000","payload":1})", "type contains NUL"},
      {R"({"type":")" + std::string(256, 't') + R"(","payload":1})", "type is 256 bytes"},
      {R"({"type":"t","key":")" + std::string(1025, 'k') + R"(","payload":1})",
       "key is 1025 bytes"},
      {R"({"type":"t","headers":{"h":"\u0000"},"payload":1})", "header 'h' contains NUL"},
      {R"({"type":"t","headers":{"":"v"},"payload":1})", "header name is empty"},
      // Issue 20 item 2: a trace context tracing libraries would drop.
      {R"({"type":"t","headers":{"traceparent":"00-abc-def-01"},"payload":1})",
       "header 'traceparent' is not VERSION-TRACEID-PARENTID-FLAGS"},
      {R"({"type":"t","headers":{"tracestate":"a=1"},"payload":1})",
       "header 'tracestate' is given without a 'traceparent'"},
  };
  for (const auto& [line, says] : lines) {
    auto r = run_cli({"emit", "--store", "sqlite:" + db, "-"},
                     "{\"type\":\"ok\",\"payload\":1}\n" + line + "\n");
    EXPECT_EQ(r.code, 2) << line << "\n" << r.all();
    EXPECT_NE(r.err.find("stdin line 2: " + says), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(db)) << line;
  }
  auto flags = run_cli({"emit", "--store", "sqlite:" + db, "--type", "t", "--header",
                        "h=" + std::string(9000, 'v'), "--payload", "1"});
  EXPECT_EQ(flags.code, 2) << flags.all();
  EXPECT_NE(flags.err.find("header 'h' is 9000 bytes"), std::string::npos) << flags.err;
  auto trace = run_cli({"emit", "--store", "sqlite:" + db, "--type", "t", "--header",
                        "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
                        "--payload", "1"});
  EXPECT_EQ(trace.code, 2) << trace.all();
  EXPECT_NE(trace.err.find("emit: header 'traceparent' has an all-zero parent id"),
            std::string::npos)
      << trace.err;
  EXPECT_FALSE(std::filesystem::exists(db));
}

// Issue 17 item 4: input that cannot be kept is refused (exit 2, naming the stdin line or flag
// and what is wrong, nothing opened), not half-kept. Before: an unknown field ("kye") was dropped
// (the event stored without its key, so without order); an object, a NUL byte and a second object
// on one line stored the first event and dropped the rest (exit 0); `--payload $'\xff\xfe{'` was
// stored as text/plain; charset=utf-8; `--payload '{"a":1'` was stored as text.
// An oversize payload on stdin is named by its line, as every other input error, and found
// before the store is opened: nothing is created (the store's own limit: its URL may set it).
TEST(CliUsage, EmitRefusesAnOversizePayloadNamingItsLineBeforeOpening) {
  TempDir dir;
  const std::string big(1100000, 'x');
  const std::string input = R"({"type":"t","payload":1})"
                            "\n"
                            R"({"type":"t","payload":")" +
                            big + "\"}\n";
  auto r = run_cli({"emit", "--store", "sqlite:" + dir / "big.db", "-"}, input);
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("stdin line 2 (type 't'): payload of 1100000 bytes is over the limit of "
                       "1048576 bytes"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "big.db")) << "the store was created";
  r = run_cli({"emit", "--store", "sqlite:" + dir / "small.db?max_payload_bytes=10", "--type", "t",
               "--payload", "\"0123456789\""});
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("payload of 12 bytes is over the limit of 10 bytes"), std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "small.db")) << "the store was created";
  r = run_cli({"emit", "--store", "sqlite:" + dir / "small.db?max_payload_bytes=10", "--type", "t",
               "--payload", "\"01234567\""});
  EXPECT_EQ(r.code, 0) << r.all();
}

TEST(CliUsage, EmitRefusesInputItCannotKeep) {
  TempDir dir;
  std::vector<std::string> stores{"sqlite:" + dir / "k.db"};
  const std::string tag = std::to_string(::getpid());
  for (const char* env : {"OUTPOST_TEST_PG_URL", "OUTPOST_TEST_REDIS_URL"}) {
    const char* url = std::getenv(env);
    if (!url) {
      if (std::getenv("OUTPOST_TEST_REQUIRE_ALL")) ADD_FAILURE() << env << " not set";
      continue;
    }
    std::string u = url;
    const bool postgres = std::string(env).find("_PG_") != std::string::npos;
    u += std::string(u.find('?') == std::string::npos ? "?" : "&") +
         (postgres ? "table=unkept" : "prefix=unkept") + tag;
    stores.push_back(u);
  }
  const std::string good = R"({"type":"t","key":"k","payload":1})";
  struct Bad {
    std::string line;  // stdin line 2
    std::string says;  // after "stdin line 2: event JSON: "
  };
  const std::vector<Bad> lines{
      {R"({"type":"t","kye":"acct-1","payload":1})", "unknown field 'kye' (did you mean 'key'?)"},
      {R"({"type":"t","key":"k","delay_ms":500,"payload":1})",
       "unknown field 'delay_ms'; the fields are deliver_at, headers, id, key, occurred_at, "
       "payload"},
      {R"({"type":"t","Payload":1,"payload":2,"headrs":{}})",
       "unknown fields 'Payload' (did you mean 'payload'?), 'headrs' (did you mean 'headers'?)"},
      {std::string(R"({"type":"t","payload":1})") + '\0' + R"({"type":"u","payload":2})",
       "byte 24 is a NUL byte after the JSON value"},
      {R"({"type":"t","payload":1}  junk)", "byte 26 is 'j' after the JSON value"},
      {R"({"type":"t","headers":{"content_type":"text/plain"},"payload_base64":"//57"})",
       "field 'payload_base64' is not UTF-8 (byte value 0xff at byte 0) but content_type "
       "'text/plain' says it is text"},
      {R"({"type":"t","headers":{"content_type":"application/json"},"payload_base64":"e30="})"
       "\t{",
       "byte 83 is '{' after the JSON value"},
  };
  struct BadFlag {
    std::vector<std::string> extra;
    std::string says;
  };
  const std::vector<BadFlag> flags{
      {{"--payload", "\xff\xfe{"},
       "emit: --payload is not UTF-8 (byte value 0xff at byte 0), so it is neither JSON nor "
       "text: bytes are stored with a content type that says what they are, e.g. --header "
       "content_type=application/octet-stream, or on stdin (emit -) as \"payload_base64\""},
      {{"--payload", R"({"a":1)"},
       "emit: --payload starts like JSON but is not JSON at byte 6 (the end): syntax error "
       "while parsing object"},
      {{"--payload", R"(  [1,2] x)"}, "emit: --payload starts like JSON but is not JSON at byte"},
      {{"--payload", "\xff", "--header", "content_type=text/plain; charset=utf-8"},
       "emit: --payload is not UTF-8 (byte value 0xff at byte 0) but content_type"},
      {{"--payload", "{", "--header", "content_type=application/json"},
       "emit: --payload is not JSON at byte 1 (the end)"},
  };
  for (const auto& store : stores) {
    for (const auto& [line, says] : lines) {
      auto r = run_cli({"emit", "--store", store, "-"}, good + "\n" + line + "\n" + good + "\n");
      EXPECT_EQ(r.code, 2) << store << "\n" << line << "\n" << r.all();
      EXPECT_NE(r.err.find("stdin line 2: event JSON: " + says), std::string::npos) << store << "\n"
                                                                                    << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_EQ(entries_in(dir.path()), 0u) << store << ": something was created";
    }
    for (const auto& [extra, says] : flags) {
      std::vector<std::string> args{"emit", "--store", store, "--type", "t"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto r = run_cli(args);
      EXPECT_EQ(r.code, 2) << store << "\n" << joined(args) << "\n" << r.all();
      EXPECT_NE(r.err.find(says), std::string::npos) << store << "\n" << r.err;
      EXPECT_TRUE(r.out.empty()) << r.out;
      EXPECT_EQ(entries_in(dir.path()), 0u) << store << ": something was created";
    }
    // Said honestly, each is kept: text that looks like JSON, bytes with a binary content type,
    // the fields spelt right; and a printed line (with attempts) can be emitted again.
    std::vector<std::vector<std::string>> ok{
        {"--payload", R"({"a":1)", "--header", "content_type=text/plain"},
        {"--payload", "\xff\xfe{", "--header", "content_type=application/octet-stream"},
        {"--payload", "caf\xe9", "--header", "content_type=text/plain; charset=latin1"},
    };
    for (auto extra : ok) {
      std::vector<std::string> args{"emit", "--store", store, "--type", "t"};
      args.insert(args.end(), extra.begin(), extra.end());
      auto r = run_cli(args);
      EXPECT_EQ(r.code, 0) << store << "\n" << joined(args) << "\n" << r.all();
    }
    auto r = run_cli({"emit", "--store", store, "-"}, R"({"type":"t","key":"acct-1","payload":1})"
                                                      "\n"
                                                      R"({"attempts":3,"type":"t","payload":2})"
                                                      "  \r\n");
    EXPECT_EQ(r.code, 0) << store << "\n" << r.all();
    auto list = run_cli({"events", "--store", store, "list"});
    auto listed = lines_of(list.out);
    ASSERT_EQ(listed.size(), 5u) << store << "\n" << list.all();
    EXPECT_NE(listed[0].find(R"("payload":"{\"a\":1")"), std::string::npos) << listed[0];
    EXPECT_NE(listed[1].find(R"("payload_base64":"//57")"), std::string::npos) << listed[1];
    EXPECT_NE(listed[2].find(R"("payload_base64":"Y2Fm6Q==")"), std::string::npos) << listed[2];
    EXPECT_NE(listed[3].find(R"("key":"acct-1")"), std::string::npos) << listed[3];
    std::filesystem::remove_all(dir.path());
    std::filesystem::create_directories(dir.path());
  }
}

}  // namespace
}  // namespace outpost::testing
