// Kafka sink end to end: the real relay moves events from a store into Kafka (librdkafka's mock
// cluster), and a plain consumer checks what arrived.
//  - 50,000 events over 200 keys: each once, per-key order kept (shared mock cluster).
//  - every broker of a private in-process mock cluster down for 10 s mid-run: no loss, per-key
//    order of first occurrences kept, duplicates bounded by one in-flight batch.

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <cstdio>
#include <memory>

#include "broker_consumers.h"
#include "broker_relay.h"
#include "outpost/sinks/kafka.h"
#include "outpost/stores/memory.h"
#include "store_cases.h"  // require_all_endpoints()

namespace outpost::testing {
namespace {

using namespace brokers;

std::string shared_bootstrap() {
  return env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP");
}

TEST(BrokerKafka, FiftyThousandEventsArriveOnceInKeyOrder) {
  if (shared_bootstrap().empty()) {
    if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
    GTEST_SKIP() << "OUTPOST_TEST_KAFKA_BOOTSTRAP not set";
  }
  const std::string topic = brokers::unique_name("relay50k");
  auto store = make_memory_store();
  auto events = keyed_events(50'000, 200);
  append_all(*store, events);
  auto sink = open_kafka_sink("kafka://" + shared_bootstrap() + "/" + topic);

  auto run = run_relay(*store, *sink, fast_relay_options(1000), std::chrono::seconds(60));
  ASSERT_TRUE(run.finished) << "relay did not empty the store in time";
  EXPECT_EQ(run.counters.delivered, events.size());
  EXPECT_EQ(run.counters.failed, 0u);
  std::printf("[kafka] relayed %zu events in %.2f s (%.0f events/s)\n", events.size(), run.seconds,
              events.size() / run.seconds);

  auto received =
      kafka_read_all(shared_bootstrap(), topic, events.size(), std::chrono::seconds(60));
  auto check = check_delivery(events, received);
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.duplicates, 0u);
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_EQ(check.unknown, 0u) << check.first_problem;
}

// A private 3-broker mock cluster in this process, so the test can take brokers down.
class PrivateCluster {
 public:
  PrivateCluster() {
    char err[256];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t*, int, const char*, const char*) {});
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) throw std::runtime_error(err);
    cluster_ = rd_kafka_mock_cluster_new(rk_, 3);
    if (!cluster_) throw std::runtime_error("rd_kafka_mock_cluster_new failed");
  }
  ~PrivateCluster() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(rk_);
  }
  std::string bootstrap() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void set_all(bool up) {
    for (int id = 1; id <= 3; ++id)
      up ? rd_kafka_mock_broker_set_up(cluster_, id) : rd_kafka_mock_broker_set_down(cluster_, id);
  }

 private:
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
};

TEST(BrokerKafka, ClusterDownForTenSecondsLosesNothing) {
  PrivateCluster cluster;
  const std::string topic = brokers::unique_name("outage");
  auto store = make_memory_store();
  auto events = keyed_events(15'000, 100);
  auto sink = open_kafka_sink("kafka://" + cluster.bootstrap() + "/" + topic + "?timeout_ms=2000");
  const std::size_t batch = 200;

  CountingSink counting(*sink);
  auto run = run_relay_through_outage(
      *store, counting, fast_relay_options(batch), events, 500, [&] { cluster.set_all(false); },
      [&] { cluster.set_all(true); });
  ASSERT_EQ(store->stats().pending + store->stats().leased, 0) << "relay did not drain";
  // Issue 17: an outage is unavailable, never an attempt of the events that waited it out.
  EXPECT_GT(counting.unavailable(), 0u) << "the outage was not noticed";
  EXPECT_EQ(counting.failed(), 0u) << counting.first_failure();
  EXPECT_EQ(run.counters.failed, 0u);
  EXPECT_EQ(run.counters.dead, 0u);

  auto received =
      kafka_read_all(cluster.bootstrap(), topic, events.size(), std::chrono::seconds(60));
  auto check = check_delivery(events, received);
  std::printf("[kafka] outage: %llu unavailable, %zu duplicates, %.1f s\n",
              static_cast<unsigned long long>(counting.unavailable()), check.duplicates,
              run.seconds);
  EXPECT_EQ(check.missing, 0u) << check.first_problem;
  EXPECT_EQ(check.order_breaks, 0u) << check.first_problem;
  EXPECT_EQ(check.unknown, 0u);
  // Only what was in flight when the brokers went away may arrive twice.
  EXPECT_LE(check.duplicates, 2 * batch);
}

}  // namespace
}  // namespace outpost::testing
