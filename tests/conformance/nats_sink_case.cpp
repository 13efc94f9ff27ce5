// Registers the NATS JetStream sink with the sink conformance suite (a fresh stream per test on
// OUTPOST_TEST_NATS_URL's server, read back with a pull consumer), plus the JetStream-specific
// checks: Nats-Msg-Id dedup, headers, stream creation, the duplicate-window warning, URL errors.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../integration/broker_consumers.h"
#include "core/cloudevents.h"
#include "outpost/error.h"
#include "outpost/sinks/nats.h"
#include "server_process.h"
#include "sink_cases.h"
#include "sinks/nats/nats_classify.h"
#include "store_cases.h"  // require_all_endpoints(), temp_dir()

namespace outpost::testing {
namespace {

using brokers::env_text;
using brokers::find_header;
using brokers::Received;
using brokers::unique_name;
using namespace brokers;

std::string nats_url() {
  return env_text("OUTPOST_TEST_NATS_URL");
}

// Stream names may not contain '.', '*', '>' or spaces.
std::string stream_name() {
  std::string s = unique_name("CONF");
  for (auto& c : s)
    if (c == '-') c = '_';
  return s;
}

// A nats-server with JetStream of the test's own, to stop while a sink is connected to it (the
// sink connects when it is opened, so "nothing listening" cannot even be opened).
class PrivateNats {
 public:
  PrivateNats()
      : port_(free_port()),
        dir_(temp_dir() + "/" + unique_name("nats")),
        server_({"nats-server", "-a", "127.0.0.1", "-p", std::to_string(port_), "-js", "-sd", dir_},
                dir_ + ".log") {
    if (!wait_for_port(port_, std::chrono::seconds(10)))
      throw std::runtime_error("private nats-server did not start on port " +
                               std::to_string(port_));
  }
  ~PrivateNats() {
    server_.stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    std::filesystem::remove(dir_ + ".log", ec);
  }
  PrivateNats(const PrivateNats&) = delete;
  PrivateNats& operator=(const PrivateNats&) = delete;
  std::string url() const { return "nats://127.0.0.1:" + std::to_string(port_); }
  void stop() { server_.stop(); }
  void start() {
    server_.start();
    wait_for_port(port_, std::chrono::seconds(10));
  }

 private:
  std::uint16_t port_;
  std::string dir_;
  ServerProcess server_;
};

const bool registered = register_sink_case({
    .name = "nats",
    .unavailable_reason =
        [] {
          return nats_url().empty()
                     ? std::string(
                           "OUTPOST_TEST_NATS_URL not set (scripts/test starts nats-server)")
                     : std::string();
        },
    .make =
        [] {
          SinkFixture f;
          const std::string stream = stream_name();
          const std::string subject = "conf." + stream;
          f.url = nats_url() + "/" + subject + "?stream=" + stream + "&create=1";
          f.sink = open_nats_sink(f.url);
          f.read_back = [stream, subject](std::size_t expected) {
            auto got = nats_read_all(nats_url(), stream, subject, expected);
            return std::vector<ReceivedEvent>(got.begin(), got.end());
          };
          f.cleanup = [stream] { nats_delete_stream(nats_url(), stream); };
          return f;
        },
    .make_down =
        [] {
          auto server = std::make_shared<PrivateNats>();
          SinkFixture f;
          f.url = server->url() + "/down.s?stream=DOWN&create=1&timeout_ms=1500&sync_always=1";
          f.sink = open_nats_sink(f.url);
          server->stop();  // the sink keeps reconnecting meanwhile
          f.cleanup = [server]() mutable { server.reset(); };
          return f;
        },
});

class NatsSink : public ::testing::Test {
 protected:
  void SetUp() override {
    if (nats_url().empty()) {
      if (require_all_endpoints()) FAIL() << "OUTPOST_TEST_NATS_URL not set";
      GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
    }
    stream_ = stream_name();
  }
  void TearDown() override {
    if (!stream_.empty() && !nats_url().empty()) nats_delete_stream(nats_url(), stream_);
  }
  std::string stream_;
};

StoredEvent make_event(int i, std::string type, std::string key) {
  StoredEvent e;
  e.id = EventId::generate();
  e.type = std::move(type);
  e.key = std::move(key);
  e.payload = R"({"i":)" + std::to_string(i) + "}";
  e.occurred_at = now();
  e.headers.emplace("causation_id", "cause-" + std::to_string(i));
  e.seq = i;
  e.attempts = 1;
  return e;
}

TEST_F(NatsSink, SameEventIdTwiceIsStoredOnceAndBothCallsReportDelivered) {
  const std::string prefix = "dedup." + stream_;
  auto sink = open_nats_sink(nats_url() + "/" + prefix + ".{type}?stream=" + stream_ + "&create=1");
  EXPECT_EQ(sink->name(), "nats");
  std::vector<StoredEvent> events = {make_event(1, "order.created", "o-1"),
                                     make_event(2, "order.paid", "o-1")};
  for (const auto& r : sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;
  for (const auto& r : sink->deliver(events))
    ASSERT_TRUE(r.ok()) << "duplicate PubAck: " << r.error;
  auto got = nats_read_all(nats_url(), stream_, prefix + ".>", 4);
  ASSERT_EQ(got.size(), 2u) << "the server must drop the second copy of each id";
  EXPECT_EQ(got[0].id, events[0].id.str());
  EXPECT_EQ(got[1].id, events[1].id.str());
  EXPECT_EQ(got[1].key, "o-1");
  EXPECT_EQ(got[1].type, "order.paid");
  ASSERT_TRUE(find_header(got[1], "ce-id"));
  EXPECT_EQ(*find_header(got[1], "ce-id"), events[1].id.str());
  ASSERT_TRUE(find_header(got[1], "ce-causationid"));
  EXPECT_EQ(*find_header(got[1], "ce-causationid"), "cause-2");
}

// The sink sets its headers straight from the event's fields: each CloudEvents header must
// carry exactly core::cloudevents_headers()' value (CR/LF turned into spaces, as NATS headers
// are line based), also for user headers that map to a reserved attribute and any occurred_at.
TEST_F(NatsSink, HeadersAreTheCloudEventsMapping) {
  const std::string prefix = "hdr." + stream_;
  auto sink = open_nats_sink(nats_url() + "/" + prefix + ".{type}?stream=" + stream_ + "&create=1");
  std::vector<StoredEvent> events;
  const std::int64_t times_us[] = {1'700'000'000'000'007, 1'700'000'000'999'999, -1'500'001};
  for (int i = 0; i < 3; ++i) {
    StoredEvent e = make_event(i + 1, "hdr", i == 1 ? "" : "k");
    e.occurred_at = TimePoint{std::chrono::microseconds{times_us[i]}};
    events.push_back(std::move(e));
  }
  events[0].headers.emplace("Type", "must not replace ce-type");
  events[0].headers.emplace("multi_line", "a\r\nb");
  for (const auto& r : sink->deliver(events)) ASSERT_TRUE(r.ok()) << r.error;
  auto got = nats_read_all(nats_url(), stream_, prefix + ".>", events.size());
  ASSERT_EQ(got.size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    for (auto [name, value] : core::cloudevents_headers(events[i])) {
      for (auto& c : value)
        if (c == '\r' || c == '\n') c = ' ';
      const std::string* h = find_header(got[i], name);
      ASSERT_TRUE(h) << name;
      EXPECT_EQ(*h, value) << name;
    }
  }
}

TEST_F(NatsSink, MissingStreamWithoutCreateIsNotFound) {
  try {
    open_nats_sink(nats_url() + "/x." + stream_ + "?stream=" + stream_);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
    EXPECT_NE(std::string(e.what()).find(stream_), std::string::npos) << e.what();
  }
}

// The horizon is lease + the longest probe wait (kMaxProbeWait, 30 s, + a tenth of jitter), not
// lease + backoff max:
// with the default backoff max of an hour only a refused publish waits that long, and it was not
// stored (docs/sinks.md, "Duplicate window warning").
TEST_F(NatsSink, WarnsWhenTheDuplicateWindowIsShorterThanLeasePlusTheLongestProbeWait) {
  SinkOptions options;
  options.lease = Duration{30'000};
  options.backoff_max = Duration{3'600'000};
  ::testing::internal::CaptureStderr();
  auto sink = open_nats_sink(
      nats_url() + "/w." + stream_ + "?stream=" + stream_ + "&create=1&duplicate_window_ms=5000",
      options);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("duplicate window of 5000 ms"), std::string::npos) << err;
  EXPECT_NE(err.find("(63000 ms)"), std::string::npos) << err;  // + a tenth of jitter

  // A window that covers lease + backoff: no warning.
  ::testing::internal::CaptureStderr();
  auto again = open_nats_sink(nats_url() + "/w." + stream_ + "?stream=" + stream_ +
                                  "&lease_ms=1000&backoff_max_ms=1000&sync_always=1",
                              options);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("warning"), std::string::npos) << err;
}

// JetStream acks before fsync unless the server runs with sync_interval: always (issue 10
// item 15): the sink says so at start unless the URL confirms the server setting.
TEST_F(NatsSink, WarnsThatAPubAckIsNotDurableUnlessTheUrlSaysSyncAlways) {
  ::testing::internal::CaptureStderr();
  auto sink = open_nats_sink(nats_url() + "/d." + stream_ + "?stream=" + stream_ + "&create=1");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("PubAck does not mean the event is on disk"), std::string::npos) << err;
  EXPECT_NE(err.find("sync_interval: always"), std::string::npos) << err;
  EXPECT_NE(err.find("sync_always=1"), std::string::npos) << err;

  ::testing::internal::CaptureStderr();
  auto again =
      open_nats_sink(nats_url() + "/d." + stream_ + "?stream=" + stream_ + "&sync_always=1");
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("on disk"), std::string::npos) << err;
}

// No responders: nobody answers on the subject. JetStream disabled or restarting looks the same
// as a subject no stream captures (e.g. the stream was deleted under the relay), so both are
// unavailable: the backlog waits for the stream instead of being dead-lettered (docs/sinks.md).
TEST_F(NatsSink, SubjectNoStreamCapturesIsUnavailable) {
  auto sink = open_nats_sink(nats_url() + "/a." + stream_ + "?stream=" + stream_ +
                             "&create=1&timeout_ms=1500");
  auto other = open_nats_sink(nats_url() + "/elsewhere." + stream_ + "?stream=" + stream_ +
                              "&timeout_ms=1500");
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "k")};
  auto results = other->deliver(events);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable) << results[0].error;
  EXPECT_EQ(results[0].error.rfind("unavailable: nats: ", 0), 0u) << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped);

  nats_delete_stream(nats_url(), stream_);  // the stream deleted under a running sink
  results = sink->deliver(events);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable) << results[0].error;
}

// Issue 17: a server that stops is an outage; the sink reconnects and delivers once it is back.
TEST_F(NatsSink, AStoppedServerIsUnavailableUntilItIsBack) {
  PrivateNats server;
  auto sink = open_nats_sink(server.url() + "/s." + stream_ + "?stream=" + stream_ +
                             "&create=1&timeout_ms=1500&sync_always=1");
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "")};
  auto results = sink->deliver(events);
  ASSERT_TRUE(results[0].ok() && results[1].ok()) << results[0].error << results[1].error;

  server.stop();
  results = sink->deliver(events);
  for (const auto& r : results) {
    EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
    EXPECT_EQ(r.error.rfind("unavailable: nats", 0), 0u) << r.error;
  }
  server.start();  // file storage: the stream is still there
  bool delivered = false;
  std::string last;
  for (int i = 0; i < 100 && !delivered; ++i) {  // reconnects every 250 ms: bounded wait
    results = sink->deliver(events);
    delivered = results[0].ok() && results[1].ok();
    if (!delivered) {
      last = results[0].error;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  EXPECT_TRUE(delivered) << "not delivered after the server returned: " << last;
}

// The server's answer decides the class: a full stream (max_msgs with discard new) is
// unavailable, a message over the server's max_payload refused.
TEST_F(NatsSink, TheServersAnswerDecidesTheClass) {
  {
    natsConnection* raw = nullptr;
    ASSERT_EQ(natsConnection_ConnectTo(&raw, nats_url().c_str()), NATS_OK);
    std::unique_ptr<natsConnection, NatsConnDeleter> nc(raw);
    jsCtx* rawjs = nullptr;
    ASSERT_EQ(natsConnection_JetStream(&rawjs, nc.get(), nullptr), NATS_OK);
    std::unique_ptr<jsCtx, JsDeleter> js(rawjs);
    const std::string subject = "full." + stream_;
    const char* subjects[] = {subject.c_str()};
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = stream_.c_str();
    cfg.Subjects = subjects;
    cfg.SubjectsLen = 1;
    cfg.Storage = js_MemoryStorage;
    cfg.MaxMsgs = 1;
    cfg.Discard = js_DiscardNew;
    jsStreamInfo* si = nullptr;
    ASSERT_EQ(js_AddStream(&si, js.get(), &cfg, nullptr, nullptr), NATS_OK);
    jsStreamInfo_Destroy(si);
  }
  auto sink = open_nats_sink(nats_url() + "/full." + stream_ + "?stream=" + stream_ +
                             "&timeout_ms=1500&sync_always=1");
  std::vector<StoredEvent> first = {make_event(1, "a", "k")};
  ASSERT_TRUE(sink->deliver(first)[0].ok());
  std::vector<StoredEvent> second = {make_event(2, "a", "k")};
  auto r = sink->deliver(second)[0];
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << r.error;
  EXPECT_NE(r.error.find("maximum messages"), std::string::npos) << r.error;

  std::vector<StoredEvent> big = {make_event(3, "a", "")};
  big[0].payload = std::string(2 * 1024 * 1024, 'x');  // above the server's max_payload (1 MB)
  r = sink->deliver(big)[0];
  EXPECT_EQ(r.status, DeliveryResult::Status::failed) << r.error;
  EXPECT_EQ(r.error.rfind("refused: ", 0), 0u) << r.error;
}

TEST(NatsClassify, StatusesAndJetStreamCodes) {
  using nats::classify;
  using nats::Outcome;
  for (natsStatus s :
       {NATS_NO_RESPONDERS, NATS_TIMEOUT, NATS_CONNECTION_CLOSED, NATS_CONNECTION_DISCONNECTED,
        NATS_NO_SERVER, NATS_STALE_CONNECTION, NATS_IO_ERROR, NATS_INSUFFICIENT_BUFFER})
    EXPECT_EQ(classify(s, 0), Outcome::unavailable) << natsStatus_GetText(s);
  for (natsStatus s : {NATS_MAX_PAYLOAD, NATS_INVALID_SUBJECT, NATS_ERR})
    EXPECT_EQ(classify(s, 0), Outcome::refused) << natsStatus_GetText(s);
  for (int code : {JSNotEnabledErr, JSNotEnabledForAccountErr, JSClusterNotAvailErr,
                   JSStorageResourcesExceededErr, JSStreamStoreFailedErr})
    EXPECT_EQ(classify(NATS_ERR, code), Outcome::unavailable) << code;
  for (int code :
       {JSStreamMessageExceedsMaximumErr, JSStreamNotMatchErr, JSStreamWrongLastSequenceErr})
    EXPECT_EQ(classify(NATS_ERR, code), Outcome::refused) << code;
}

TEST_F(NatsSink, UrlErrorsNameTheBadPart) {
  auto message = [](const std::string& url) {
    try {
      open_nats_sink(url);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("nats://127.0.0.1:4222/s").find("stream"), std::string::npos);
  EXPECT_NE(message("nats://127.0.0.1:4222/s?stream=S&creat=1").find("creat"), std::string::npos);
  EXPECT_NE(message("nats://127.0.0.1:4222/?stream=S").find("subject"), std::string::npos);
  EXPECT_NE(message("nats://127.0.0.1:4222/s?stream=S&max_pending=0").find("max_pending"),
            std::string::npos);
}

}  // namespace
}  // namespace outpost::testing
