// NATS JetStream sink end to end: the real relay moves events from a store into a stream, a pull
// consumer checks what arrived.
//  - 50,000 events over 200 keys: each once, per-key order kept (shared nats-server).
//  - a PRIVATE nats-server stopped for 10 s mid-run and restarted on the same store directory:
//    no loss, order of first occurrences kept; duplicates are dropped by the server (Nats-Msg-Id).
//  - dedup: the same events relayed twice (from two stores) are stored once.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "broker_consumers.h"
#include "broker_relay.h"
#include "outpost/sinks/nats.h"
#include "outpost/stores/memory.h"
#include "server_process.h"
#include "store_cases.h"  // require_all_endpoints(), temp_dir()

namespace outpost::testing {
namespace {

using namespace brokers;

std::string shared_url() {
  return env_text("OUTPOST_TEST_NATS_URL");
}

std::string stream_name(const std::string& prefix) {
  std::string s = brokers::unique_name(prefix);
  for (auto& ch : s)
    if (ch == '-' || ch == '.') ch = '_';
  return s;
}

class BrokerNats : public ::testing::Test {
 protected:
  void SetUp() override {
    if (shared_url().empty()) {
      if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_NATS_URL not set";
      GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
    }
    stream_ = stream_name("RELAY");
    subject_ = "relay." + stream_;
  }
  void TearDown() override {
    if (!shared_url().empty()) nats_delete_stream(shared_url(), stream_);
  }
  std::string sink_url(const std::string& base) const {
    return base + "/" + subject_ + "?stream=" + stream_ + "&create=1";
  }
  std::string stream_, subject_;
};

TEST_F(BrokerNats, FiftyThousandEventsArriveOnceInKeyOrder) {
  auto store = make_memory_store();
  auto events = keyed_events(50'000, 200);
  append_all(*store, events);
  auto sink = open_nats_sink(sink_url(shared_url()));
  auto run = run_relay(*store, *sink, fast_relay_options(1000), std::chrono::seconds(60));
  ASSERT_TRUE(run.finished) << "relay did not empty the store in time";
  EXPECT_EQ(run.counters.delivered, events.size());
  std::printf("[nats] relayed %zu events in %.2f s (%.0f events/s)\n", events.size(), run.seconds,
              events.size() / run.seconds);
  auto received =
      nats_read_all(shared_url(), stream_, subject_, events.size(), std::chrono::seconds(60));
  auto check = check_delivery(events, received);
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.duplicates, 0u);
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_EQ(check.unknown, 0u);
}

TEST_F(BrokerNats, SameEventsRelayedTwiceAreStoredOnce) {
  auto events = keyed_events(5'000, 50);
  auto sink = open_nats_sink(sink_url(shared_url()));
  for (int round = 0; round < 2; ++round) {
    // A second store holding the same events (same ids): what a redelivery after a lost ack or
    // an operator's re-emit looks like to the broker.
    auto store = make_memory_store();
    append_all(*store, events);
    auto run = run_relay(*store, *sink, fast_relay_options(500), std::chrono::seconds(30));
    ASSERT_TRUE(run.finished);
    EXPECT_EQ(run.counters.delivered, events.size()) << "round " << round;
  }
  auto received = nats_read_all(shared_url(), stream_, subject_, 2 * events.size());
  auto check = check_delivery(events, received);
  EXPECT_EQ(received.size(), events.size()) << "the server must drop the second copies";
  EXPECT_EQ(check.missing, 0u);
  EXPECT_EQ(check.duplicates, 0u);
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
}

TEST_F(BrokerNats, ServerStoppedForTenSecondsLosesNothing) {
  namespace fs = std::filesystem;
  const std::string dir = temp_dir() + "/" + brokers::unique_name("nats");
  fs::create_directories(dir + "/js");
  const auto port = free_port();
  ServerProcess server(
      {"nats-server", "-a", "127.0.0.1", "-p", std::to_string(port), "-js", "-sd", dir + "/js"},
      dir + "/log");  // started by the constructor
  ASSERT_TRUE(wait_for_port(port, std::chrono::seconds(10)));
  const std::string url = "nats://127.0.0.1:" + std::to_string(port);

  auto store = make_memory_store();
  auto events = keyed_events(15'000, 100);
  auto sink = open_nats_sink(sink_url(url) + "&timeout_ms=1000");
  CountingSink counting(*sink);
  auto run = run_relay_through_outage(
      *store, counting, fast_relay_options(200), events, 500, [&] { server.stop(); },
      [&] {
        server.start();
        wait_for_port(port, std::chrono::seconds(10));
      });
  ASSERT_EQ(store->stats().pending + store->stats().leased, 0) << "relay did not drain";
  // Issue 17: an outage is unavailable, never an attempt of the events that waited it out.
  EXPECT_GT(counting.unavailable(), 0u) << "the outage was not noticed";
  EXPECT_EQ(counting.failed(), 0u) << counting.first_failure();
  EXPECT_EQ(run.counters.failed, 0u);
  EXPECT_EQ(run.counters.dead, 0u);

  auto received = nats_read_all(url, stream_, subject_, events.size(), std::chrono::seconds(30));
  auto check = check_delivery(events, received);
  std::printf("[nats] outage: %llu unavailable, %zu duplicates, %.1f s\n",
              static_cast<unsigned long long>(counting.unavailable()), check.duplicates,
              run.seconds);
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_EQ(check.duplicates, 0u) << "JetStream drops redeliveries inside its duplicate window";
  server.stop();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace outpost::testing
