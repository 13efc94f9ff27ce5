#pragma once
// The registry behind the sink conformance suite (tests/conformance/sink_conformance_test.cpp).
// Each sink registers one SinkCase in tests/conformance/<sink>_sink_case.cpp. The suite delivers
// events through the sink, then reads them back from the real destination (the file, an HTTP
// server run by the case, a Kafka/Redis/NATS consumer) and checks ids, keys, payloads, headers
// and per-key order. Endpoints come from the environment as in store_cases.h.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "outpost/sink.h"

namespace outpost::testing {

// One message as the destination's consumer saw it.
struct ReceivedEvent {
  std::string id;  // event id (from the body, a header or the broker's message id)
  std::string type;
  std::string key;
  std::string payload;  // as the consumer received the body/payload
  std::vector<std::pair<std::string, std::string>> headers;  // transport headers, as received
};

struct SinkFixture {
  std::shared_ptr<Sink> sink;
  // Reads back everything delivered so far, in the destination's order (per partition/stream
  // order is what matters: per-key order is checked on this list). May wait briefly until
  // `expected` messages are visible or a timeout of a few seconds passes.
  std::function<std::vector<ReceivedEvent>(std::size_t expected)> read_back;
  std::string url;  // the sink URL for the CLI
  std::function<void()> cleanup;
  // From SinkCase::make_down only: non-empty when this machine cannot make the destination
  // unavailable (e.g. no permission to mount a tiny tmpfs); the test is skipped saying why.
  std::string skip;
};

struct SinkCase {
  std::string name;                                 // gtest-safe
  std::function<std::string()> unavailable_reason;  // empty when available
  std::function<SinkFixture()> make;                // fresh destination (unique topic/stream/file)
  // A sink whose destination is down or full (nothing listening, every broker down, a full
  // disk), with a short timeout (1-2 s): its deliveries must come back `unavailable`, never
  // `failed` (docs/sinks.md, "Failure classes"). read_back is not used.
  std::function<SinkFixture()> make_down;
};

bool register_sink_case(SinkCase sink_case);
const std::vector<SinkCase>& sink_cases();

}  // namespace outpost::testing
