// Kafka sink over librdkafka: see include/outpost/sinks/kafka.h for the contract.
//
// deliver() produces the batch asynchronously and then serves delivery reports on the calling
// thread (rd_kafka_flush/poll run the dr_msg_cb there), so the per-call state needs no lock.
// Each message carries an opaque token = (call number << kIndexBits) | index; a report whose
// call number is not the current one belongs to a call that already gave up waiting and is
// ignored (its event was reported failed and will be redelivered by the relay).

#include "outpost/sinks/kafka.h"

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/cloudevents.h"
#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"

namespace outpost {
namespace {

struct ProducerDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
};
using ProducerPtr = std::unique_ptr<rd_kafka_t, ProducerDeleter>;
using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;

constexpr int kIndexBits = 24;  // up to 16M events per deliver() call
constexpr std::uintptr_t kIndexMask = (std::uintptr_t{1} << kIndexBits) - 1;

class KafkaSink final : public Sink {
 public:
  KafkaSink(std::string topic_template, ConfPtr conf, Duration timeout, std::string where)
      : topic_template_(std::move(topic_template)),
        conf_(std::move(conf)),
        timeout_(timeout),
        where_(std::move(where)) {
    rd_kafka_conf_set_opaque(conf_.get(), this);
    rd_kafka_conf_set_dr_msg_cb(conf_.get(), &KafkaSink::on_delivery);
    rd_kafka_conf_set_error_cb(conf_.get(), &KafkaSink::on_error);
    // librdkafka logs every refused connection; the failure texts carry what matters.
    rd_kafka_conf_set_log_cb(conf_.get(), [](const rd_kafka_t*, int, const char*, const char*) {});
    connect();
  }

  ~KafkaSink() override { close(); }

  std::string_view name() const override { return "kafka"; }

  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::vector<DeliveryResult> results(events.size());
    if (events.empty()) return results;
    if (!producer_ || rd_kafka_fatal_error(producer_.get(), nullptr, 0)) connect();

    ++call_;
    last_error_.clear();  // errors (refused connections...) seen during this call explain failures
    results_ = &results;
    done_.assign(events.size(), false);
    outstanding_ = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout_ + Duration{1000};

    for (std::size_t i = 0; i < events.size(); ++i) produce(events[i], i, results, deadline);

    while (outstanding_ > 0) {
      auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      // flush() sends lingering messages at once and serves the delivery reports.
      rd_kafka_flush(producer_.get(), static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
    }
    if (outstanding_ > 0) {
      std::string why = "no delivery report within " + std::to_string(timeout_.count()) + " ms";
      if (!last_error_.empty()) why += " (last error: " + last_error_ + ")";
      for (std::size_t i = 0; i < events.size(); ++i)
        if (!done_[i]) results[i] = DeliveryResult::failed(why);
    }
    results_ = nullptr;
    ++call_;  // late reports of this call are ignored
    core::hold_back_failed_keys(events, results);
    return results;
  }

  void close() override {
    if (!producer_) return;
    rd_kafka_flush(producer_.get(), static_cast<int>(timeout_.count()));
  }

 private:
  void connect() {
    char err[512];
    ConfPtr conf(rd_kafka_conf_dup(conf_.get()));
    rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof err);
    if (!rk) throw ConfigError("kafka sink " + where_ + ": " + err, "kafka");
    conf.release();  // owned by rk now
    producer_.reset(rk);
  }

  void produce(const StoredEvent& event, std::size_t index, std::vector<DeliveryResult>& results,
               std::chrono::steady_clock::time_point deadline) {
    const std::string topic = core::render_type_template(topic_template_, event.type);
    rd_kafka_headers_t* headers = rd_kafka_headers_new(8);
    for (const auto& [k, v] : core::cloudevents_headers(event))
      rd_kafka_header_add(headers, k.data(), static_cast<ssize_t>(k.size()), v.data(),
                          static_cast<ssize_t>(v.size()));
    const std::string id = event.id.str();
    rd_kafka_header_add(headers, "outpost-id", -1, id.data(), static_cast<ssize_t>(id.size()));
    void* token = reinterpret_cast<void*>((static_cast<std::uintptr_t>(call_) << kIndexBits) |
                                          static_cast<std::uintptr_t>(index));
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer_.get(), RD_KAFKA_V_TOPIC(topic.c_str()),
          RD_KAFKA_V_KEY(event.key.empty() ? nullptr : event.key.data(), event.key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(event.payload.data()), event.payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers),
          RD_KAFKA_V_OPAQUE(token), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ++outstanding_;  // librdkafka owns the headers now
        return;
      }
      // Bounded in-flight window (queue.buffering.max.messages): wait for reports, then retry.
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && std::chrono::steady_clock::now() < deadline) {
        rd_kafka_poll(producer_.get(), 10);
        continue;
      }
      rd_kafka_headers_destroy(headers);
      done_[index] = true;
      results[index] = DeliveryResult::failed(std::string("kafka produce to '") + topic +
                                              "': " + rd_kafka_err2str(err));
      return;
    }
  }

  static void on_delivery(rd_kafka_t*, const rd_kafka_message_t* msg, void* opaque) noexcept {
    try {
      static_cast<KafkaSink*>(opaque)->handle_report(msg);
    } catch (...) {
      // Nothing may cross the C callback; an unhandled report times out as failed.
    }
  }

  void handle_report(const rd_kafka_message_t* msg) {
    const auto token = reinterpret_cast<std::uintptr_t>(msg->_private);
    if ((token >> kIndexBits) != (call_ & (~std::uintptr_t{0} >> kIndexBits)) || !results_) return;
    const std::size_t index = token & kIndexMask;
    if (index >= done_.size() || done_[index]) return;
    done_[index] = true;
    --outstanding_;
    if (msg->err == RD_KAFKA_RESP_ERR_NO_ERROR)
      (*results_)[index] = DeliveryResult::delivered();
    else
      (*results_)[index] = DeliveryResult::failed(
          std::string("kafka: ") + rd_kafka_err2str(msg->err) +
          (last_error_.empty() ? std::string() : " (last error: " + last_error_ + ")"));
  }

  static void on_error(rd_kafka_t*, int, const char* reason, void* opaque) noexcept {
    try {
      static_cast<KafkaSink*>(opaque)->last_error_ = reason ? reason : "";
    } catch (...) {
    }
  }

  std::string topic_template_;
  ConfPtr conf_;  // template for (re)creating the producer after a fatal error
  Duration timeout_;
  std::string where_;
  ProducerPtr producer_;
  // Per-call state, touched only on the deliver() thread (reports are served there).
  std::uintptr_t call_ = 0;
  std::vector<DeliveryResult>* results_ = nullptr;
  std::vector<bool> done_;
  std::size_t outstanding_ = 0;
  std::string last_error_;
};

void set_property(rd_kafka_conf_t* conf, const std::string& name, const std::string& value,
                  const std::string& where) {
  char err[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK)
    throw ConfigError("kafka sink URL " + where + ": parameter '" + name + "': " + err, "kafka");
}

}  // namespace

std::unique_ptr<Sink> open_kafka_sink(std::string_view text, const SinkOptions& options) {
  const auto url = core::Url::parse(text);
  const std::string where = url.redacted();
  if (url.scheme() != "kafka")
    throw ConfigError("kafka sink URL " + where + ": scheme must be kafka://", "kafka");
  if (url.hosts().empty() || url.hosts().front().host.empty())
    throw ConfigError("kafka sink URL " + where + ": bootstrap host missing", "kafka");
  if (url.path().empty())
    throw ConfigError("kafka sink URL " + where + ": topic (the URL path) missing", "kafka");
  const Duration timeout{
      url.int_param("timeout_ms", 1, 3'600'000).value_or(options.timeout.count())};

  ConfPtr conf(rd_kafka_conf_new());
  set_property(conf.get(), "bootstrap.servers", url.host_list(9092), where);
  set_property(conf.get(), "enable.idempotence", "true", where);
  set_property(conf.get(), "acks", "all", where);
  // deliver() waits for the batch anyway: a long linger would only add latency per batch.
  set_property(conf.get(), "linger.ms", "1", where);
  set_property(conf.get(), "message.timeout.ms", std::to_string(timeout.count()), where);
  // librdkafka waits up to 10 s between reconnects by default: after an outage the relay would
  // sit idle that long although the broker is back.
  set_property(conf.get(), "reconnect.backoff.max.ms", "1000", where);
  for (const auto& [name, value] : url.query()) {
    if (name.find('.') == std::string::npos) continue;
    url.param(name);  // known: passed through to librdkafka, which validates it
    if (name == "enable.idempotence" && value != "true")
      throw ConfigError("kafka sink URL " + where +
                            ": parameter 'enable.idempotence' must stay true (per-key order and "
                            "no duplicates from producer retries depend on it)",
                        "kafka");
    set_property(conf.get(), name, value, where);
  }
  url.reject_unknown();
  if (url.user().size() || url.password().size())
    throw ConfigError(
        "kafka sink URL " + where + ": credentials go in sasl.username / sasl.password parameters",
        "kafka");
  return std::make_unique<KafkaSink>(url.path(), std::move(conf), timeout, where);
}

}  // namespace outpost
