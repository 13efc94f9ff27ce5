// Registers the Kafka sink with the sink conformance suite (a fresh topic per test on the mock
// cluster of OUTPOST_TEST_KAFKA_BOOTSTRAP, read back with a plain librdkafka consumer), plus the
// Kafka-specific checks: headers and key as a consumer sees them, topic per type, URL errors,
// and an unreachable cluster failing events with librdkafka's text.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
// clang-format off: rdkafka_mock.h must come after rdkafka.h
#include <librdkafka/rdkafka_mock.h>
// clang-format on

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "../integration/broker_consumers.h"
#include "core/cloudevents.h"
#include "outpost/error.h"
#include "outpost/key_seq.h"
#include "outpost/sinks/kafka.h"
#include "server_process.h"
#include "sink_cases.h"
#include "sinks/kafka/kafka_classify.h"
#include "store_cases.h"  // require_all_endpoints()

namespace outpost::testing {
namespace {

using brokers::env_text;
using brokers::find_header;
using brokers::Received;
using brokers::unique_name;
using namespace brokers;

std::string bootstrap() {
  return env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP");
}

std::vector<ReceivedEvent> plain(std::vector<Received> in) {
  return {in.begin(), in.end()};
}

const bool registered = register_sink_case({
    .name = "kafka",
    .unavailable_reason =
        [] {
          return bootstrap().empty()
                     ? std::string(
                           "OUTPOST_TEST_KAFKA_BOOTSTRAP not set (scripts/test starts the "
                           "mock cluster)")
                     : std::string();
        },
    .make =
        [] {
          SinkFixture f;
          const std::string topic = unique_name("conf");
          f.url = "kafka://" + bootstrap() + "/" + topic;
          f.sink = open_kafka_sink(f.url);
          f.read_back = [topic](std::size_t expected) {
            return plain(kafka_read_all(bootstrap(), topic, expected));
          };
          return f;
        },
    .make_down =
        [] {
          SinkFixture f;  // every broker of the cluster is down: nothing listens at its address
          f.url = "kafka://127.0.0.1:" + std::to_string(free_port()) + "/t?timeout_ms=1500";
          f.sink = open_kafka_sink(f.url);
          return f;
        },
});

class KafkaSink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (bootstrap().empty()) {
      if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
      GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
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
  e.headers.emplace("correlation_id", "c-" + std::to_string(i));
  e.seq = i;
  e.attempts = 1;
  return e;
}

TEST_F(KafkaSink, ConsumerSeesKeyCloudEventsHeadersAndTopicPerType) {
  const std::string prefix = unique_name("tpl");
  auto sink = open_kafka_sink("kafka://" + bootstrap() + "/" + prefix + ".{type}");
  EXPECT_EQ(sink->name(), "kafka");
  std::vector<StoredEvent> events = {make_event(1, "order.created", "o-1"),
                                     make_event(2, "order.paid", "o-1"),
                                     make_event(3, "order.created", "")};
  auto results = sink->deliver(events);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.error;

  auto created = kafka_read_all(bootstrap(), prefix + ".order.created", 2);
  auto paid = kafka_read_all(bootstrap(), prefix + ".order.paid", 1);
  ASSERT_EQ(created.size(), 2u);
  ASSERT_EQ(paid.size(), 1u);
  const auto& r = paid[0];
  EXPECT_EQ(r.key, "o-1");
  EXPECT_EQ(r.payload, events[1].payload);
  ASSERT_TRUE(find_header(r, "ce-id"));
  EXPECT_EQ(*find_header(r, "ce-id"), events[1].id.str());
  ASSERT_TRUE(find_header(r, "outpost-id"));
  EXPECT_EQ(*find_header(r, "outpost-id"), events[1].id.str());
  ASSERT_TRUE(find_header(r, "ce-specversion"));
  EXPECT_EQ(*find_header(r, "ce-specversion"), "1.0");
  ASSERT_TRUE(find_header(r, "ce-type"));
  EXPECT_EQ(*find_header(r, "ce-type"), "order.paid");
  ASSERT_TRUE(find_header(r, "ce-correlationid"));
  EXPECT_EQ(*find_header(r, "ce-correlationid"), "c-2");
  // The keyless event is sent with no key at all.
  for (const auto& c : created) {
    if (c.id == events[2].id.str()) {
      EXPECT_TRUE(c.key.empty());
    }
  }
}

// The sink adds its headers straight from the event's fields (no vector of strings per event):
// they must stay exactly core::cloudevents_headers() (names, values, order) plus outpost-id and,
// for a keyed event, outpost-key-seq (its seq), also for user headers that map to a reserved or
// empty attribute and for any occurred_at.
TEST_F(KafkaSink, HeadersAreExactlyTheCloudEventsMappingPlusOutpostId) {
  const std::string topic = unique_name("hdr");
  auto sink = open_kafka_sink("kafka://" + bootstrap() + "/" + topic);
  std::vector<StoredEvent> events;
  const std::int64_t times_us[] = {1'700'000'000'000'007,
                                   1'700'000'000'999'999,
                                   1'700'000'001'000'000,
                                   1'700'000'001'123'456,
                                   -1'500'001,
                                   0};
  for (int i = 0; i < 6; ++i) {
    StoredEvent e = make_event(i + 1, "hdr.type", i % 2 ? "k" : "");
    e.occurred_at = TimePoint{std::chrono::microseconds{times_us[i]}};
    events.push_back(std::move(e));
  }
  events[1].headers.emplace("Type", "must not replace ce-type");
  events[1].headers.emplace("ID", "must not replace ce-id");
  events[1].headers.emplace("--", "no attribute name left");
  events[1].headers.emplace("Trace-Parent_1", "00-abc-01");
  events[2].headers.clear();
  auto results = sink->deliver(events);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.error;

  auto got = kafka_read_all(bootstrap(), topic, events.size());
  ASSERT_EQ(got.size(), events.size());
  for (const auto& e : events) {
    std::vector<std::pair<std::string, std::string>> want = core::cloudevents_headers(e);
    want.emplace_back("outpost-id", e.id.str());
    if (!e.key.empty()) want.emplace_back(kKeySeqHeader, std::to_string(e.seq));
    bool found = false;
    for (const auto& r : got) {
      if (r.id != e.id.str()) continue;
      found = true;
      ASSERT_EQ(r.headers.size(), want.size()) << e.id.str();
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(r.headers[i].first, want[i].first) << i;
        EXPECT_EQ(r.headers[i].second, want[i].second) << want[i].first;
      }
    }
    EXPECT_TRUE(found) << e.id.str();
  }
}

TEST_F(KafkaSink, UnreachableClusterIsUnavailableWithTheBrokerText) {
  const auto port = free_port();  // nobody listens there
  auto sink = open_kafka_sink("kafka://127.0.0.1:" + std::to_string(port) + "/t?timeout_ms=1500");
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "k"),
                                     make_event(3, "a", "other")};
  const auto start = std::chrono::steady_clock::now();
  auto results = sink->deliver(events);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(6)) << "deliver must give up after its timeout";
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[0].error.rfind("unavailable: ", 0), 0u) << results[0].error;
  EXPECT_NE(results[0].error.find("timed out"), std::string::npos) << results[0].error;
  // Later events of an unavailable key are held back, not attempted again in this batch.
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped) << results[1].error;
  EXPECT_EQ(results[2].status, DeliveryResult::Status::unavailable);
}

// A private mock cluster in this process, so a test can take its brokers down.
class PrivateCluster {
 public:
  explicit PrivateCluster(int brokers = 3) : brokers_(brokers) {
    char err[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) throw std::runtime_error(err);
    cluster_ = rd_kafka_mock_cluster_new(rk_, brokers);
    if (!cluster_) throw std::runtime_error("rd_kafka_mock_cluster_new failed");
  }
  ~PrivateCluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(rk_);
  }
  PrivateCluster(const PrivateCluster&) = delete;
  PrivateCluster& operator=(const PrivateCluster&) = delete;
  std::string bootstrap() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void set_all(bool up) {
    for (int id = 1; id <= brokers_; ++id)
      up ? rd_kafka_mock_broker_set_up(cluster_, id) : rd_kafka_mock_broker_set_down(cluster_, id);
  }
  rd_kafka_mock_cluster_t* get() { return cluster_; }

 private:
  int brokers_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

// Issue 17: a cluster whose brokers are all down is an outage (each event waited for the
// message timeout and then spent an attempt). Unavailable within the sink's timeout, and
// delivered again once the brokers are back.
TEST_F(KafkaSink, AllBrokersDownIsUnavailableUntilTheyReturn) {
  PrivateCluster cluster;
  const std::string topic = unique_name("down");
  auto sink = open_kafka_sink("kafka://" + cluster.bootstrap() + "/" + topic + "?timeout_ms=1500");
  std::vector<StoredEvent> first = {make_event(1, "a", "k")};
  ASSERT_TRUE(sink->deliver(first)[0].ok()) << sink->deliver(first)[0].error;

  cluster.set_all(false);
  std::vector<StoredEvent> events = {make_event(2, "a", "k"), make_event(3, "a", "k"),
                                     make_event(4, "a", "")};
  const auto start = std::chrono::steady_clock::now();
  auto results = sink->deliver(events);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable) << results[0].error;
  EXPECT_EQ(results[0].error.rfind("unavailable: kafka: ", 0), 0u) << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped) << results[1].error;
  EXPECT_EQ(results[2].status, DeliveryResult::Status::unavailable) << results[2].error;

  cluster.set_all(true);
  bool delivered = false;
  std::string last;
  for (int i = 0; i < 20 && !delivered; ++i) {  // reconnects within ~1 s; bounded by 20 calls
    auto again = sink->deliver(events);
    delivered = again[0].ok() && again[1].ok() && again[2].ok();
    if (!delivered) last = again[0].error + " | " + again[1].error + " | " + again[2].error;
  }
  EXPECT_TRUE(delivered) << "the sink did not deliver after the brokers returned: " << last;
}

// A record the broker rejects is refused (an attempt), not an outage: the rest of the batch
// goes through.
TEST_F(KafkaSink, ATooLargeRecordIsRefusedAndTheRestDelivered) {
  const std::string topic = unique_name("big");
  auto sink = open_kafka_sink("kafka://" + bootstrap() + "/" + topic);
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "big"),
                                     make_event(3, "a", "big"), make_event(4, "a", "")};
  events[1].payload = std::string(1'100'000, 'x');  // above message.max.bytes (1000000)
  auto results = sink->deliver(events);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0].ok()) << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryResult::Status::failed);
  EXPECT_EQ(results[1].error.rfind("refused: ", 0), 0u) << results[1].error;
  EXPECT_NE(results[1].error.find("too large"), std::string::npos) << results[1].error;
  EXPECT_EQ(results[2].status, DeliveryResult::Status::skipped) << "held back behind its key";
  EXPECT_TRUE(results[3].ok()) << results[3].error;
}

// The broker's answer in the delivery report decides too: a produce request answered
// INVALID_RECORD is refused, one answered NOT_ENOUGH_REPLICAS until the message timeout is
// unavailable (librdkafka retries it until then).
TEST_F(KafkaSink, TheBrokersAnswerDecidesTheClass) {
  PrivateCluster cluster(1);
  const std::string topic = unique_name("inject");
  auto sink = open_kafka_sink("kafka://" + cluster.bootstrap() + "/" + topic + "?timeout_ms=1500");
  std::vector<StoredEvent> warm = {make_event(1, "a", "k")};
  ASSERT_TRUE(sink->deliver(warm)[0].ok());

  rd_kafka_mock_push_request_errors(cluster.get(), 0 /* Produce */, 1,
                                    RD_KAFKA_RESP_ERR_INVALID_RECORD);
  std::vector<StoredEvent> one = {make_event(2, "a", "k")};
  auto r = sink->deliver(one)[0];
  EXPECT_EQ(r.status, DeliveryResult::Status::failed) << r.error;
  EXPECT_EQ(r.error.rfind("refused: kafka: ", 0), 0u) << r.error;

  const std::vector<rd_kafka_resp_err_t> retriable(200, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS);
  rd_kafka_mock_push_request_errors_array(cluster.get(), 0 /* Produce */, retriable.size(),
                                          retriable.data());
  std::vector<StoredEvent> two = {make_event(3, "a", "k")};
  r = sink->deliver(two)[0];
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
  EXPECT_EQ(r.error.rfind("unavailable: kafka: ", 0), 0u) << r.error;
}

// Kafka's own murmur2 (org.apache.kafka.common.utils.Utils.murmur2), written here from the Java
// source and not taken from librdkafka, so the test checks the sink against the Java client.
std::int32_t java_murmur2(const std::string& key) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(key.data());
  const std::uint32_t length = static_cast<std::uint32_t>(key.size());
  const std::uint32_t m = 0x5bd1e995;
  std::uint32_t h = 0x9747b28c ^ length;
  for (std::uint32_t i = 0; i < length / 4; ++i) {
    std::uint32_t k = data[i * 4] | (data[i * 4 + 1] << 8) | (data[i * 4 + 2] << 16) |
                      (static_cast<std::uint32_t>(data[i * 4 + 3]) << 24);
    k *= m;
    k ^= k >> 24;
    k *= m;
    h *= m;
    h ^= k;
  }
  const std::uint32_t tail = length & ~3u;
  switch (length % 4) {
    case 3:
      h ^= static_cast<std::uint32_t>(data[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<std::uint32_t>(data[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= data[tail];
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<std::int32_t>(h);
}

// The Java client's DefaultPartitioner / BuiltInPartitioner for a keyed record.
int java_partition(const std::string& key, int partitions) {
  return static_cast<int>((static_cast<std::uint32_t>(java_murmur2(key)) & 0x7fffffffu) %
                          static_cast<std::uint32_t>(partitions));
}

TEST(KafkaKeyPlacement, TheTestsMurmur2IsTheJavaClients) {
  // Kafka's UtilsTest.testMurmur2 vectors.
  EXPECT_EQ(java_murmur2("21"), -973932308);
  EXPECT_EQ(java_murmur2("foobar"), -790332482);
  EXPECT_EQ(java_murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(java_murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(java_murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(java_murmur2("abc"), 479470107);
}

// Issue 20 item 7: with ?partitioner=murmur2_random a key lands on the partition the Java client
// (and kafkajs' default) picks, so outpost can share a topic with those producers and keep each
// key in one partition. librdkafka's default (consistent_random, CRC32) places keys elsewhere.
TEST(KafkaKeyPlacement, Murmur2RandomPlacesEveryKeyWhereTheJavaClientDoes) {
  PrivateCluster cluster(1);
  constexpr int kPartitions = 7;
  std::vector<StoredEvent> events;
  for (int i = 0; i < 60; ++i)
    events.push_back(make_event(i, "placed", "order-" + std::to_string(i * 7919)));

  auto deliver_to_new_topic = [&](const std::string& query) {
    const std::string topic = unique_name("placement");
    EXPECT_EQ(rd_kafka_mock_topic_create(cluster.get(), topic.c_str(), kPartitions, 1),
              RD_KAFKA_RESP_ERR_NO_ERROR);
    auto sink = open_kafka_sink("kafka://" + cluster.bootstrap() + "/" + topic + query);
    for (const auto& r : sink->deliver(events)) EXPECT_TRUE(r.ok()) << r.error;
    auto got = kafka_read_all(cluster.bootstrap(), topic, events.size());
    EXPECT_EQ(got.size(), events.size());
    return got;
  };

  auto got = deliver_to_new_topic("?partitioner=murmur2_random");
  for (const auto& r : got)
    EXPECT_EQ(r.partition, java_partition(r.key, kPartitions)) << "key " << r.key;

  // The check has teeth: librdkafka's default puts some of these keys on another partition.
  int elsewhere = 0;
  for (const auto& r : deliver_to_new_topic(""))
    elsewhere += r.partition != java_partition(r.key, kPartitions);
  EXPECT_GT(elsewhere, 0);
}

// Every librdkafka partitioner is accepted; anything else is refused by the URL check, which
// makes no producer, naming the parameter and listing the partitioners.
TEST(KafkaKeyPlacement, PartitionerIsCheckedWithTheUrl) {
  for (const char* p : {"murmur2_random", "murmur2", "consistent_random", "consistent", "fnv1a",
                        "fnv1a_random", "random"}) {
    const std::string url = std::string("kafka://127.0.0.1:1/t?partitioner=") + p;
    EXPECT_NO_THROW(check_kafka_sink_url(url)) << p;
    EXPECT_NO_THROW(open_kafka_sink(url)) << p;
  }
  for (const char* bad : {"murmur3", "Murmur2_random", "", "java"}) {
    const std::string url = std::string("kafka://127.0.0.1:1/t?partitioner=") + bad;
    try {
      check_kafka_sink_url(url);
      ADD_FAILURE() << "accepted partitioner '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'partitioner'"), std::string::npos) << what;
      EXPECT_NE(what.find("murmur2_random"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    }
    EXPECT_THROW(open_kafka_sink(url), ConfigError) << bad;
  }
  // The rest of the URL is checked by the same code as open_kafka_sink.
  EXPECT_THROW(check_kafka_sink_url("kafka://127.0.0.1:1/t?linger.mss=5"), ConfigError);
  EXPECT_THROW(check_kafka_sink_url("kafka://127.0.0.1:1/"), ConfigError);
  EXPECT_THROW(check_kafka_sink_url("kafka://127.0.0.1:1/t?partitionr=murmur2"), ConfigError);
}

TEST(KafkaClassify, BrokerAndClientErrors) {
  using kafka::classify;
  using kafka::Outcome;
  for (auto err :
       {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__QUEUE_FULL,
        RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN,
        RD_KAFKA_RESP_ERR__RESOLVE, RD_KAFKA_RESP_ERR__SSL, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_BROKER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_KAFKA_STORAGE_ERROR})
    EXPECT_EQ(classify(err), Outcome::unavailable) << rd_kafka_err2name(err);
  for (auto err : {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_RECORD,
                   RD_KAFKA_RESP_ERR_INVALID_MSG, RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                   RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION, RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE,
                   RD_KAFKA_RESP_ERR__INVALID_ARG, RD_KAFKA_RESP_ERR_POLICY_VIOLATION})
    EXPECT_EQ(classify(err), Outcome::refused) << rd_kafka_err2name(err);
}

TEST_F(KafkaSink, UrlErrorsNameTheBadPart) {
  auto message = [](const std::string& url) {
    try {
      open_kafka_sink(url);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("kafka://127.0.0.1:9092/t?linger.mss=5").find("linger.mss"), std::string::npos);
  EXPECT_NE(message("kafka://127.0.0.1:9092/t?lingerms=5").find("lingerms"), std::string::npos);
  EXPECT_NE(message("kafka://127.0.0.1:9092/").find("topic"), std::string::npos);
  EXPECT_NE(message("kafka://127.0.0.1:9092/t?enable.idempotence=false").find("enable.idempotence"),
            std::string::npos);
  EXPECT_NE(message("kafka://127.0.0.1:9092/t?timeout_ms=0").find("timeout_ms"), std::string::npos);
  // librdkafka properties pass through.
  EXPECT_NO_THROW(open_kafka_sink("kafka://127.0.0.1:9092/t?linger.ms=5&compression.type=lz4"));
}

}  // namespace
}  // namespace outpost::testing
