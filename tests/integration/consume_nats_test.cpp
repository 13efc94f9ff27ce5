// The NATS JetStream source against a real nats-server -js (OUTPOST_TEST_NATS_URL): events the
// NATS sink published come back exactly (ids, types, keys, payload bytes and kind, headers), the
// checkpoint is the stream sequence, a restarted consumer reads on from it without a gap or a
// second effect, lag counts what is left, and the sink's `{type}` subject template reads as the
// subjects it renders to.

#include <gtest/gtest.h>

#include <map>

#include "outpost/consumer.h"
#include "outpost/error.h"
#include "outpost/json.h"
#include "outpost/sinks/nats.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

std::vector<StoredEvent> events(int n, int from) {
  std::vector<StoredEvent> out;
  for (int i = 0; i < n; ++i) {
    StoredEvent e;
    static_cast<Event&>(e) = Event::make(i % 2 ? "ride.created" : "ride.ended",
                                         "{\"n\":" + std::to_string(from + i) + "}",
                                         i % 3 ? "k" + std::to_string(i % 5) : "");
    e.headers["trace"] = "x" + std::to_string(i);
    if (i == 4) {  // a text payload keeps its kind
      e.payload = "plain text " + std::to_string(from);
      e.headers[std::string(header::kContentType)] = "text/plain";
    }
    out.push_back(e);
  }
  return out;
}

class NatsStream : public ::testing::Test {
 protected:
  void SetUp() override {
    auto nats = testing::env("OUTPOST_TEST_NATS_URL");  // nats://127.0.0.1:PORT
    if (!nats) {
      if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_NATS_URL not set";
      GTEST_SKIP() << "OUTPOST_TEST_NATS_URL not set";
    }
    stream_ = testing::unique_name("CN");
    url_ = *nats + "/" + stream_ + ".{type}?stream=" + stream_ + "&create=1";
  }
  std::string stream_, url_;
};

TEST_F(NatsStream, ReadsWhatTheSinkPublishedExactlyAndResumesAtTheStreamSequence) {
  auto sink = open_nats_sink(url_);
  std::vector<StoredEvent> sent = events(30, 0);
  for (auto& r : sink->deliver(sent)) ASSERT_TRUE(r.ok()) << r.error;

  std::string name = testing::unique_name("cn");
  auto store = open_checkpoint_store("sqlite:" + testing::temp_dir() + "/" + name + ".db");
  auto source = open_source(url_);  // the sink's parameters are accepted (one URL for both)
  std::map<std::string, int> seen;  // event id -> effects
  std::vector<Event> got;
  ConsumerOptions o;
  o.group = "totals";
  o.batch_size = 20;
  o.poll = 200ms;
  o.until_idle = 500ms;
  ConsumerHandler record = [&](ConsumerBatch& b) {
    for (const auto& m : b.messages()) {
      ++seen[m.event.id.str()];
      got.push_back(m.event);
    }
  };
  {
    Consumer c(*source, *store, o);
    std::size_t n = 0;
    for (int i = 0; i < 50 && n == 0; ++i) n = c.run_once(record);
    ASSERT_EQ(n, 20u);
  }
  EXPECT_EQ(store->group("totals")->position, "20") << "the stream sequence of the 20th message";
  EXPECT_EQ(source->lag("20"), 10);
  EXPECT_EQ(source->lag(""), 30);

  auto more = events(25, 100);
  for (auto& r : sink->deliver(more)) ASSERT_TRUE(r.ok()) << r.error;
  sent.insert(sent.end(), more.begin(), more.end());
  {
    auto again = open_source(url_);  // a restart: a new pull consumer at sequence 21
    Consumer c(*again, *store, o);
    c.run(record);
  }
  ASSERT_EQ(got.size(), sent.size());
  for (std::size_t i = 0; i < sent.size(); ++i) {
    EXPECT_EQ(got[i].id, sent[i].id) << i;
    EXPECT_EQ(got[i].type, sent[i].type) << i;
    EXPECT_EQ(got[i].key, sent[i].key) << i;
    EXPECT_EQ(got[i].payload, sent[i].payload) << i;
    EXPECT_EQ(got[i].headers, sent[i].headers) << i;
    EXPECT_EQ(got[i].payload_kind(), sent[i].payload_kind()) << i;
  }
  for (auto& [id, n] : seen) EXPECT_EQ(n, 1) << id;
  EXPECT_EQ(store->group("totals")->position, "55");
  EXPECT_EQ(source->lag("55"), 0);
}

TEST_F(NatsStream, AParkedMessageKeepsTheEventAsJson) {
  auto sink = open_nats_sink(url_);
  auto sent = events(3, 0);
  for (auto& r : sink->deliver(sent)) ASSERT_TRUE(r.ok()) << r.error;
  std::string name = testing::unique_name("cn");
  auto store = open_checkpoint_store("sqlite:" + testing::temp_dir() + "/" + name + ".db");
  auto source = open_source(url_);
  ConsumerOptions o;
  o.group = "parks";
  o.max_attempts = 1;
  o.poll = 200ms;
  o.until_idle = 500ms;
  Consumer c(*source, *store, o);
  c.run([&](ConsumerBatch& b) {
    for (std::size_t i = 0; i < b.size(); ++i)
      if (b[i].event.id == sent[1].id) b.fail(i, "refused");
  });
  auto dead = store->dead("parks", 10);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].position, "2");
  auto parked = event_from_json(dead[0].payload);
  EXPECT_EQ(parked.id, sent[1].id);
  EXPECT_EQ(parked.type, sent[1].type);
  EXPECT_EQ(parked.payload, sent[1].payload);
  EXPECT_EQ(parked.headers, sent[1].headers);
}

TEST_F(NatsStream, AStreamThatDoesNotExistYetIsWaitedFor) {
  auto url = url_.substr(0, url_.find("&create=1"));
  auto source = open_source(url);
  try {
    source->read(10, 10ms);
    FAIL() << "read from a missing stream";
  } catch (const Error& e) {
    EXPECT_TRUE(e.retryable()) << e.what();  // Consumer::run backs off and tries again
    EXPECT_NE(std::string(e.what()).find(stream_), std::string::npos) << e.what();
  }
}

TEST(NatsSource, BadUrlsNameThePart) {
  auto message = [](const std::string& url) {
    try {
      open_source(url);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message("nats://h:1/s").find("stream"), std::string::npos);
  EXPECT_NE(message("nats://h:1/?stream=S").find("subject"), std::string::npos);
  EXPECT_NE(message("nats://h:1/s?stream=S&bogus=1").find("bogus"), std::string::npos);
  EXPECT_EQ(message("nats://u:hunter2@h:1/s.{type}?stream=S&create=1&sync_always=1"), "accepted");
  EXPECT_EQ(message("nats://u:hunter2@h:1/s?stream=S&bogus=1").find("hunter2"), std::string::npos);
}

}  // namespace
}  // namespace outpost
