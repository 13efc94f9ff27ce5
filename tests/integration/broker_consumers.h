#pragma once
// Test-side consumers for the broker sinks: read everything a topic/stream holds back as
// ReceivedEvent (tests/support/sink_cases.h), in the broker's order (per partition for Kafka,
// stream order for Redis Streams and JetStream). Used by the sink conformance cases and by the
// broker integration tests. Plain client calls, no outpost code, so they check the sinks from
// the outside as a consumer would.

#include <unistd.h>

// Each section needs only its own client library, so a build without one still compiles.
#if __has_include(<librdkafka/rdkafka.h>)
#include <librdkafka/rdkafka.h>
#define OUTPOST_TEST_HAVE_RDKAFKA 1
#endif
#if __has_include(<hiredis/hiredis.h>)
#include <hiredis/hiredis.h>
#define OUTPOST_TEST_HAVE_HIREDIS 1
#endif
#if __has_include(<nats/nats.h>)
#include <nats/nats.h>
#define OUTPOST_TEST_HAVE_NATS 1
#endif

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "sink_cases.h"

namespace outpost::testing::brokers {

// The variable's value, "" when unset.
inline std::string env_text(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A unique name for a topic/stream/subject of one test: [A-Za-z0-9_] only, so it is valid
// everywhere (JetStream stream names allow no '.', '*', '>').
inline std::string unique_name(const std::string& prefix) {
  static std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid())};
  static std::atomic<unsigned> counter{0};
  return prefix + "_" + std::to_string(::getpid()) + "_" + std::to_string(rng() % 1'000'000) + "_" +
         std::to_string(counter++);
}

struct Received : ReceivedEvent {
  int partition = 0;     // Kafka partition; 0 elsewhere
  std::string position;  // offset / stream id / stream sequence, as text
};

inline const std::string* find_header(const ReceivedEvent& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return &v;
  return nullptr;
}

#ifdef OUTPOST_TEST_HAVE_RDKAFKA
// ---- Kafka ----------------------------------------------------------------------------------

// Reads every message of `topic` from the beginning of each partition until `expected` messages
// arrived (then `settle` more to catch extras) or `timeout` passed. Ordered by partition, then
// offset.
inline std::vector<Received> kafka_read_all(
    const std::string& bootstrap, const std::string& topic, std::size_t expected,
    std::chrono::milliseconds timeout = std::chrono::seconds(15),
    std::chrono::milliseconds settle = std::chrono::milliseconds(200)) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", unique_name("reader").c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  rd_kafka_conf_set(conf, "enable.partition.eof", "false", err, sizeof err);
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
  std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)> rk(
      rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err), [](rd_kafka_t* k) {
        rd_kafka_consumer_close(k);
        rd_kafka_destroy(k);
      });
  if (!rk) throw std::runtime_error(std::string("kafka consumer: ") + err);

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Partition count from metadata (the topic may need a moment to exist).
  int partitions = 0;
  while (partitions == 0 && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_topic_t* t = rd_kafka_topic_new(rk.get(), topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    if (rd_kafka_metadata(rk.get(), 0, t, &md, 5000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR)
        partitions = md->topics[0].partition_cnt;
      rd_kafka_metadata_destroy(md);
    }
    rd_kafka_topic_destroy(t);
    if (partitions == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (partitions == 0) return {};
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p)
    rd_kafka_topic_partition_list_add(parts, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(rk.get(), parts);
  rd_kafka_topic_partition_list_destroy(parts);

  std::vector<std::vector<Received>> by_partition(static_cast<std::size_t>(partitions));
  std::size_t got = 0;
  auto settle_until = std::chrono::steady_clock::time_point::max();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline || now >= settle_until) break;
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 50);
    if (!m) continue;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->partition >= 0 && m->partition < partitions) {
      Received r;
      r.partition = m->partition;
      r.position = std::to_string(m->offset);
      if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
      if (m->payload) r.payload.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* value;
        size_t size;
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i)
          r.headers.emplace_back(name,
                                 value ? std::string(static_cast<const char*>(value), size) : "");
      }
      if (auto* id = find_header(r, "ce-id")) r.id = *id;
      if (auto* type = find_header(r, "ce-type")) r.type = *type;
      by_partition[static_cast<std::size_t>(m->partition)].push_back(std::move(r));
      if (++got >= expected && settle_until == std::chrono::steady_clock::time_point::max())
        settle_until = std::chrono::steady_clock::now() + settle;
    }
    rd_kafka_message_destroy(m);
  }
  std::vector<Received> out;
  for (auto& part : by_partition)
    for (auto& r : part) out.push_back(std::move(r));
  return out;
}

#endif

#ifdef OUTPOST_TEST_HAVE_HIREDIS
// ---- Redis ----------------------------------------------------------------------------------

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  int port = 0;
  int db = 0;
};

// "redis://host:port/db" -> endpoint (the tests' own URLs only; no credentials).
inline RedisEndpoint parse_redis_url(const std::string& url) {
  RedisEndpoint ep;
  auto rest = url.substr(url.find("://") + 3);
  auto slash = rest.find('/');
  auto hostport = rest.substr(0, slash);
  auto colon = hostport.rfind(':');
  ep.host = hostport.substr(0, colon);
  ep.port = std::stoi(hostport.substr(colon + 1));
  if (slash != std::string::npos && slash + 1 < rest.size())
    ep.db = std::stoi(rest.substr(slash + 1));
  return ep;
}

struct RedisDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisPtr = std::unique_ptr<redisContext, RedisDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

inline RedisPtr redis_connect(const RedisEndpoint& ep) {
  RedisPtr c(redisConnect(ep.host.c_str(), ep.port));
  if (!c || c->err)
    throw std::runtime_error("redis connect: " + std::string(c ? c->errstr : "oom"));
  if (ep.db) freeReplyObject(redisCommand(c.get(), "SELECT %d", ep.db));
  return c;
}

inline ReplyPtr redis_command(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* r = static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
  if (!r) throw std::runtime_error(std::string("redis: ") + c->errstr);
  return ReplyPtr(r);
}

inline Received redis_entry(const redisReply* entry) {
  Received r;
  r.position = std::string(entry->element[0]->str, entry->element[0]->len);
  const redisReply* fields = entry->element[1];
  for (size_t i = 0; i + 1 < fields->elements; i += 2) {
    std::string k(fields->element[i]->str, fields->element[i]->len);
    std::string v(fields->element[i + 1]->str, fields->element[i + 1]->len);
    if (k == "id") {
      r.id = v;
    } else if (k == "type") {
      r.type = v;
    } else if (k == "key") {
      r.key = v;
    } else if (k == "payload") {
      r.payload = v;
    } else if (k == "headers") {
      // Inside the headers JSON: named "headers.<name>", so a test can tell them from fields
      // of their own (traceparent, tracestate).
      auto j = nlohmann::json::parse(v, nullptr, false);
      if (j.is_object())
        for (auto& [hk, hv] : j.items())
          r.headers.emplace_back("headers." + hk, hv.get<std::string>());
    } else if (k != "occurred_at") {
      r.headers.emplace_back(k, v);  // another field of the entry
    }
  }
  return r;
}

// Every entry of `stream`, in stream order.
inline std::vector<Received> redis_read_all(const RedisEndpoint& ep, const std::string& stream) {
  auto c = redis_connect(ep);
  std::vector<Received> out;
  std::string from = "-";
  for (;;) {
    auto r = redis_command(c.get(), {"XRANGE", stream, from, "+", "COUNT", "5000"});
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) break;
    for (size_t i = 0; i < r->elements; ++i) out.push_back(redis_entry(r->element[i]));
    from = "(" + out.back().position;
  }
  return out;
}

#endif

#ifdef OUTPOST_TEST_HAVE_NATS
// ---- NATS JetStream -------------------------------------------------------------------------

struct NatsConnDeleter {
  void operator()(natsConnection* nc) const { natsConnection_Destroy(nc); }
};
struct JsDeleter {
  void operator()(jsCtx* js) const { jsCtx_Destroy(js); }
};

// Every message of `stream` (from its first sequence) until `expected` arrived or `timeout`.
inline std::vector<Received> nats_read_all(
    const std::string& url, const std::string& stream, const std::string& filter,
    std::size_t expected, std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
  natsConnection* raw = nullptr;
  if (natsConnection_ConnectTo(&raw, url.c_str()) != NATS_OK)
    throw std::runtime_error("nats connect " + url);
  std::unique_ptr<natsConnection, NatsConnDeleter> nc(raw);
  jsCtx* rawjs = nullptr;
  natsConnection_JetStream(&rawjs, nc.get(), nullptr);
  std::unique_ptr<jsCtx, JsDeleter> js(rawjs);
  jsSubOptions so;
  jsSubOptions_Init(&so);
  so.Stream = stream.c_str();
  so.Config.DeliverPolicy = js_DeliverAll;
  so.Config.AckPolicy = js_AckNone;
  const std::string durable = unique_name("reader");
  natsSubscription* sub = nullptr;
  jsErrCode jerr = static_cast<jsErrCode>(0);
  natsStatus s =
      js_PullSubscribe(&sub, js.get(), filter.c_str(), durable.c_str(), nullptr, &so, &jerr);
  if (s != NATS_OK)
    throw std::runtime_error(std::string("nats pull subscribe: ") + natsStatus_GetText(s) +
                             " jerr=" + std::to_string(jerr));
  std::vector<Received> out;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // A PubAck means the stream stored the message, so once a fetch comes back empty everything
  // delivered so far has been read.
  while (out.size() < expected && std::chrono::steady_clock::now() < deadline) {
    natsMsgList list{};
    s = natsSubscription_Fetch(&list, sub, 1000, 500, &jerr);
    if (list.Count == 0) {
      natsMsgList_Destroy(&list);
      break;
    }
    for (int i = 0; i < list.Count; ++i) {
      natsMsg* m = list.Msgs[i];
      Received r;
      r.payload.assign(natsMsg_GetData(m), static_cast<size_t>(natsMsg_GetDataLength(m)));
      const char** keys = nullptr;
      int count = 0;
      if (natsMsgHeader_Keys(m, &keys, &count) == NATS_OK) {
        for (int k = 0; k < count; ++k) {
          const char* v = nullptr;
          natsMsgHeader_Get(m, keys[k], &v);
          r.headers.emplace_back(keys[k], v ? v : "");
        }
        free(keys);
      }
      if (auto* id = find_header(r, "Nats-Msg-Id")) r.id = *id;
      if (auto* type = find_header(r, "ce-type")) r.type = *type;
      if (auto* key = find_header(r, "ce-partitionkey")) r.key = *key;
      out.push_back(std::move(r));
    }
    natsMsgList_Destroy(&list);
  }
  natsSubscription_Unsubscribe(sub);
  natsSubscription_Destroy(sub);
  return out;
}

inline void nats_delete_stream(const std::string& url, const std::string& stream) {
  natsConnection* raw = nullptr;
  if (natsConnection_ConnectTo(&raw, url.c_str()) != NATS_OK) return;
  std::unique_ptr<natsConnection, NatsConnDeleter> nc(raw);
  jsCtx* rawjs = nullptr;
  natsConnection_JetStream(&rawjs, nc.get(), nullptr);
  std::unique_ptr<jsCtx, JsDeleter> js(rawjs);
  js_DeleteStream(js.get(), stream.c_str(), nullptr, nullptr);
}

#endif

}  // namespace outpost::testing::brokers
