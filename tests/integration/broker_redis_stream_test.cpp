// Redis Streams sink end to end: the real relay moves events from a store into a stream, XRANGE
// checks what arrived, and trimming is checked against consumer groups and the checkpoint
// registry (include/outpost/sinks/redis_stream.h).
//  - 50,000 events over 200 keys: each once, per-key order kept (shared redis-server).
//  - a PRIVATE redis-server (AOF on) stopped for 10 s mid-run and restarted: no loss, order of
//    first occurrences kept, duplicates bounded by one in-flight batch.
//  - trimming keeps every entry a consumer group has not read (last-delivered id and pending
//    entries) and every entry after an external consumer's registered checkpoint.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "broker_consumers.h"
#include "broker_relay.h"
#include "outpost/sinks/redis_stream.h"
#include "outpost/stores/memory.h"
#include "server_process.h"
#include "store_cases.h"  // require_all_endpoints(), temp_dir()

namespace outpost::testing {
namespace {

using namespace brokers;

std::string shared_url() {
  return env_text("OUTPOST_TEST_REDIS_URL");
}

class BrokerRedisStream : public ::testing::Test {
 protected:
  void SetUp() override {
    if (shared_url().empty()) {
      if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
      GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
    }
    ep_ = parse_redis_url(shared_url());
    stream_ = brokers::unique_name("stream");
  }
  void TearDown() override {
    if (stream_.empty() || shared_url().empty()) return;
    try {
      auto c = redis_connect(ep_);
      redis_command(c.get(), {"DEL", stream_, stream_ + ":checkpoints"});
    } catch (...) {
    }
  }
  std::string sink_url(const std::string& params = {}) const {
    return "redis-stream://" + ep_.host + ":" + std::to_string(ep_.port) + "/" + stream_ +
           "?db=" + std::to_string(ep_.db) + (params.empty() ? "" : "&" + params);
  }
  std::vector<StoredEvent> stored(std::size_t n) const {
    std::vector<StoredEvent> out;
    for (const auto& e : keyed_events(n, 10)) {
      StoredEvent s;
      static_cast<Event&>(s) = e;
      out.push_back(std::move(s));
    }
    return out;
  }
  long long xlen() const {
    auto c = redis_connect(ep_);
    return redis_command(c.get(), {"XLEN", stream_})->integer;
  }

  RedisEndpoint ep_;
  std::string stream_;
};

TEST_F(BrokerRedisStream, FiftyThousandEventsArriveOnceInKeyOrder) {
  auto store = make_memory_store();
  auto events = keyed_events(50'000, 200);
  append_all(*store, events);
  auto sink = open_redis_stream_sink(sink_url());
  auto run = run_relay(*store, *sink, fast_relay_options(1000), std::chrono::seconds(60));
  ASSERT_TRUE(run.finished) << "relay did not empty the store in time";
  EXPECT_EQ(run.counters.delivered, events.size());
  std::printf("[redis-stream] relayed %zu events in %.2f s (%.0f events/s)\n", events.size(),
              run.seconds, events.size() / run.seconds);
  auto check = check_delivery(events, redis_read_all(ep_, stream_));
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.duplicates, 0u);
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_EQ(check.unknown, 0u);
}

TEST_F(BrokerRedisStream, ServerStoppedForTenSecondsLosesNothing) {
  namespace fs = std::filesystem;
  const std::string dir = temp_dir() + "/" + brokers::unique_name("redis");
  fs::create_directories(dir);
  const auto port = free_port();
  ServerProcess server({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",
                        "--save", "", "--appendonly", "yes", "--dir", dir},
                       dir + "/log");  // started by the constructor
  ASSERT_TRUE(wait_for_port(port, std::chrono::seconds(10)));

  auto store = make_memory_store();
  auto events = keyed_events(15'000, 100);
  auto sink = open_redis_stream_sink("redis-stream://127.0.0.1:" + std::to_string(port) + "/" +
                                     stream_ + "?timeout_ms=1000");
  const std::size_t batch = 200;
  CountingSink counting(*sink);
  auto run = run_relay_through_outage(
      *store, counting, fast_relay_options(batch), events, 500, [&] { server.stop(); },
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

  RedisEndpoint ep{"127.0.0.1", port, 0};
  auto check = check_delivery(events, redis_read_all(ep, stream_));
  std::printf("[redis-stream] outage: %llu unavailable, %zu duplicates, %.1f s\n",
              static_cast<unsigned long long>(counting.unavailable()), check.duplicates,
              run.seconds);
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_LE(check.duplicates, 2 * batch);
  server.stop();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_F(BrokerRedisStream, TrimmingWithoutConsumersKeepsAboutMaxlen) {
  auto sink = open_redis_stream_sink(sink_url("maxlen=500&trim_every=100"));
  auto events = stored(5'000);
  for (std::size_t at = 0; at < events.size(); at += 250)
    for (const auto& r : sink->deliver(std::span(events.data() + at, 250))) ASSERT_TRUE(r.ok());
  const auto len = xlen();
  EXPECT_GE(len, 500);
  EXPECT_LT(len, 1'000) << "approximate trimming should stay near maxlen";
  // What is left is the newest entries.
  auto left = redis_read_all(ep_, stream_);
  ASSERT_FALSE(left.empty());
  EXPECT_EQ(left.back().id, events.back().id.str());
}

TEST_F(BrokerRedisStream, TrimmingKeepsWhatAGroupHasNotReadOrAcked) {
  auto c = redis_connect(ep_);
  // A group that starts at the beginning and has read nothing yet.
  ASSERT_EQ(redis_command(c.get(), {"XGROUP", "CREATE", stream_, "billing", "0", "MKSTREAM"})->type,
            REDIS_REPLY_STATUS);
  auto sink = open_redis_stream_sink(sink_url("maxlen=100&trim_every=100"));
  auto events = stored(3'000);
  auto deliver = [&](std::size_t from, std::size_t n) {
    for (const auto& r : sink->deliver(std::span(events.data() + from, n))) ASSERT_TRUE(r.ok());
  };
  deliver(0, 1'000);
  EXPECT_EQ(xlen(), 1'000) << "nothing may be trimmed: the group has read nothing";

  // The group reads 600 entries and acknowledges only the first 400: entry #400 is the oldest
  // still pending, so everything from it on must stay.
  auto read = redis_command(
      c.get(), {"XREADGROUP", "GROUP", "billing", "c1", "COUNT", "600", "STREAMS", stream_, ">"});
  ASSERT_EQ(read->type, REDIS_REPLY_ARRAY);
  const redisReply* entries = read->element[0]->element[1];
  ASSERT_EQ(entries->elements, 600u);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < entries->elements; ++i)
    ids.emplace_back(entries->element[i]->element[0]->str);
  std::vector<std::string> ack = {"XACK", stream_, "billing"};
  ack.insert(ack.end(), ids.begin(), ids.begin() + 400);
  redis_command(c.get(), ack);

  deliver(1'000, 1'000);
  auto left = redis_read_all(ep_, stream_);
  ASSERT_FALSE(left.empty());
  // Entries are removed only below the oldest pending one (#400)...
  EXPECT_LE(left.size(), 2'000u);
  std::size_t first = 0;
  while (first < events.size() && events[first].id.str() != left.front().id) ++first;
  EXPECT_LE(first, 400u) << "an unacknowledged entry was trimmed";
  EXPECT_LT(left.size(), 2'000u) << "acknowledged entries below the pending one should go";
  // ...and every entry from #400 on is still there, in order.
  std::size_t at = 0;
  while (at < left.size() && left[at].id != events[400].id.str()) ++at;
  ASSERT_LT(at, left.size()) << "entry #400 (pending) was trimmed";
  EXPECT_EQ(left.size() - at, 1'600u);

  // With the group gone, an external consumer registered at entry #1500 holds the line.
  redis_command(c.get(), {"XGROUP", "DESTROY", stream_, "billing"});
  redis_command(c.get(), {"HSET", stream_ + ":checkpoints", "search-indexer",
                          left[at + 1'100].position});  // entry #1500
  deliver(2'000, 1'000);
  left = redis_read_all(ep_, stream_);
  at = 0;
  while (at < left.size() && left[at].id != events[1'501].id.str()) ++at;
  ASSERT_LT(at, left.size()) << "an entry after the registered checkpoint was trimmed";
  EXPECT_EQ(left.size() - at, 1'499u);
  EXPECT_LT(left.size(), 2'000u) << "entries below the checkpoint should be trimmed";
}

}  // namespace
}  // namespace outpost::testing
