// Kafka sink over librdkafka: see include/outpost/sinks/kafka.h for the contract.
//
// deliver() produces the batch asynchronously and then serves delivery reports on the calling
// thread (rd_kafka_flush/poll run the dr_msg_cb there), so the per-call state needs no lock.
// Each message carries an opaque token = (call number << kIndexBits) | index; a report whose
// call number is not the current one belongs to a call that already gave up waiting and is
// ignored (its event was reported failed and will be redelivered by the relay).
//
// Speed (a batch of 1000 is confirmed in a few ms by the mock cluster): deliver() produces the
// whole batch, then rd_kafka_flush() ends the linger at once, so linger.ms only gathers the batch
// into one request per partition while it is being produced (a short linger split it into many
// small requests, and the idempotent producer has at most 5 in flight per broker). Topic handles
// are cached per event type (producev with a topic name looks the topic up under a lock each
// time), and the CloudEvents headers are added straight from the event's fields.

#include "outpost/sinks/kafka.h"

#include <librdkafka/rdkafka.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/cloudevents.h"
#include "core/key_seq.h"
#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"
#include "sinks/kafka/kafka_classify.h"

namespace outpost {

namespace kafka {

Outcome classify(rd_kafka_resp_err_t err) {
  switch (err) {
    // librdkafka's own: nothing reached a broker that could take it.
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR__QUEUE_FULL:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR__RESOLVE:
    case RD_KAFKA_RESP_ERR__SSL:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__UNKNOWN_BROKER:
    case RD_KAFKA_RESP_ERR__NODE_UPDATE:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR__RETRY:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
    case RD_KAFKA_RESP_ERR__ISR_INSUFF:
    case RD_KAFKA_RESP_ERR__FATAL:  // idempotence state lost; a new producer is made next batch
    case RD_KAFKA_RESP_ERR__DESTROY:
    // The brokers' "not now".
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_PREFERRED_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_ELIGIBLE_LEADERS_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR:
    case RD_KAFKA_RESP_ERR_THROTTLING_QUOTA_EXCEEDED:
    case RD_KAFKA_RESP_ERR_NOT_CONTROLLER:
    case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
      return Outcome::unavailable;
    default:  // MSG_SIZE_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE, TOPIC_AUTHORIZATION_FAILED...
      return Outcome::refused;
  }
}

}  // namespace kafka

namespace {

// The one place a librdkafka error becomes an outcome (kafka::classify), its text naming the class.
DeliveryResult outcome_of(rd_kafka_resp_err_t err, const std::string& why) {
  return kafka::classify(err) == kafka::Outcome::unavailable ? core::unavailable(why)
                                                             : core::refused(why);
}

struct ProducerDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct ConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }
};
using ProducerPtr = std::unique_ptr<rd_kafka_t, ProducerDeleter>;
using ConfPtr = std::unique_ptr<rd_kafka_conf_t, ConfDeleter>;
struct TopicDeleter {
  void operator()(rd_kafka_topic_t* rkt) const { rd_kafka_topic_destroy(rkt); }
};
using TopicPtr = std::unique_ptr<rd_kafka_topic_t, TopicDeleter>;
struct HeadersDeleter {
  void operator()(rd_kafka_headers_t* h) const { rd_kafka_headers_destroy(h); }
};
using HeadersPtr = std::unique_ptr<rd_kafka_headers_t, HeadersDeleter>;

// Topic handles kept per event type; beyond this many types the cache starts over (a handle is
// only a reference: librdkafka keeps the topic and its in-flight messages either way).
constexpr std::size_t kMaxCachedTopics = 4096;

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

    for (std::size_t i = 0; i < events.size(); ++i) {
      // Once the local queue stayed full up to the deadline, the rest would wait for nothing.
      if (queue_full_ && !done_[i]) {
        done_[i] = true;
        results[i] = core::not_sent_while_unavailable(*queue_full_);
        continue;
      }
      produce(events[i], i, results, deadline);
    }
    queue_full_.reset();

    while (outstanding_ > 0) {
      auto left = std::chrono::duration_cast<Duration>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      // flush() sends lingering messages at once and serves the delivery reports.
      rd_kafka_flush(producer_.get(), static_cast<int>(std::min<std::int64_t>(left.count(), 100)));
    }
    if (outstanding_ > 0) {  // a message timeout, noticed by us before librdkafka said so
      std::string why = "no delivery report within " + std::to_string(timeout_.count()) + " ms";
      if (!last_error_.empty()) why += " (last error: " + last_error_ + ")";
      for (std::size_t i = 0; i < events.size(); ++i)
        if (!done_[i]) results[i] = outcome_of(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, why);
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
    conf.release();   // owned by rk now
    topics_.clear();  // handles of the old producer go before it
    single_topic_.reset();
    producer_.reset(rk);
  }

  // The topic handle for an event of `type`, created on first use; nullptr with `error` set
  // when librdkafka refuses the name.
  rd_kafka_topic_t* topic_for(const std::string& type, std::string& error) {
    if (!per_type_) {
      if (!single_topic_) single_topic_ = new_topic(topic_template_, error);
      return single_topic_.get();
    }
    if (auto it = topics_.find(type); it != topics_.end()) return it->second.get();
    const std::string name = core::render_type_template(topic_template_, type);
    TopicPtr topic = new_topic(name, error);
    if (!topic) return nullptr;
    if (topics_.size() >= kMaxCachedTopics) topics_.clear();
    return topics_.emplace(type, std::move(topic)).first->second.get();
  }

  TopicPtr new_topic(const std::string& name, std::string& error) {
    TopicPtr topic(rd_kafka_topic_new(producer_.get(), name.c_str(), nullptr));
    if (!topic) error = "kafka topic '" + name + "': " + rd_kafka_err2str(rd_kafka_last_error());
    return topic;
  }

  // The CloudEvents binary-mode headers (core::cloudevents_headers: same names, values and
  // order) plus outpost-id; header_add copies, so views of the event's fields will do.
  HeadersPtr make_headers(const StoredEvent& event) {
    HeadersPtr h(rd_kafka_headers_new(8 + event.headers.size()));
    auto add = [&](std::string_view name, std::string_view value) {
      rd_kafka_header_add(h.get(), name.data(), static_cast<ssize_t>(name.size()), value.data(),
                          static_cast<ssize_t>(value.size()));
    };
    char id_buf[37];
    const std::string_view id = core::format_event_id(event.id, id_buf);
    core::for_each_cloudevents_header(event, id, time_, attr_, add);
    add("outpost-id", id);
    char seq[24];
    if (auto key_seq = core::format_key_seq(event, seq); !key_seq.empty())
      add(kKeySeqHeader, key_seq);  // the key position (outpost/key_seq.h)
    return h;
  }

  void produce(const StoredEvent& event, std::size_t index, std::vector<DeliveryResult>& results,
               std::chrono::steady_clock::time_point deadline) {
    std::string error;
    rd_kafka_topic_t* topic = topic_for(event.type, error);
    if (!topic) {
      done_[index] = true;
      results[index] = outcome_of(rd_kafka_last_error(), error);
      return;
    }
    HeadersPtr headers = make_headers(event);
    void* token = reinterpret_cast<void*>((static_cast<std::uintptr_t>(call_) << kIndexBits) |
                                          static_cast<std::uintptr_t>(index));
    for (;;) {
      rd_kafka_resp_err_t err = rd_kafka_producev(
          producer_.get(), RD_KAFKA_V_RKT(topic),
          RD_KAFKA_V_KEY(event.key.empty() ? nullptr : event.key.data(), event.key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(event.payload.data()), event.payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(headers.get()),
          RD_KAFKA_V_OPAQUE(token), RD_KAFKA_V_END);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        headers.release();  // librdkafka owns the headers now
        ++outstanding_;
        return;
      }
      // Bounded in-flight window (queue.buffering.max.messages): send what is queued (flush
      // ends the linger), serve reports, then retry.
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && std::chrono::steady_clock::now() < deadline) {
        rd_kafka_flush(producer_.get(), 10);
        continue;
      }
      done_[index] = true;
      results[index] =
          outcome_of(err, std::string("kafka produce to '") + rd_kafka_topic_name(topic) +
                              "': " + rd_kafka_err2str(err));
      if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) queue_full_ = results[index];
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
      (*results_)[index] = outcome_of(
          msg->err,
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
  bool per_type_ = topic_template_.find("{type}") != std::string::npos;
  ProducerPtr producer_;
  // Topic handles of producer_ (declared after it: destroyed before it).
  TopicPtr single_topic_;                             // when the topic has no {type}
  std::unordered_map<std::string, TopicPtr> topics_;  // event type -> handle
  core::Rfc3339Formatter time_;
  std::string attr_;  // scratch for user header names
  // Per-call state, touched only on the deliver() thread (reports are served there).
  std::uintptr_t call_ = 0;
  std::vector<DeliveryResult>* results_ = nullptr;
  std::vector<bool> done_;
  std::size_t outstanding_ = 0;
  std::string last_error_;
  std::optional<DeliveryResult> queue_full_;  // set once producev stayed QUEUE_FULL to the deadline
};

void set_property(rd_kafka_conf_t* conf, const std::string& name, const std::string& value,
                  const std::string& where) {
  char err[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK)
    throw ConfigError("kafka sink URL " + where + ": parameter '" + name + "': " + err, "kafka");
}

// librdkafka's partitioners (its `partitioner` topic property), the one mixed producers need
// first: murmur2_random is the Java client's placement (docs/sinks.md, "Key placement").
constexpr std::string_view kPartitioners[] = {"murmur2_random", "murmur2", "consistent_random",
                                              "consistent",     "fnv1a",   "fnv1a_random",
                                              "random"};

// Everything open_kafka_sink needs, from the URL alone: no producer is made and nothing connects,
// so check_kafka_sink_url runs the same code to refuse a bad URL before anything is opened.
struct KafkaUrl {
  std::string topic;
  ConfPtr conf;
  Duration timeout;
  std::string where;
};

KafkaUrl parse_kafka_url(std::string_view text, const SinkOptions& options) {
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
  const std::optional<std::string> partitioner = url.param("partitioner");
  if (partitioner) {
    bool known = false;
    std::string names;
    for (std::string_view p : kPartitioners) {
      known = known || *partitioner == p;
      names += names.empty() ? "" : ", ";
      names += p;
    }
    if (!known)
      throw ConfigError("kafka sink URL " + where + ": parameter 'partitioner' is '" +
                            *partitioner + "'; it must be one of " + names +
                            " (murmur2_random places keys as the Java client does)",
                        "kafka");
  }

  ConfPtr conf(rd_kafka_conf_new());
  set_property(conf.get(), "bootstrap.servers", url.host_list(9092), where);
  set_property(conf.get(), "enable.idempotence", "true", where);
  set_property(conf.get(), "acks", "all", where);
  // deliver() flushes right after producing its batch, which ends the linger at once: the linger
  // only gathers the batch into one request per partition while it is produced (linger.ms=1
  // split a batch of 1000 into many small requests, 5 in flight at most: 190k vs 300k events/s).
  set_property(conf.get(), "linger.ms", "5", where);
  // A produce request goes out at once, not after the ACK of the previous one (Nagle). The
  // Java client and Kafka brokers set TCP_NODELAY too.
  set_property(conf.get(), "socket.nagle.disable", "true", where);
  set_property(conf.get(), "message.timeout.ms", std::to_string(timeout.count()), where);
  // librdkafka waits up to 10 s between reconnects by default: after an outage the relay would
  // sit idle that long although the broker is back.
  set_property(conf.get(), "reconnect.backoff.max.ms", "1000", where);
  // A topic property set on the global configuration applies to every topic handle the sink
  // makes (rd_kafka_topic_new with no topic configuration of its own).
  if (partitioner) set_property(conf.get(), "partitioner", *partitioner, where);
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
  return {url.path(), std::move(conf), timeout, where};
}

}  // namespace

std::unique_ptr<Sink> open_kafka_sink(std::string_view text, const SinkOptions& options) {
  KafkaUrl u = parse_kafka_url(text, options);
  return std::make_unique<KafkaSink>(std::move(u.topic), std::move(u.conf), u.timeout,
                                     std::move(u.where));
}

void check_kafka_sink_url(std::string_view text) {
  parse_kafka_url(text, SinkOptions{});
}

}  // namespace outpost
