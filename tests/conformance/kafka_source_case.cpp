// Registers Kafka with the Source conformance suite: a fresh topic per test on the mock cluster
// of OUTPOST_TEST_KAFKA_BOOTSTRAP, written by the Kafka sink and read by the kafka source with
// assign=manual (every partition, no group membership to wait for).

#include "../integration/broker_consumers.h"
#include "outpost/sinks/kafka.h"
#include "source_cases.h"

namespace outpost::testing {
namespace {

using namespace brokers;

const bool registered = register_source_case({
    .name = "kafka",
    .scheme = "kafka",
    .unavailable_reason =
        [] { return source_unavailable("kafka", "OUTPOST_TEST_KAFKA_BOOTSTRAP"); },
    .make =
        [] {
          const std::string bootstrap = env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP");
          const std::string topic = brokers::unique_name("srcconf");
          const std::string base = "kafka://" + bootstrap + "/" + topic;
          const std::string group = brokers::unique_name("g");
          const std::string first = bootstrap.substr(0, bootstrap.find(','));
          return SourceFixture{
              .sink = open_kafka_sink(base),
              .url = base + "?group=" + group + "&assign=manual",
              .cleanup = [] {},
              // One broker of the cluster, group membership, tuning and librdkafka properties.
              .same_log = {"kafka://" + first + "/" + topic + "?group=" + group + "&assign=manual",
                           base + "?group=" + group,
                           base + "?group=" + group + "&assign=manual&timeout_ms=5000" +
                               "&fetch.wait.max.ms=50"},
              .other_logs = {base + "x?group=" + group + "&assign=manual"},
          };
        },
});

}  // namespace
}  // namespace outpost::testing
