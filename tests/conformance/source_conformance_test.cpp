// The Source conformance suite: what every log a consumer reads must do alike
// (include/outpost/consumer.h, docs/consumers.md "Sources"), run against every registered case
// (tests/support/source_cases.h; file, redis-stream, kafka, nats). Each case writes the log with
// outpost's own sink for it, so the suite also pins "one URL means the same to relay and
// consumer":
// - what the sink wrote comes back: id, type, key, payload and headers, each key in order;
// - a position is where reading goes on: a new source seeks just after it;
// - a read with nothing new returns nothing (waiting at most about its wait), and lag is 0 at the
//   end when the source can tell;
// - a consumer on it (SQLite checkpoint store) handles every event once across a crash before a
//   commit and a restart.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "case_available.h"
#include "outpost/consumer.h"
#include "outpost/error.h"
#include "source_cases.h"
#include "store_cases.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

constexpr int kEvents = 24;
constexpr int kKeys = 4;

class SourceConformance : public ::testing::TestWithParam<SourceCase> {
 protected:
  void SetUp() override {
    skip_unless_available(GetParam().name, GetParam().unavailable_reason());
    if (IsSkipped() || HasFatalFailure()) return;
    fixture_ = GetParam().make();
  }
  void TearDown() override {
    fixture_.sink.reset();
    if (fixture_.cleanup) fixture_.cleanup();
  }

  // Writes kEvents events over kKeys keys through the case's sink; returns them in log order.
  std::vector<StoredEvent> write() {
    std::vector<StoredEvent> events;
    for (int i = 0; i < kEvents; ++i) {
      StoredEvent e;
      static_cast<Event&>(e) = Event::make("source.conf", "{\"n\":" + std::to_string(i) + "}",
                                           "k" + std::to_string(i % kKeys));
      e.headers["tenant"] = "t" + std::to_string(i % 2);
      e.seq = i + 1;
      events.push_back(std::move(e));
    }
    for (auto& r : fixture_.sink->deliver(events)) EXPECT_TRUE(r.ok()) << r.error;
    return events;
  }

  // Reads from `source` until `n` messages came or 60 s passed.
  static std::vector<Message> read(Source& source, std::size_t n) {
    std::vector<Message> out;
    auto deadline = SteadyClock::now() + 60s;
    while (out.size() < n && SteadyClock::now() < deadline)
      for (auto& m : source.read(n - out.size(), 200ms)) out.push_back(std::move(m));
    return out;
  }

  // Per key, the payloads in the order they came.
  static std::map<std::string, std::vector<std::string>> by_key(const std::vector<Message>& msgs) {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& m : msgs) out[m.event.key].push_back(m.event.payload);
    return out;
  }
  static std::map<std::string, std::vector<std::string>> by_key(
      const std::vector<StoredEvent>& events) {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& e : events) out[e.key].push_back(e.payload);
    return out;
  }

  // A position of `scheme`'s log 1000 messages (or bytes, or milliseconds) after `end`.
  static std::string past(const std::string& scheme, const std::string& end) {
    auto plus = [](const std::string& n) { return std::to_string(std::stoll(n) + 1000); };
    if (scheme == "file") {  // OFFSET@IDENTITY
      auto at = end.find('@');
      return plus(end.substr(0, at)) + end.substr(at);
    }
    if (scheme == "redis-stream") return plus(end.substr(0, end.find('-'))) + "-0";  // MS-SEQ
    if (scheme == "kafka") {                                                         // P:O,P:O
      std::string out;
      for (std::size_t from = 0; from < end.size();) {
        auto comma = std::min(end.find(',', from), end.size());
        auto colon = end.find(':', from);
        out += (out.empty() ? "" : ",") + end.substr(from, colon + 1 - from) +
               plus(end.substr(colon + 1, comma - colon - 1));
        from = comma + 1;
      }
      return out;
    }
    return plus(end);  // nats: a stream sequence
  }

  SourceFixture fixture_;
};

TEST_P(SourceConformance, WhatTheSinkWroteComesBackWithItsFieldsEachKeyInOrder) {
  auto events = write();
  auto source = open_source(fixture_.url);
  EXPECT_EQ(source->name(), GetParam().scheme);
  EXPECT_TRUE(source->same_log(source->url())) << source->url();
  source->seek("");
  auto msgs = read(*source, events.size());
  ASSERT_EQ(msgs.size(), events.size());
  std::map<std::string, const StoredEvent*> sent;
  for (const auto& e : events) sent[e.id.str()] = &e;
  std::set<std::string> seen;
  for (const auto& m : msgs) {
    EXPECT_TRUE(m.parse_error.empty()) << m.parse_error;
    EXPECT_FALSE(m.position.empty());
    auto it = sent.find(m.event.id.str());
    ASSERT_NE(it, sent.end()) << "an id the sink did not write: " << m.event.id.str();
    EXPECT_TRUE(seen.insert(it->first).second) << "read twice: " << it->first;
    const StoredEvent& e = *it->second;
    EXPECT_EQ(m.event.type, e.type);
    EXPECT_EQ(m.event.key, e.key);
    EXPECT_EQ(m.event.payload, e.payload);
    auto tenant = m.event.headers.find("tenant");
    ASSERT_NE(tenant, m.event.headers.end()) << "header 'tenant' lost for " << it->first;
    EXPECT_EQ(tenant->second, e.headers.at("tenant"));
  }
  EXPECT_EQ(by_key(msgs), by_key(events));
}

// Issue 20 items 2 and 5: what a handler gets carries the key position (StoredEvent::seq, sent
// as outpost-key-seq / key_seq by every sink, docs/sinks.md "Key position") so it can detect an
// inversion, and the W3C trace context (headers traceparent, tracestate) so it can start a span.
// An event without a key has no position (seq 0).
TEST_P(SourceConformance, HandlersGetTheKeyPositionAndTheTraceContext) {
  std::vector<StoredEvent> events(3);
  static_cast<Event&>(events[0]) = Event::make("source.conf", R"({"n":1})", "acct-1");
  events[0].seq = 41;
  events[0].headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  events[0].headers["tracestate"] = "vendor=abc,other=1";
  static_cast<Event&>(events[1]) = Event::make("source.conf", R"({"n":2})", "acct-1");
  events[1].seq = 1234567890123;
  static_cast<Event&>(events[2]) = Event::make("source.conf", R"({"n":3})");  // no key
  events[2].seq = 77;
  for (auto& r : fixture_.sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;
  auto source = open_source(fixture_.url);
  source->seek("");
  auto msgs = read(*source, events.size());
  ASSERT_EQ(msgs.size(), events.size());
  std::map<std::string, const Message*> got;
  for (const auto& m : msgs) got[m.event.id.str()] = &m;
  ASSERT_TRUE(got.contains(events[0].id.str()) && got.contains(events[1].id.str()) &&
              got.contains(events[2].id.str()));
  const Message& first = *got[events[0].id.str()];
  EXPECT_EQ(first.event.seq, 41) << "the key position did not reach the handler";
  EXPECT_EQ(got[events[1].id.str()]->event.seq, 1234567890123);
  EXPECT_EQ(got[events[2].id.str()]->event.seq, 0) << "an event without a key has no position";
  auto header = [&](const char* name) {
    auto it = first.event.headers.find(name);
    return it == first.event.headers.end() ? std::string("(missing)") : it->second;
  };
  EXPECT_EQ(header("traceparent"), events[0].headers.at("traceparent"));
  EXPECT_EQ(header("tracestate"), events[0].headers.at("tracestate"));
  EXPECT_FALSE(got[events[1].id.str()]->event.headers.contains("traceparent"));
}

TEST_P(SourceConformance, ANewSourceSeeksJustAfterAPositionAndReadsOnFromThere) {
  auto events = write();
  auto first = open_source(fixture_.url);
  first->seek("");
  auto msgs = read(*first, events.size());
  ASSERT_EQ(msgs.size(), events.size());
  const std::size_t half = msgs.size() / 2;
  // Read so far, per key in order, is what a checkpoint at msgs[half - 1] covers.
  std::vector<Message> before(msgs.begin(), msgs.begin() + static_cast<std::ptrdiff_t>(half));
  auto second = open_source(fixture_.url);
  second->seek(msgs[half - 1].position);
  auto rest = read(*second, msgs.size() - half);
  ASSERT_EQ(rest.size(), msgs.size() - half);
  std::set<std::string> ids;
  for (const auto& m : before) ids.insert(m.event.id.str());
  for (const auto& m : rest)
    EXPECT_TRUE(ids.insert(m.event.id.str()).second) << "read again after its position";
  EXPECT_EQ(ids.size(), events.size());
  std::vector<Message> all = before;
  all.insert(all.end(), rest.begin(), rest.end());
  EXPECT_EQ(by_key(all), by_key(events));

  // At the end: nothing more, and lag 0 where the source can tell.
  auto third = open_source(fixture_.url);
  third->seek(rest.back().position);
  auto t0 = SteadyClock::now();
  EXPECT_TRUE(third->read(10, 300ms).empty());
  EXPECT_LT(SteadyClock::now() - t0, 30s) << "a read with nothing new waits about its wait";
  if (auto lag = third->lag(rest.back().position)) {
    EXPECT_EQ(*lag, 0);
  }
}

// A position past the log's end would make a group skip everything written until the log gets
// there, in silence: every source refuses it (ConfigError, exit 2 of `outpost consumers seek`)
// naming the position and the end as `--to end` resolves it (docs/consumers.md, "Moving and
// deleting a group"), and takes the end itself.
TEST_P(SourceConformance, APositionPastTheEndOfTheLogIsRefusedNamingTheEnd) {
  auto events = write();
  auto source = open_source(fixture_.url);
  source->seek("");
  ASSERT_EQ(read(*source, events.size()).size(), events.size());
  auto log = open_source(fixture_.url);
  auto target = [](SeekTarget::Kind kind, const std::string& position) {
    SeekTarget t;
    t.kind = kind;
    t.position = position;
    return t;
  };
  const std::string end = log->position_for(target(SeekTarget::Kind::end, ""));
  ASSERT_FALSE(end.empty());
  EXPECT_EQ(log->position_for(target(SeekTarget::Kind::position, end)), end);
  const std::string beyond = past(GetParam().scheme, end);
  try {
    auto to = log->position_for(target(SeekTarget::Kind::position, beyond));
    ADD_FAILURE() << "position " << beyond << " past the end " << end << " was taken as " << to;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'" + beyond + "'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(end), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
}

// Operator finding A3: a group is bound to its log, not to the URL's text. Another address of
// the server (a moved broker, another bootstrap list), tuning parameters, the sink's own
// parameters (one URL serves relay and consumer) and a password (stored redacted) name the same
// log; another stream, topic, subject or database does not (docs/consumers.md, "Sources").
TEST_P(SourceConformance, AGroupIsBoundToItsLogNotToTheTextOfItsURL) {
  auto source = open_source(fixture_.url);
  ASSERT_FALSE(fixture_.same_log.empty());
  for (const auto& other : fixture_.same_log) {
    auto spelled = open_source(other);
    EXPECT_TRUE(source->same_log(spelled->url())) << fixture_.url << " vs " << other;
    EXPECT_TRUE(spelled->same_log(source->url())) << other << " vs " << fixture_.url;
    EXPECT_EQ(spelled->url().find("secret"), std::string::npos) << spelled->url();
  }
  for (const auto& other : fixture_.other_logs) {
    auto elsewhere = open_source(other);
    EXPECT_FALSE(source->same_log(elsewhere->url())) << fixture_.url << " vs " << other;
    EXPECT_FALSE(elsewhere->same_log(source->url())) << other << " vs " << fixture_.url;
  }
  // A group bound by a consumer on one URL reads on with another spelling of its log (the last
  // one a case lists: one this test can connect with).
  auto events = write();
  const std::string db = temp_dir() + "/" + unique_name("srcconf") + ".db";
  auto store = open_checkpoint_store("sqlite:" + db);
  ConsumerOptions o;
  o.group = "bound";
  o.poll = 100ms;
  o.until_idle = 2s;
  std::size_t handled = 0;
  auto handler = [&](ConsumerBatch& b) { handled += b.messages().size(); };
  {
    Consumer first(*source, *store, o);
    first.run(handler);
  }
  EXPECT_EQ(handled, events.size());
  auto spelled = open_source(fixture_.same_log.back());
  Consumer second(*spelled, *store, o);
  EXPECT_NO_THROW(second.run(handler));
  EXPECT_EQ(handled, events.size()) << "read again";
  store.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
}

// Operator finding A2: a log deleted and re-created restarts its positions (a NATS stream at
// sequence 1, a Kafka topic at offset 0), so a group's checkpoint is past its end. Reading on
// would skip what the new log holds up to the checkpoint, in silence: the broker sources stop
// with an error (not retried) naming the group, the checkpoint, the log's end and the way out,
// and lag() is not a number (docs/consumers.md, "A log deleted and re-created"). Not on the file
// source (a checkpoint is bound to one file: see "Log rotation") nor on Redis Streams, whose
// entry ids are the server's clock, so a re-created stream's entries come after the checkpoint
// and are read.
TEST_P(SourceConformance, ACheckpointPastTheEndOfTheLogIsAnErrorNamingTheGroupAndTheWayOut) {
  const std::string scheme = GetParam().scheme;
  if (scheme == "file" || scheme == "redis-stream")
    GTEST_SKIP() << scheme << ": positions do not restart (see the comment above)";
  auto events = write();
  auto source = open_source(fixture_.url);
  source->seek("");
  auto msgs = read(*source, events.size());
  ASSERT_EQ(msgs.size(), events.size());
  const std::string end = msgs.back().position;
  const std::string beyond = past(scheme, end);
  // The numbers the position holds past the end: the sequence, each partition's offset.
  std::vector<std::string> numbers;
  for (std::size_t from = 0; from < beyond.size();) {
    auto comma = std::min(beyond.find(',', from), beyond.size());
    auto colon = beyond.find(':', from);
    auto start = colon < comma ? colon + 1 : from;
    numbers.push_back(beyond.substr(start, comma - start));
    from = comma + 1;
  }
  auto names_one = [&](const std::string& what) {
    return std::any_of(numbers.begin(), numbers.end(), [&](const std::string& n) {
      return what.find(" " + n + " ") != std::string::npos ||
             what.find(" " + n + ")") != std::string::npos;
    });
  };
  auto stopped = open_source(fixture_.url);
  stopped->set_group("grp1");
  stopped->seek(beyond);
  try {
    auto got = read(*stopped, 1);
    ADD_FAILURE() << "a checkpoint past the end (" << beyond << ", the end " << end
                  << ") was read on from: " << got.size() << " message(s)";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_FALSE(e.retryable()) << what;
    EXPECT_EQ(e.code(), ErrorCode::corrupt) << what;
    EXPECT_NE(what.find("group 'grp1'"), std::string::npos) << what;
    EXPECT_TRUE(names_one(what)) << beyond << ": " << what;
    EXPECT_NE(what.find("past the end"), std::string::npos) << what;
    EXPECT_NE(what.find("outpost consumers seek --group grp1 --to beginning"), std::string::npos)
        << what;
  }
  auto lister = open_source(fixture_.url);
  try {
    auto lag = lister->lag(beyond);
    EXPECT_FALSE(lag && *lag == 0) << "lag 0 for a checkpoint past the end";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
  // At the end itself the source reads on (nothing there) and lag is 0.
  auto at_end = open_source(fixture_.url);
  at_end->seek(end);
  EXPECT_TRUE(at_end->read(10, 300ms).empty());
  if (auto lag = at_end->lag(end)) {
    EXPECT_EQ(*lag, 0);
  }
}

TEST_P(SourceConformance, AConsumerHandlesEveryEventOnceAcrossACrashAndARestart) {
  auto events = write();
  const std::string db = temp_dir() + "/" + unique_name("srcconf") + ".db";
  auto store = open_checkpoint_store("sqlite:" + db);
  std::map<std::string, int> handled;  // committed effects only
  std::map<std::string, int> pending;
  ConsumerOptions o;
  o.group = "conf";
  o.batch_size = 5;
  o.poll = 100ms;
  o.until_idle = 3s;
  int commits = 0;
  o.before_commit = [&] {
    if (++commits == 3) throw std::runtime_error("crash before the third commit");
    for (auto& [id, n] : pending) handled[id] += n;
    pending.clear();
  };
  auto handler = [&](ConsumerBatch& b) {
    pending.clear();
    for (const auto& m : b.messages()) ++pending[m.event.id.str()];
  };
  {
    auto source = open_source(fixture_.url);
    Consumer crashing(*source, *store, o);
    EXPECT_THROW(crashing.run(handler), std::runtime_error);
  }
  o.before_commit = [&] {
    for (auto& [id, n] : pending) handled[id] += n;
    pending.clear();
  };
  auto source = open_source(fixture_.url);
  Consumer consumer(*source, *store, o);
  consumer.run(handler);
  EXPECT_EQ(handled.size(), events.size());
  for (const auto& [id, n] : handled) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(consumer.counters().parked, 0u);
  store.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
}

INSTANTIATE_TEST_SUITE_P(Sources, SourceConformance, ::testing::ValuesIn(source_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace outpost::testing
