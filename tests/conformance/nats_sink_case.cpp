// Registers the NATS JetStream sink with the sink conformance suite (a fresh stream per test on
// OUTPOST_TEST_NATS_URL's server, read back with a pull consumer), plus the JetStream-specific
// checks: Nats-Msg-Id dedup, headers, stream creation, the duplicate-window warning, URL errors.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../integration/broker_consumers.h"
#include "core/cloudevents.h"
#include "outpost/error.h"
#include "outpost/sinks/nats.h"
#include "sink_cases.h"
#include "store_cases.h"  // require_all_endpoints()

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
    .make_down = nullptr,  // not yet classified: skipped by SinkDown
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

TEST_F(NatsSink, WarnsWhenTheDuplicateWindowIsShorterThanLeasePlusBackoff) {
  SinkOptions options;
  options.lease = Duration{30'000};
  options.backoff_max = Duration{60'000};
  ::testing::internal::CaptureStderr();
  auto sink = open_nats_sink(
      nats_url() + "/w." + stream_ + "?stream=" + stream_ + "&create=1&duplicate_window_ms=5000",
      options);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("duplicate window of 5000 ms"), std::string::npos) << err;
  EXPECT_NE(err.find("90000 ms"), std::string::npos) << err;

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

TEST_F(NatsSink, SubjectNoStreamCapturesFailsWithTheServerText) {
  // The stream exists but does not capture this subject: no PubAck can come.
  auto sink = open_nats_sink(nats_url() + "/a." + stream_ + "?stream=" + stream_ +
                             "&create=1&timeout_ms=1500");
  auto other = open_nats_sink(nats_url() + "/elsewhere." + stream_ + "?stream=" + stream_ +
                              "&timeout_ms=1500");
  std::vector<StoredEvent> events = {make_event(1, "a", "k"), make_event(2, "a", "k")};
  auto results = other->deliver(events);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::failed);
  EXPECT_FALSE(results[0].error.empty());
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped);
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
