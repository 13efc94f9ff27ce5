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
          const std::string base = "kafka://" + env_text("OUTPOST_TEST_KAFKA_BOOTSTRAP") + "/" +
                                   brokers::unique_name("srcconf");
          return SourceFixture{
              .sink = open_kafka_sink(base),
              .url = base + "?group=" + brokers::unique_name("g") + "&assign=manual",
              .cleanup = [] {},
          };
        },
});

}  // namespace
}  // namespace outpost::testing
