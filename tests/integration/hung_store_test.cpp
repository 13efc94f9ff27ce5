// A relay whose store hangs (the server process stopped with SIGSTOP, its TCP connections still
// up) must still stop (issue 10, defect 4; docs/cli.md): on SIGTERM within the store's I/O
// deadline (PostgreSQL and Redis timeout_ms) plus a margin, and on a second SIGTERM at once,
// whatever the deadline is. Each test starts and pauses a server of its own, never the shared
// one. Bounds are generous: before the fix these relays ran until the server was resumed.

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "private_postgres.h"
#include "server_process.h"
#include "wait_until.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using testing::CliProcess;
using testing::event_ids_in;
using testing::read_file;
using testing::run_cli;
using testing::TempDir;
using testing::wait_until;

constexpr int kEvents = 50;

std::string events_text(int n) {
  std::string text;
  for (int i = 0; i < n; ++i)
    text += R"({"type":"hung.test","key":"k)" + std::to_string(i % 5) + R"(","payload":{"n":)" +
            std::to_string(i) + "}}\n";
  return text;
}

// True when `events stats` shows nothing pending or leased.
bool settled(const std::string& store) {
  auto stats = run_cli({"events", "--store", store, "stats"});
  static const std::regex pending(R"(pending\s+0\n)"), leased(R"(leased\s+0\n)");
  return stats.code == 0 && std::regex_search(stats.out, pending) &&
         std::regex_search(stats.out, leased);
}

// Emits kEvents into `store`, starts a relay to a file sink and waits until it delivered them;
// the relay is then idle, waiting on the store.
std::unique_ptr<CliProcess> delivering_relay(const TempDir& dir, const std::string& store) {
  auto emitted = run_cli({"emit", "--store", store, "-"}, events_text(kEvents));
  EXPECT_EQ(emitted.code, 0) << emitted.all();
  auto relay = std::make_unique<CliProcess>(
      std::vector<std::string>{"relay", "--store", store, "--sink", "file:" + dir / "out.jsonl"},
      dir / "relay.log");
  EXPECT_TRUE(wait_until(
      [&] { return event_ids_in(read_file(dir / "out.jsonl")).size() >= kEvents; }, 60s, 20ms))
      << read_file(dir / "relay.log");
  // Written to the sink is not yet acked: wait for the store to have none left.
  EXPECT_TRUE(wait_until([&] { return settled(store); }, 60s, 50ms))
      << read_file(dir / "relay.log");
  return relay;
}

// SIGTERM, and with `twice` a second one a moment later; returns the exit code, or -1 when the
// relay was still running after `bound`.
int stop(CliProcess& relay, bool twice, std::chrono::seconds bound) {
  // Let the idle relay go back into a store call (its wait for work asks the store every 200 ms),
  // so the signal finds it blocked on the stopped server. Not a timing assert: the exit must come
  // either way.
  std::this_thread::sleep_for(1s);
  relay.signal(SIGTERM);
  if (twice) {
    std::this_thread::sleep_for(300ms);
    relay.signal(SIGTERM);
  }
  return relay.wait(bound);
}

// --- PostgreSQL --------------------------------------------------------------------------------

// The default deadline (10 s): the call in flight gives up, the relay stops and exits 0.
TEST(HungStore, PostgresSigtermStopsWithinTheStoreTimeout) {
  testing::PrivateCluster pg;
  TempDir dir;
  const std::string store = pg.url() + "?table=hung_term";
  auto relay = delivering_relay(dir, store);
  pg.pause();
  int code = stop(*relay, false, 60s);
  pg.resume();
  auto log = read_file(dir / "relay.log");
  EXPECT_EQ(code, 0) << "a relay on a hung PostgreSQL did not stop within 60 s of SIGTERM\n" << log;
  EXPECT_NE(log.find("after signal"), std::string::npos) << log;
}

// A deadline far away (10 min): the second signal ends the process at once anyway, with the
// summary and exit 0.
TEST(HungStore, PostgresSecondSigtermExitsAtOnce) {
  testing::PrivateCluster pg;
  TempDir dir;
  const std::string store = pg.url() + "?table=hung_twice&timeout_ms=600000";
  auto relay = delivering_relay(dir, store);
  pg.pause();
  int code = stop(*relay, true, 15s);
  pg.resume();
  auto log = read_file(dir / "relay.log");
  EXPECT_EQ(code, 0) << "a relay on a hung PostgreSQL did not exit within 15 s of a second "
                        "SIGTERM\n"
                     << log;
  EXPECT_NE(log.find("delivered " + std::to_string(kEvents)), std::string::npos) << log;
}

// A statement that gets no reply within timeout_ms is reported as such (and the relay goes on
// once the server is back: the dropped connection is replaced).
TEST(HungStore, PostgresCallsGiveUpAfterTimeoutMsAndRecover) {
  testing::PrivateCluster pg;
  TempDir dir;
  const std::string store = pg.url() + "?table=hung_recover&timeout_ms=1000";
  auto relay = delivering_relay(dir, store);
  pg.pause();
  EXPECT_TRUE(wait_until(
      [&] {
        return read_file(dir / "relay.log").find("no reply within 1000 ms") != std::string::npos;
      },
      60s, 50ms))
      << read_file(dir / "relay.log");
  pg.resume();
  auto more = run_cli({"emit", "--store", store, "-"}, events_text(kEvents));
  EXPECT_EQ(more.code, 0) << more.all();
  EXPECT_TRUE(wait_until(
      [&] { return event_ids_in(read_file(dir / "out.jsonl")).size() >= 2 * kEvents; }, 60s, 20ms))
      << read_file(dir / "relay.log");
  relay->signal(SIGTERM);
  EXPECT_EQ(relay->wait(60s), 0) << read_file(dir / "relay.log");
}

// --- Redis -------------------------------------------------------------------------------------

// A private redis-server this test may pause.
struct PrivateRedis {
  PrivateRedis()
      : port(testing::free_port()),
        server({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no"}) {
    if (!testing::wait_for_port(port, 30s)) throw std::runtime_error("redis-server did not start");
  }
  ~PrivateRedis() { server.signal(SIGCONT); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port) + "/0"; }
  std::uint16_t port;
  testing::ServerProcess server;
};

TEST(HungStore, RedisSecondSigtermExitsAtOnce) {
  PrivateRedis redis;
  TempDir dir;
  const std::string store = redis.url() + "?timeout_ms=600000";
  auto relay = delivering_relay(dir, store);
  redis.server.signal(SIGSTOP);
  int code = stop(*relay, true, 15s);
  redis.server.signal(SIGCONT);
  auto log = read_file(dir / "relay.log");
  EXPECT_EQ(code, 0) << "a relay on a hung Redis did not exit within 15 s of a second SIGTERM\n"
                     << log;
  EXPECT_NE(log.find("delivered " + std::to_string(kEvents)), std::string::npos) << log;
}

// The daemon: the same second signal ends `outpost run` at once with a relay pipeline on a Redis
// that hangs (the daemon's own stop path: Daemon::stop(true), then every pipeline joined).
TEST(HungStore, DaemonSecondSigtermExitsAtOnce) {
  PrivateRedis redis;
  TempDir dir;
  const std::string store = redis.url() + "?timeout_ms=600000";
  auto emitted = run_cli({"emit", "--store", store, "-"}, events_text(kEvents));
  ASSERT_EQ(emitted.code, 0) << emitted.all();
  const std::string config = dir / "outpost.toml";
  {
    std::ofstream out(config);
    out << "[[relay]]\nname = \"hung\"\nstore = \"" << store
        << "\"\nsink = \"file:" << dir / "out.jsonl"
        << "\"\n";
  }
  CliProcess daemon({"run", "--config", config}, dir / "daemon.log");
  EXPECT_TRUE(wait_until([&] { return settled(store); }, 60s, 50ms))
      << read_file(dir / "daemon.log");
  redis.server.signal(SIGSTOP);
  int code = stop(daemon, true, 15s);
  redis.server.signal(SIGCONT);
  EXPECT_EQ(code, 0) << "outpost run on a hung Redis did not exit within 15 s of a second "
                        "SIGTERM\n"
                     << read_file(dir / "daemon.log");
}

#ifdef OUTPOST_TEST_HAVE_CONSUME
// outpost consume with its checkpoint in a PostgreSQL that hangs while a batch commits: a second
// SIGTERM ends it at once with exit 0 (the batch is read again on the next run).
TEST(HungStore, ConsumeSecondSigtermExitsAtOnce) {
  testing::PrivateCluster pg;
  TempDir dir;
  // The log to consume: the file sink's JSON lines, written by a relay from a SQLite outbox.
  const std::string source = "sqlite:" + dir / "source.db", log = dir / "log.jsonl";
  auto produce = [&] {
    auto emitted = run_cli({"emit", "--store", source, "-"}, events_text(kEvents));
    ASSERT_EQ(emitted.code, 0) << emitted.all();
    auto relayed = run_cli({"relay", "--store", source, "--sink", "file:" + log, "--until-empty"});
    ASSERT_EQ(relayed.code, 0) << relayed.all();
  };
  produce();
  CliProcess consume({"consume", "--from", "file:" + log, "--group", "hung", "--checkpoint",
                      pg.url(), "--sink", "file:" + dir / "out.jsonl"},
                     dir / "consume.log");
  EXPECT_TRUE(wait_until(
      [&] { return event_ids_in(read_file(dir / "out.jsonl")).size() >= kEvents; }, 60s, 20ms))
      << read_file(dir / "consume.log");
  pg.pause();
  // The next batch: the consumer reads it and hangs on the store (its inbox check or commit);
  // stop() gives it a second to get there.
  produce();
  int code = stop(consume, true, 15s);
  pg.resume();
  EXPECT_EQ(code, 0) << "outpost consume on a hung checkpoint store did not exit within 15 s of a "
                        "second SIGTERM\n"
                     << read_file(dir / "consume.log");
}
#endif

}  // namespace
}  // namespace outpost
