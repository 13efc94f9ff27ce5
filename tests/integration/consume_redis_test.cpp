// The Redis Streams source against a real redis-server (OUTPOST_TEST_REDIS_URL): events the
// Redis Streams sink wrote come back exactly (ids, keys, payload bytes, headers), the checkpoint
// is registered in <stream>:checkpoints, and the sink's trimming keeps what a lagging consumer
// has not read yet; then it reads on without a gap, each effect once.

#include <gtest/gtest.h>

#include <map>

#include "consume/checkpoint_store.h"
#include "consume/sql.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/sinks/redis_stream.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

std::vector<StoredEvent> events(int n, int from) {
  std::vector<StoredEvent> out;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) =
        Event::make("t", "{\"n\":" + std::to_string(from + i) + "}", "k" + std::to_string(i % 5));
    e.headers["trace"] = "x" + std::to_string(i);
    out.push_back(e);
  }
  return out;
}

TEST(RedisStreamSource, LaggingConsumerKeepsItsEntriesThroughTrimmingAndReadsOnOnce) {
  auto redis = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!redis) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  std::string hostport = redis->substr(8, redis->find('/', 8) - 8);
  std::string stream = testing::unique_name("cs");
  std::string url = "redis-stream://" + hostport + "/" + stream + "?maxlen=50&trim_every=10";
  auto sink = open_redis_stream_sink(url);
  std::string name = testing::unique_name("cr");
  auto store = open_checkpoint_store("sqlite:" + testing::temp_dir() + "/" + name + ".db");
  auto source = open_source(url);  // the sink's parameters are accepted (one URL for both)

  // Fewer than maxlen: nothing is trimmed before the consumer registered.
  std::vector<StoredEvent> sent = events(30, 0);
  for (auto& r : sink->deliver(sent)) ASSERT_TRUE(r.ok()) << r.error;

  std::map<std::string, int> seen;  // event id -> effects
  std::vector<Event> got;
  ConsumerOptions o;
  o.group = "lagging";
  o.batch_size = 20;
  o.poll = 50ms;
  o.until_idle = 300ms;
  ConsumerHandler record = [&](ConsumerBatch& b) {
    for (const auto& m : b.messages()) {
      ++seen[m.event.id.str()];
      got.push_back(m.event);
    }
  };
  {
    Consumer c(*source, *store, o);
    ASSERT_EQ(c.run_once(record), 20u);  // reads 20, commits, registers its position
  }
  auto registered = store->group("lagging")->position;
  EXPECT_FALSE(registered.empty());

  // Lots more entries: the sink trims to ~50 but not past the consumer's checkpoint.
  for (int round = 0; round < 10; ++round) {
    auto more = events(50, 100 + round * 50);
    for (auto& r : sink->deliver(more)) ASSERT_TRUE(r.ok()) << r.error;
    sent.insert(sent.end(), more.begin(), more.end());
  }
  EXPECT_EQ(source->lag(registered), static_cast<std::int64_t>(sent.size()) - 20)
      << "entries after the registered checkpoint were trimmed";

  {
    auto again = open_source(url);
    Consumer c(*again, *store, o);
    c.run(record);
  }
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].id, sent[i].id);
    EXPECT_EQ(got[i].key, sent[i].key);
    EXPECT_EQ(got[i].payload, sent[i].payload);
    EXPECT_EQ(got[i].headers, sent[i].headers);
  }
  for (auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(source->lag(store->group("lagging")->position), 0);

  // Trimming catches up once the consumer did: a retired group no longer holds entries.
  source->retire("lagging");
  for (auto& r : sink->deliver(events(50, 10'000))) ASSERT_TRUE(r.ok());
  EXPECT_LT(source->lag(""), 200);
}

// Operator finding A14: a hash-tagged stream name (what a stream on Redis Cluster needs) was
// refused as if it were the sink's {type} template, so what the sink wrote could not be consumed.
TEST(RedisStreamSource, AHashTaggedStreamIsReadAsTheSinkWroteIt) {
  auto redis = testing::env("OUTPOST_TEST_REDIS_URL");
  if (!redis) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
  }
  std::string hostport = redis->substr(8, redis->find('/', 8) - 8);
  std::string url = "redis-stream://" + hostport + "/{" + testing::unique_name("tag") + "}.orders";
  auto sink = open_redis_stream_sink(url);
  std::vector<StoredEvent> sent = events(5, 0);
  for (auto& r : sink->deliver(sent)) ASSERT_TRUE(r.ok()) << r.error;
  auto store = open_checkpoint_store("sqlite:" + testing::temp_dir() + "/" +
                                     testing::unique_name("ct") + ".db");
  auto source = open_source(url);
  ConsumerOptions o;
  o.group = "tagged";
  o.poll = 50ms;
  o.until_idle = 300ms;
  std::vector<Event> got;
  Consumer c(*source, *store, o);
  c.run([&](ConsumerBatch& b) {
    for (const auto& m : b.messages()) got.push_back(m.event);
  });
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(got[i].id, sent[i].id);
}

TEST(RedisStreamSource, BadUrlsNameThePart) {
  EXPECT_THROW(open_source("redis-stream://h:1/"), ConfigError);
  EXPECT_THROW(open_source("redis-stream://h:1/s?bogus=1"), ConfigError);
  EXPECT_THROW(open_source("redis-stream://h:1/events.{type}"), ConfigError);
  EXPECT_THROW(open_source("redis-stream://h:1/{shop}.{type}"), ConfigError);
  EXPECT_NO_THROW(open_source("redis-stream://:pw@h:1/s?db=2"));
}

}  // namespace
}  // namespace outpost
