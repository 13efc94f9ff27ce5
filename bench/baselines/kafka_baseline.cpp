// The raw Kafka baseline for `outpost bench --sink kafka://...`: the same number of messages
// (payload_bytes each, keyed round robin over 1000 keys, with the sink's headers: the CloudEvents
// ce-specversion, ce-id, ce-type, ce-source, ce-time, ce-partitionkey and outpost-id) produced by
// a plain librdkafka loop with the settings the sink uses (idempotent, acks=all, linger.ms=5 here
// since nothing waits per batch), then one flush; events/s counts only messages whose delivery
// report succeeded. No outpost code runs here. Topic: the sink URL's topic with `{type}` ->
// "baseline".

#include <librdkafka/rdkafka.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "baseline.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::bench {

BaselineResult kafka_baseline(const BaselineRequest& request) {
  const auto url = core::Url::parse(request.url);
  std::string topic = url.path();
  if (auto pos = topic.find("{type}"); pos != std::string::npos) topic.replace(pos, 6, "baseline");
  topic += ".baseline";

  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  auto set = [&](const char* k, const std::string& v) {
    if (rd_kafka_conf_set(conf, k, v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK)
      throw ConfigError(std::string("kafka baseline: ") + k + ": " + err, "kafka");
  };
  set("bootstrap.servers", url.host_list(9092));
  set("enable.idempotence", "true");
  set("acks", "all");
  set("linger.ms", "5");
  set("queue.buffering.max.messages", "1000000");
  for (const auto& [k, v] : url.query())
    if (k.find('.') != std::string::npos) set(k.c_str(), v);
  static std::atomic<std::size_t> delivered_ok;
  delivered_ok = 0;
  rd_kafka_conf_set_dr_msg_cb(conf, [](rd_kafka_t*, const rd_kafka_message_t* m, void*) {
    if (!m->err) delivered_ok.fetch_add(1, std::memory_order_relaxed);
  });
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
  std::unique_ptr<rd_kafka_t, void (*)(rd_kafka_t*)> rk(
      rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err), rd_kafka_destroy);
  if (!rk) throw ConfigError(std::string("kafka baseline: ") + err, "kafka");

  const std::string payload(request.payload_bytes, 'x');
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("key-" + std::to_string(i));
  const std::string occurred = "2026-11-22T00:00:00.000000Z";
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < request.events; ++i) {
    const std::string& key = keys[i % keys.size()];
    const std::string id = EventId::generate().str();
    rd_kafka_headers_t* headers = rd_kafka_headers_new(8);
    rd_kafka_header_add(headers, "ce-specversion", -1, "1.0", -1);
    rd_kafka_header_add(headers, "ce-id", -1, id.data(), static_cast<ssize_t>(id.size()));
    rd_kafka_header_add(headers, "ce-type", -1, "baseline", -1);
    rd_kafka_header_add(headers, "ce-source", -1, "outpost", -1);
    rd_kafka_header_add(headers, "ce-time", -1, occurred.data(),
                        static_cast<ssize_t>(occurred.size()));
    rd_kafka_header_add(headers, "ce-partitionkey", -1, key.data(),
                        static_cast<ssize_t>(key.size()));
    rd_kafka_header_add(headers, "outpost-id", -1, id.data(), static_cast<ssize_t>(id.size()));
    for (;;) {
      auto e = rd_kafka_producev(
          rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_END);
      if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        rd_kafka_poll(rk.get(), 10);
        continue;
      }
      if (e) {
        rd_kafka_headers_destroy(headers);  // not taken over by a failed producev
        throw Error(ErrorCode::backend, "kafka",
                    std::string("kafka baseline produce: ") + rd_kafka_err2str(e));
      }
      break;
    }
    rd_kafka_poll(rk.get(), 0);
  }
  rd_kafka_flush(rk.get(), 60'000);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BaselineResult r;
  r.events_per_s = seconds > 0 ? delivered_ok.load() / seconds : 0;
  r.what =
      "librdkafka producev loop with the sink's headers, idempotent, acks=all, linger.ms=5, one "
      "flush, topic " +
      topic;
  return r;
}

}  // namespace outpost::bench
