// The sink conformance suite: the same delivery behaviour checked against every registered sink
// (tests/support/sink_cases.h). Each case reads back from the real destination, so these tests
// prove what a consumer sees: every id exactly once, type/key/payload/headers intact and per-key
// order as delivered.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "outpost/error.h"
#include "outpost/event.h"
#include "outpost/key_seq.h"
#include "outpost/sink.h"
#include "sink_cases.h"
#include "store_cases.h"  // require_all_endpoints()

namespace outpost::testing {
namespace {

class SinkConformance : public ::testing::TestWithParam<SinkCase> {
 protected:
  void SetUp() override {
    std::string why = GetParam().unavailable_reason();
    if (!why.empty()) {
      if (require_all_endpoints())
        FAIL() << "sink case " << GetParam().name << " unavailable: " << why;
      GTEST_SKIP() << why;
    }
    fixture_ = GetParam().make();
    ASSERT_TRUE(fixture_.sink) << "the case made no sink";
  }
  void TearDown() override {
    if (fixture_.sink) fixture_.sink->close();
    fixture_.sink.reset();
    if (fixture_.cleanup) fixture_.cleanup();
  }

  // Delivers `events` in batches of `batch` and expects every result delivered.
  void deliver_all(const std::vector<StoredEvent>& events, std::size_t batch) {
    for (std::size_t at = 0; at < events.size(); at += batch) {
      std::size_t n = std::min(batch, events.size() - at);
      std::span<const StoredEvent> span(events.data() + at, n);
      auto results = fixture_.sink->deliver(span);
      ASSERT_EQ(results.size(), n) << "one result per event";
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_TRUE(results[i].ok()) << "event " << at + i << " (" << span[i].id.str()
                                     << ") not delivered: " << results[i].error;
    }
  }

  SinkFixture fixture_;
};

// Events across several keys, some with an empty key, some with headers, one plain-text payload
// and one large payload. seq is the emit order.
std::vector<StoredEvent> make_events(std::size_t n) {
  std::vector<StoredEvent> out;
  for (std::size_t i = 0; i < n; ++i) {
    StoredEvent e;
    e.id = EventId::generate();
    e.type = i % 3 == 0 ? "order.created" : "order.updated";
    e.key = i % 7 == 6 ? "" : "order-" + std::to_string(i % 4);
    e.payload = R"({"n":)" + std::to_string(i) + R"(,"note":"payload )" + std::to_string(i) + "\"}";
    if (i == 5) e.payload = "plain text, not JSON";
    if (i == 11) e.payload = R"({"blob":")" + std::string(16 * 1024, 'x') + "\"}";
    e.occurred_at = now();
    if (i % 2 == 0) {
      e.headers.emplace("correlation_id", "corr-" + std::to_string(i));
      e.headers.emplace("tenant", "acme");
    }
    e.seq = static_cast<std::int64_t>(i + 1);
    e.attempts = 1;
    out.push_back(std::move(e));
  }
  return out;
}

// Payloads are compared as JSON values when both sides are JSON (a sink may re-encode JSON,
// e.g. the file sink embeds it as a value), else byte for byte.
bool same_payload(const std::string& sent, const std::string& received) {
  if (sent == received) return true;
  auto a = nlohmann::json::parse(sent, nullptr, false);
  auto b = nlohmann::json::parse(received, nullptr, false);
  return !a.is_discarded() && !b.is_discarded() && a == b;
}

std::string reduce(std::string_view name) {
  std::string out;
  for (char c : name)
    if (std::isalnum(static_cast<unsigned char>(c)))
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A header travels under some transport name (correlation_id, ce-correlationid, ...): match on
// the name reduced to [a-z0-9] and the exact value.
bool has_header(const ReceivedEvent& r, const std::string& name, const std::string& value) {
  std::string want = reduce(name);
  for (const auto& [k, v] : r.headers) {
    std::string got = reduce(k);
    if (v == value && got.size() >= want.size() && got.ends_with(want)) return true;
  }
  return false;
}

// Issue 20 item 2: the W3C trace context reaches every destination under the name tracing
// libraries read (HTTP/Kafka/NATS header `traceparent`, a Redis Streams field, the file line's
// headers), unchanged; `tracestate` too (its spaces kept, not percent-encoded).
TEST_P(SinkConformance, DeliversTheTraceContextUnderItsStandardName) {
  auto events = make_events(6);
  const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const std::string state = "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE";
  for (std::size_t i = 0; i < events.size(); i += 2) {
    events[i].headers[std::string(header::kTraceparent)] = parent;
    if (i == 2) events[i].headers[std::string(header::kTracestate)] = state;
  }
  deliver_all(events, events.size());
  auto received = fixture_.read_back(events.size());
  ASSERT_EQ(received.size(), events.size());
  // Exactly the standard name (any case, as HTTP header names are), not ce-traceparent nor a
  // member of a headers object.
  auto standard = [](const ReceivedEvent& r, std::string_view name) -> const std::string* {
    for (const auto& [k, v] : r.headers)
      if (k.size() == name.size() &&
          std::equal(k.begin(), k.end(), name.begin(),
                     [](char a, char b) { return std::tolower(a) == b; }))
        return &v;
    return nullptr;
  };
  for (const auto& r : received) {
    const StoredEvent* sent = nullptr;
    for (const auto& e : events)
      if (e.id.str() == r.id) sent = &e;
    ASSERT_NE(sent, nullptr) << r.id;
    const auto want_parent = sent->headers.find(header::kTraceparent);
    const auto want_state = sent->headers.find(header::kTracestate);
    const std::string* got_parent = standard(r, header::kTraceparent);
    const std::string* got_state = standard(r, header::kTracestate);
    if (want_parent == sent->headers.end()) {
      EXPECT_EQ(got_parent, nullptr) << r.id << ": a traceparent out of nowhere";
      continue;
    }
    ASSERT_NE(got_parent, nullptr) << r.id << ": no 'traceparent' header or field";
    EXPECT_EQ(*got_parent, parent) << r.id;
    if (want_state != sent->headers.end()) {
      ASSERT_NE(got_state, nullptr) << r.id << ": no 'tracestate' header or field";
      EXPECT_EQ(*got_state, state) << r.id;
    } else {
      EXPECT_EQ(got_state, nullptr) << r.id;
    }
  }
}

// Issue 20 item 5: every event of a non-empty key arrives with its key position, the store's
// seq (outpost/key_seq.h, kKeySeqHeader): header `outpost-key-seq` on HTTP, Kafka and NATS, field
// (Redis Streams) or JSON member (file) `key_seq`; a consumer compares it with the last one it
// saw of the key to detect an inversion. Events without a key carry none. The seqs here are not
// contiguous, as a store's are not per key.
TEST_P(SinkConformance, EventsOfAKeyCarryTheirKeyPosition) {
  auto events = make_events(14);
  for (std::size_t i = 0; i < events.size(); ++i)
    events[i].seq = static_cast<std::int64_t>(1000 * i + 7 * (i % 3) + 1);
  deliver_all(events, 7);
  auto received = fixture_.read_back(events.size());
  ASSERT_EQ(received.size(), events.size());
  for (const auto& r : received) {
    const StoredEvent* sent = nullptr;
    for (const auto& e : events)
      if (e.id.str() == r.id) sent = &e;
    ASSERT_NE(sent, nullptr) << r.id;
    std::vector<std::string> positions;
    for (const auto& [k, v] : r.headers) {
      std::string name;
      for (char c : k) name += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (name == kKeySeqHeader || name == kKeySeqField) positions.push_back(v);
    }
    if (sent->key.empty()) {
      EXPECT_TRUE(positions.empty()) << r.id << ": a key position for an event without a key";
      continue;
    }
    ASSERT_EQ(positions.size(), 1u)
        << r.id << " (key " << sent->key << "): no '" << kKeySeqHeader << "' header or '"
        << kKeySeqField << "' field, or more than one";
    EXPECT_EQ(positions[0], std::to_string(sent->seq)) << r.id;
  }
}

TEST_P(SinkConformance, DeliversEachEventOnceIntactInKeyOrder) {
  auto events = make_events(60);
  deliver_all(events, 20);
  auto received = fixture_.read_back(events.size());

  std::map<std::string, const StoredEvent*> by_id;
  for (const auto& e : events) by_id[e.id.str()] = &e;
  std::map<std::string, int> seen;
  std::map<std::string, std::vector<std::string>> order_by_key;
  for (const auto& r : received) {
    ++seen[r.id];
    auto it = by_id.find(r.id);
    ASSERT_NE(it, by_id.end()) << "received an id that was never sent: " << r.id;
    const StoredEvent& e = *it->second;
    EXPECT_EQ(r.type, e.type) << r.id;
    EXPECT_EQ(r.key, e.key) << r.id;
    EXPECT_TRUE(same_payload(e.payload, r.payload))
        << r.id << ": sent " << e.payload.substr(0, 80) << " received " << r.payload.substr(0, 80);
    for (const auto& [k, v] : e.headers)
      EXPECT_TRUE(has_header(r, k, v)) << r.id << ": header " << k << "=" << v << " missing";
    if (!e.key.empty()) order_by_key[e.key].push_back(r.id);
  }
  for (const auto& e : events)
    EXPECT_EQ(seen[e.id.str()], 1) << "event " << e.id.str() << " seq " << e.seq;
  EXPECT_EQ(received.size(), events.size());

  std::map<std::string, std::vector<std::string>> sent_by_key;
  for (const auto& e : events)
    if (!e.key.empty()) sent_by_key[e.key].push_back(e.id.str());
  for (const auto& [key, ids] : sent_by_key)
    EXPECT_EQ(order_by_key[key], ids) << "per-key order broken for key " << key;
}

TEST_P(SinkConformance, EmptyBatchDeliversNothing) {
  auto results = fixture_.sink->deliver({});
  EXPECT_TRUE(results.empty());
  EXPECT_FALSE(fixture_.sink->name().empty());
}

TEST_P(SinkConformance, RedeliveryDuplicatesOrDedupesButLosesNothing) {
  // The relay redelivers after a lost ack (guarantee 4): a sink may store the duplicate or
  // recognise the id (JetStream Nats-Msg-Id); it must never lose or multiply events.
  auto events = make_events(12);
  deliver_all(events, 12);
  deliver_all(events, 12);
  auto received = fixture_.read_back(2 * events.size());
  std::map<std::string, int> seen;
  for (const auto& r : received) ++seen[r.id];
  for (const auto& e : events) {
    EXPECT_GE(seen[e.id.str()], 1) << e.id.str() << " lost";
    EXPECT_LE(seen[e.id.str()], 2) << e.id.str() << " delivered more often than sent";
  }
  EXPECT_EQ(seen.size(), events.size());
}

TEST_P(SinkConformance, SingleEventBatchesKeepOrder) {
  auto events = make_events(8);
  for (auto& e : events) e.key = "one-key";
  deliver_all(events, 1);
  auto received = fixture_.read_back(events.size());
  ASSERT_EQ(received.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(received[i].id, events[i].id.str());
}

// What goes in comes out (docs/cli.md, "The JSON encoding"): a text payload that looks like JSON
// stays that text, a binary payload (NUL, 0xFF, invalid UTF-8) arrives byte for byte, and each
// carries its content type (CloudEvents datacontenttype: content-type on brokers and HTTP, the
// content_type header in the JSON encoding).
TEST_P(SinkConformance, PayloadKindsArriveAsTheyWentIn) {
  auto events = make_events(4);
  events[0].payload = R"({"n":1.10,"big":123456789012345678901234567890})";
  events[1].payload = "123";
  events[1].headers[std::string(header::kContentType)] = std::string(kTextContentType);
  events[2].payload = std::string("\x00\xFF\xC3(bin\n\r\x7F", 10);
  events[2].headers[std::string(header::kContentType)] = std::string(kBinaryContentType);
  events[3].payload = R"({"a":1})";
  events[3].headers[std::string(header::kContentType)] = "text/plain";
  deliver_all(events, 4);
  auto received = fixture_.read_back(events.size());
  ASSERT_EQ(received.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    auto r = std::find_if(received.begin(), received.end(),
                          [&](const ReceivedEvent& x) { return x.id == events[i].id.str(); });
    ASSERT_NE(r, received.end()) << "event " << i << " not received";
    if (i == 0)
      EXPECT_TRUE(same_payload(events[i].payload, r->payload)) << r->payload;
    else
      EXPECT_EQ(r->payload, events[i].payload) << "event " << i << " byte for byte";
    // JSON is the default: the JSON encoding says nothing for it.
    bool says_nothing = std::none_of(r->headers.begin(), r->headers.end(), [](const auto& h) {
      return reduce(h.first).ends_with("contenttype");
    });
    EXPECT_TRUE(has_header(*r, "content_type", std::string(events[i].content_type())) ||
                (i == 0 && says_nothing))
        << "event " << i << " without its content type " << events[i].content_type();
  }
}

// A destination that is down is an outage, not a refusal of each event (docs/sinks.md, "Failure
// classes"): the sink reports `unavailable`, so the relay pauses instead of spending attempts.
class SinkDown : public ::testing::TestWithParam<SinkCase> {
 protected:
  void SetUp() override {
    std::string why = GetParam().unavailable_reason();
    if (!why.empty()) {
      if (require_all_endpoints())
        FAIL() << "sink case " << GetParam().name << " unavailable: " << why;
      GTEST_SKIP() << why;
    }
    ASSERT_TRUE(GetParam().make_down)
        << "sink case " << GetParam().name << " says nothing about a destination that is down";
    fixture_ = GetParam().make_down();
    if (!fixture_.skip.empty()) GTEST_SKIP() << fixture_.skip;
    ASSERT_TRUE(fixture_.sink) << "the case made no sink";
  }
  void TearDown() override {
    if (fixture_.sink) fixture_.sink->close();
    fixture_.sink.reset();
    if (fixture_.cleanup) fixture_.cleanup();
  }

  SinkFixture fixture_;
};

TEST_P(SinkDown, ADestinationThatIsDownIsUnavailableNotRefused) {
  auto events = make_events(8);
  const std::vector<std::string> keys = {"a", "b", "a", "", "c", "b", "a", ""};
  for (std::size_t i = 0; i < events.size(); ++i) events[i].key = keys[i];
  const auto start = std::chrono::steady_clock::now();
  auto results = fixture_.sink->deliver(events);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(results.size(), events.size()) << "one result per event";
  std::set<std::string> keys_seen;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& r = results[i];
    const bool later_of_key = !keys[i].empty() && !keys_seen.insert(keys[i]).second;
    if (later_of_key) {
      EXPECT_TRUE(r.status == DeliveryResult::Status::unavailable ||
                  r.status == DeliveryResult::Status::skipped)
          << "event " << i << " (key " << keys[i] << "): " << static_cast<int>(r.status) << " "
          << r.error;
    } else {
      EXPECT_EQ(r.status, DeliveryResult::Status::unavailable)
          << "event " << i << " (first of key '" << keys[i] << "'): " << r.error;
    }
    if (r.status == DeliveryResult::Status::unavailable) {
      EXPECT_EQ(r.error.rfind("unavailable: ", 0), 0u) << "the text names the class: " << r.error;
    }
  }
  // The down cases use a 1-2 s timeout: the call waits for it about once, not once per event.
  EXPECT_LT(took, std::chrono::seconds(30));
}

std::string case_name(const ::testing::TestParamInfo<SinkCase>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Sinks, SinkConformance, ::testing::ValuesIn(sink_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SinkConformance);
INSTANTIATE_TEST_SUITE_P(Sinks, SinkDown, ::testing::ValuesIn(sink_cases()), case_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(SinkDown);

}  // namespace
}  // namespace outpost::testing
