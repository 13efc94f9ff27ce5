// Registers the Redis Streams sink with the sink conformance suite (a fresh stream per test on
// OUTPOST_TEST_REDIS_URL's server, read back with XRANGE), plus the Redis-specific checks:
// entry fields, stream per type, URL errors and an unreachable server.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../integration/broker_consumers.h"
#include "outpost/error.h"
#include "outpost/key_seq.h"
#include "outpost/sinks/redis_stream.h"
#include "server_process.h"
#include "sink_cases.h"
#include "sinks/redis_stream/redis_stream_classify.h"
#include "store_cases.h"  // require_all_endpoints()

namespace outpost::testing {
namespace {

using brokers::env_text;
using brokers::find_header;
using brokers::Received;
using brokers::unique_name;
using namespace brokers;

std::string redis_url() {
  return env_text("OUTPOST_TEST_REDIS_URL");
}

std::string sink_url(const std::string& stream, const std::string& params = {}) {
  auto ep = parse_redis_url(redis_url());
  std::string url = "redis-stream://" + ep.host + ":" + std::to_string(ep.port) + "/" + stream +
                    "?db=" + std::to_string(ep.db);
  return params.empty() ? url : url + "&" + params;
}

void delete_keys(const std::vector<std::string>& keys) {
  try {
    auto c = redis_connect(parse_redis_url(redis_url()));
    for (const auto& k : keys) redis_command(c.get(), {"DEL", k});
  } catch (...) {
  }
}

const bool registered = register_sink_case({
    .name = "redis_stream",
    .unavailable_reason =
        [] {
          return redis_url().empty()
                     ? std::string("OUTPOST_TEST_REDIS_URL not set (scripts/test starts redis)")
                     : std::string();
        },
    .make =
        [] {
          SinkFixture f;
          const std::string stream = unique_name("conf");
          f.url = sink_url(stream);
          f.sink = open_redis_stream_sink(f.url);
          f.read_back = [stream](std::size_t) {
            auto got = redis_read_all(parse_redis_url(redis_url()), stream);
            return std::vector<ReceivedEvent>(got.begin(), got.end());
          };
          f.cleanup = [stream] { delete_keys({stream}); };
          return f;
        },
    .make_down =
        [] {
          SinkFixture f;  // a server that is stopped: nothing listens at its port
          f.url = "redis-stream://127.0.0.1:" + std::to_string(free_port()) + "/s?timeout_ms=1000";
          f.sink = open_redis_stream_sink(f.url);
          return f;
        },
});

class RedisStreamSink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (redis_url().empty()) {
      if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_URL not set";
      GTEST_SKIP() << "OUTPOST_TEST_REDIS_URL not set";
    }
  }
};

StoredEvent make_event(int i, std::string type, std::string key) {
  StoredEvent e;
  e.id = EventId::generate();
  e.type = std::move(type);
  e.key = std::move(key);
  e.payload = R"({"i":)" + std::to_string(i) + "}";
  e.occurred_at = now();
  e.headers.emplace("traceparent", "00-t-" + std::to_string(i));
  e.seq = i;
  e.attempts = 1;
  return e;
}

TEST_F(RedisStreamSink, EntriesCarryTheDocumentedFieldsInAStreamPerType) {
  const std::string prefix = unique_name("tpl");
  auto sink = open_redis_stream_sink(sink_url(prefix + ":{type}"));
  EXPECT_EQ(sink->name(), "redis-stream");
  std::vector<StoredEvent> events = {make_event(1, "a.b", "k"), make_event(2, "c", "k"),
                                     make_event(3, "a.b", "")};
  for (const auto& r : sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;
  auto ep = parse_redis_url(redis_url());
  auto ab = redis_read_all(ep, prefix + ":a.b");
  auto c = redis_read_all(ep, prefix + ":c");
  delete_keys({prefix + ":a.b", prefix + ":c"});
  ASSERT_EQ(ab.size(), 2u);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(ab[0].id, events[0].id.str());
  EXPECT_EQ(ab[1].id, events[2].id.str());
  EXPECT_EQ(ab[1].key, "");
  EXPECT_EQ(c[0].type, "c");
  EXPECT_EQ(c[0].payload, events[1].payload);
  ASSERT_TRUE(find_header(c[0], "traceparent"));
  EXPECT_EQ(*find_header(c[0], "traceparent"), "00-t-2");
}

// The sink encodes its XADDs itself (RESP into one buffer): every field must arrive byte for
// byte, binary payloads and keys included, with occurred_at as format_rfc3339 and headers as
// their JSON object ("{}" when there are none), then traceparent and tracestate as fields of
// their own when the event has them, and key_seq for a keyed event.
TEST_F(RedisStreamSink, FieldsArriveByteForByte) {
  const std::string stream = unique_name("raw");
  auto sink = open_redis_stream_sink(sink_url(stream));
  std::vector<StoredEvent> events;
  const std::int64_t times_us[] = {1'700'000'000'000'007, 1'700'000'000'999'999,
                                   1'700'000'001'000'000, -1'500'001};
  for (int i = 0; i < 4; ++i) {
    StoredEvent e = make_event(i + 1, "raw.type", "k" + std::to_string(i));
    e.occurred_at = TimePoint{std::chrono::microseconds{times_us[i]}};
    events.push_back(std::move(e));
  }
  events[1].payload = std::string("bin\r\n\0\x01$3\r\n*", 13);
  events[1].key = std::string("k\0\r\n", 4);
  events[2].headers.clear();
  events[3].headers.emplace("quote\"d", "line\nbreak \xc3\xa9");
  events[3].headers.emplace("tracestate", "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE");
  events[3].payload.clear();
  for (const auto& r : sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;

  auto c = redis_connect(parse_redis_url(redis_url()));
  auto reply = redis_command(c.get(), {"XRANGE", stream, "-", "+"});
  delete_keys({stream});
  ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY);
  ASSERT_EQ(reply->elements, events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    nlohmann::json headers = nlohmann::json::object();
    for (const auto& [k, v] : e.headers) headers[k] = v;
    std::vector<std::string> want = {
        "id",      e.id.str(),    "type",    e.type,        "key",
        e.key,     "payload",     e.payload, "occurred_at", format_rfc3339(e.occurred_at),
        "headers", headers.dump()};
    for (const char* trace : {"traceparent", "tracestate"})
      if (auto it = e.headers.find(trace); it != e.headers.end()) {
        want.push_back(trace);
        want.push_back(it->second);
      }
    if (!e.key.empty()) {  // the key position (outpost/key_seq.h)
      want.emplace_back(kKeySeqField);
      want.push_back(std::to_string(e.seq));
    }
    const redisReply* fields = reply->element[i]->element[1];
    ASSERT_EQ(fields->elements, want.size()) << i;
    for (std::size_t f = 0; f < want.size(); ++f)
      EXPECT_EQ(std::string(fields->element[f]->str, fields->element[f]->len), want[f])
          << "entry " << i << " field " << f;
  }
}

TEST_F(RedisStreamSink, UnreachableServerIsUnavailableWithTheErrorText) {
  const auto port = free_port();
  auto sink = open_redis_stream_sink("redis-stream://127.0.0.1:" + std::to_string(port) +
                                     "/s?timeout_ms=1000");
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "k"),
                                     make_event(3, "a", "")};
  auto results = sink->deliver(events);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[0].error.rfind("unavailable: redis-stream connect 127.0.0.1:", 0), 0u)
      << results[0].error;
  EXPECT_NE(results[0].error.find("refused"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped) << "held back behind its key";
  EXPECT_EQ(results[2].status, DeliveryResult::Status::unavailable);
}

// Issue 17: a server that is full (maxmemory), stopped or restarting is an outage, not a
// failure of each event; once it is back the sink delivers again by itself. A private
// redis-server, so the test can fill and stop it.
TEST_F(RedisStreamSink, AFullOrStoppedServerIsUnavailableUntilItIsBack) {
  const auto port = free_port();
  ServerProcess server({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1",
                        "--save", "", "--appendonly", "no"});
  ASSERT_TRUE(wait_for_port(port, std::chrono::seconds(10)));
  auto admin = redis_connect(RedisEndpoint{"127.0.0.1", port, 0});
  auto sink = open_redis_stream_sink("redis-stream://127.0.0.1:" + std::to_string(port) +
                                     "/s?timeout_ms=1000");
  auto one = [&](int i) {
    std::vector<StoredEvent> events = {make_event(i, "a", "k")};
    return sink->deliver(events).at(0);
  };
  ASSERT_TRUE(one(1).ok());

  redis_command(admin.get(), {"CONFIG", "SET", "maxmemory", "1"});  // every write is -OOM now
  auto r = one(2);
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
  EXPECT_EQ(r.error.rfind("unavailable: redis-stream XADD s: OOM ", 0), 0u) << r.error;
  redis_command(admin.get(), {"CONFIG", "SET", "maxmemory", "0"});
  r = one(3);
  EXPECT_TRUE(r.ok()) << r.error;

  server.stop();
  r = one(4);  // the connection it had is gone
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
  r = one(5);  // and nothing listens
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
  server.start();
  ASSERT_TRUE(wait_for_port(port, std::chrono::seconds(10)));
  r = one(6);
  EXPECT_TRUE(r.ok()) << r.error;
}

TEST(RedisStreamClassify, ConnectionErrorsAndReplies) {
  using redis_stream::classify;
  using redis_stream::Outcome;
  for (int io : {REDIS_ERR_IO, REDIS_ERR_EOF, REDIS_ERR_PROTOCOL, REDIS_ERR_OOM})
    EXPECT_EQ(classify(io, {}), Outcome::unavailable) << io;
  for (const char* reply :
       {"LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "OOM command not allowed when used memory > 'maxmemory'.", "TRYAGAIN Multiple keys",
        "CLUSTERDOWN The cluster is down", "READONLY You can't write against a read only replica.",
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist",
        "WRONGPASS invalid username-password pair or user is disabled."})
    EXPECT_EQ(classify(0, reply), Outcome::unavailable) << reply;
  for (const char* reply :
       {"WRONGTYPE Operation against a key holding the wrong kind of value", "ERR syntax error",
        "NOPERM this user has no permissions to access one of the keys",
        "EXECABORT Transaction discarded because of previous errors.", "LOADINGX not a code"})
    EXPECT_EQ(classify(0, reply), Outcome::refused) << reply;
}

TEST_F(RedisStreamSink, WrongTypeKeyFailsItsEventAndHoldsBackItsKey) {
  const std::string key = unique_name("notastream");
  auto c = redis_connect(parse_redis_url(redis_url()));
  redis_command(c.get(), {"SET", key, "x"});
  auto sink = open_redis_stream_sink(sink_url("{type}"));
  std::vector<StoredEvent> events = {make_event(1, key, "k"), make_event(2, key, "k"),
                                     make_event(3, key, "other")};
  auto results = sink->deliver(events);
  delete_keys({key});
  EXPECT_EQ(results[0].status, DeliveryResult::Status::failed);
  EXPECT_EQ(results[0].error.rfind("refused: redis-stream XADD ", 0), 0u) << results[0].error;
  EXPECT_NE(results[0].error.find("WRONGTYPE"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped);
  EXPECT_EQ(results[2].status, DeliveryResult::Status::failed);
}

TEST_F(RedisStreamSink, UrlErrorsNameTheBadPart) {
  auto message = [](const std::string& url) {
    try {
      open_redis_stream_sink(url);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("redis-stream://127.0.0.1:6379/s?maxln=5").find("maxln"), std::string::npos);
  EXPECT_NE(message("redis-stream://127.0.0.1:6379/s?maxlen=-1").find("maxlen"), std::string::npos);
  EXPECT_NE(message("redis-stream://127.0.0.1:6379/").find("stream"), std::string::npos);
  // Several hosts are a Redis Cluster's seeds (docs/redis.md); an empty one is an error.
  EXPECT_EQ(message("redis-stream://a:1,b:2/s"), "no error");
  EXPECT_NE(message("redis-stream://a:1,:2/s").find("host"), std::string::npos);
}

}  // namespace
}  // namespace outpost::testing
