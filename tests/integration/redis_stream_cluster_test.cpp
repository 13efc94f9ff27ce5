// The Redis Streams sink on Redis Cluster (docs/redis.md, "The Redis Streams sink on Redis
// Cluster"): the URL's hosts are seeds, a batch sent to a node that does not serve its streams'
// slot follows the MOVED reply, and streams without a common hash tag are refused with a message
// that says so. Needs OUTPOST_TEST_REDIS_CLUSTER_URL (tests/servers/redis_cluster.sh).

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/url.h"
#include "outpost/sinks/redis_stream.h"
#include "store_cases.h"

namespace outpost {
namespace {

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Ctx = std::unique_ptr<redisContext, CtxFree>;
using Reply = std::unique_ptr<redisReply, ReplyFree>;

std::vector<core::HostPort> cluster_nodes() {
  auto url = testing::env("OUTPOST_TEST_REDIS_CLUSTER_URL");
  if (!url) {
    if (testing::require_all_endpoints()) ADD_FAILURE() << "OUTPOST_TEST_REDIS_CLUSTER_URL not set";
    return {};
  }
  return core::Url::parse(*url).hosts();
}

std::string hosts(const std::vector<core::HostPort>& nodes, std::size_t first) {
  std::string out;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto& hp = nodes[(first + i) % nodes.size()];
    out += (i ? "," : "") + hp.host + ":" + std::to_string(hp.port);
  }
  return out;
}

// The stream's entries' "id" fields, read from the node that serves it (the others answer MOVED).
std::vector<std::string> entry_ids(const std::vector<core::HostPort>& nodes,
                                   const std::string& stream) {
  for (const auto& hp : nodes) {
    Ctx c(redisConnect(hp.host.c_str(), hp.port));
    if (!c || c->err) continue;
    Reply r(static_cast<redisReply*>(redisCommand(c.get(), "XRANGE %s - +", stream.c_str())));
    if (!r || r->type != REDIS_REPLY_ARRAY) continue;
    std::vector<std::string> ids;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* fields = r->element[i]->element[1];
      for (std::size_t f = 0; f + 1 < fields->elements; f += 2)
        if (std::string(fields->element[f]->str) == "id")
          ids.emplace_back(fields->element[f + 1]->str);
    }
    return ids;
  }
  ADD_FAILURE() << "no node serves " << stream;
  return {};
}

std::vector<StoredEvent> batch(int n, const std::string& type) {
  std::vector<StoredEvent> out;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) = Event::make(type, "{\"i\":" + std::to_string(i) + "}", "k");
    e.seq = i + 1;
    out.push_back(std::move(e));
  }
  return out;
}

TEST(RedisStreamCluster, AnySeedOrderDeliversEveryBatchInOrderToTheStreamsNode) {
  auto nodes = cluster_nodes();
  if (nodes.empty()) GTEST_SKIP() << "no Redis Cluster (OUTPOST_TEST_REDIS_CLUSTER_URL)";
  const std::string tag = testing::unique_name("rsc");
  const std::string stream = "{" + tag + "}.orders";
  std::vector<std::string> sent;
  // Each node first in turn: at least one order starts at a node that does not serve the slot.
  for (std::size_t first = 0; first < nodes.size(); ++first) {
    auto sink = open_redis_stream_sink("redis-stream://" + hosts(nodes, first) + "/{" + tag +
                                       "}.{type}?timeout_ms=5000");
    for (int round = 0; round < 2; ++round) {
      auto events = batch(20, "orders");
      auto results = sink->deliver(events);
      ASSERT_EQ(results.size(), events.size());
      for (std::size_t i = 0; i < results.size(); ++i) {
        ASSERT_TRUE(results[i].ok()) << "seed order " << first << ": " << results[i].error;
        sent.push_back(events[i].id.str());
      }
    }
  }
  EXPECT_EQ(entry_ids(nodes, stream), sent) << "every event once, in order";
}

TEST(RedisStreamCluster, StreamsWithoutACommonHashTagAreRefusedNamingIt) {
  auto nodes = cluster_nodes();
  if (nodes.empty()) GTEST_SKIP() << "no Redis Cluster (OUTPOST_TEST_REDIS_CLUSTER_URL)";
  // "rsc-notag.a" and "rsc-notag.b" hash to different slots (CLUSTER KEYSLOT: 11000 and 6811).
  auto sink = open_redis_stream_sink("redis-stream://" + hosts(nodes, 0) + "/rsc-notag.{type}");
  auto events = batch(1, "a");
  auto b = batch(1, "b");
  events.push_back(b[0]);
  events[1].key = "other";
  auto results = sink->deliver(events);
  ASSERT_EQ(results.size(), 2u);
  bool refused_with_reason = false;
  for (const auto& r : results)
    if (!r.ok() && r.error.find("hash tag") != std::string::npos) refused_with_reason = true;
  EXPECT_TRUE(refused_with_reason) << results[0].error;
}

}  // namespace
}  // namespace outpost
