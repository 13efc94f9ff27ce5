// Registers the HTTP webhook sink with the sink conformance suite (an in-process cpp-httplib
// server records every request), plus the HTTP-specific tests: error status with body excerpt,
// timeout, CloudEvents headers, concurrency with per-key order, connection reuse, skipping a
// failed key's later events, redirects, URL parameters.

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/url.h"
#include "hanging_webhook.h"
#include "outpost/error.h"
#include "outpost/sinks/http.h"
#include "sink_cases.h"
#include "sinks/http/http_classify.h"

namespace outpost::testing {
namespace {

using namespace std::chrono_literals;

struct Recorded {
  std::map<std::string, std::string> headers;  // names lowercased
  std::multimap<std::string, std::string> params;
  std::string body;
  int remote_port = 0;

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A webhook receiver on 127.0.0.1 with a port chosen by the kernel. `behaviour` decides the
// response (default 200); every request is recorded in arrival order before it runs.
class HookServer {
 public:
  using Behaviour = std::function<void(const Recorded&, httplib::Response&)>;

  explicit HookServer(Behaviour behaviour = {}) : behaviour_(std::move(behaviour)) {
    server_.set_keep_alive_max_count(100000);
    server_.set_keep_alive_timeout(2);
    server_.Post(".*", [this](const httplib::Request& req, httplib::Response& res) {
      Recorded r;
      for (const auto& [k, v] : req.headers) r.headers[lower(k)] = v;
      for (const auto& [k, v] : req.params) r.params.emplace(k, v);
      r.body = req.body;
      r.remote_port = req.remote_port;
      {
        std::lock_guard lock(mu_);
        received_.push_back(r);
        ports_.insert(r.remote_port);
      }
      cv_.notify_all();
      res.status = 200;
      res.set_content("ok", "text/plain");
      if (behaviour_) behaviour_(r, res);
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) throw std::runtime_error("HookServer: bind failed");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs (httplib 0.11), so wait for it here.
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!server_.is_running() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
  }

  ~HookServer() {
    stop_waiting();
    server_.stop();
    thread_.join();
  }

  std::string url(const std::string& path_and_query = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path_and_query;
  }

  // Waits (bounded) until `n` requests arrived, then returns them all.
  std::vector<Recorded> wait_for(std::size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return received_.size() >= n; });
    return received_;
  }
  std::size_t connections() {
    std::lock_guard lock(mu_);
    return ports_.size();
  }

  // For slow behaviours: sleeps up to `d`, returning early when the server shuts down.
  void sleep(std::chrono::milliseconds d) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, d, [&] { return stopping_; });
  }

 private:
  void stop_waiting() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

  Behaviour behaviour_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Recorded> received_;  // guarded by mu_
  std::set<int> ports_;             // client ports seen = connections accepted; guarded by mu_
  bool stopping_ = false;           // guarded by mu_
};

ReceivedEvent to_received(const Recorded& r) {
  ReceivedEvent e;
  e.id = r.header("ce-id");
  e.type = r.header("ce-type");
  e.key = core::percent_decode(r.header("ce-partitionkey"));
  e.payload = r.body;
  for (const auto& [k, v] : r.headers) e.headers.emplace_back(k, core::percent_decode(v));
  return e;
}

const bool registered = register_sink_case({
    .name = "http",
    .unavailable_reason = [] { return std::string(); },
    .make =
        [] {
          auto server = std::make_shared<HookServer>();
          SinkFixture f;
          f.url = server->url("/events?concurrency=4&timeout_ms=5000");
          f.sink = open_http_sink(f.url);
          f.read_back = [server](std::size_t expected) {
            std::vector<ReceivedEvent> out;
            for (const auto& r : server->wait_for(expected)) out.push_back(to_received(r));
            return out;
          };
          f.cleanup = [] {};
          return f;
        },
    .make_down =
        [] {
          std::string url;
          {
            HookServer gone;  // a port that was just free and now has no listener
            url = gone.url("/events?concurrency=2&timeout_ms=2000");
          }
          SinkFixture f;
          f.url = url;
          f.sink = open_http_sink(url);
          return f;
        },
});

StoredEvent make_event(std::string key, int i = 0) {
  StoredEvent e;
  e.id = EventId::generate();
  e.type = "invoice.paid";
  e.key = std::move(key);
  e.payload = R"({"i":)" + std::to_string(i) + "}";
  e.occurred_at = now();
  e.seq = i;
  e.attempts = 1;
  return e;
}

TEST(HttpSink, ServerErrorFailsWithStatusAndBodyExcerpt) {
  HookServer server([](const Recorded&, httplib::Response& res) {
    res.status = 500;
    res.set_content("boom: database down" + std::string(1000, '!'), "text/plain");
  });
  auto sink = open_http_sink(server.url());
  std::vector<StoredEvent> batch = {make_event("a")};
  auto results = sink->deliver(batch);
  ASSERT_EQ(results.size(), 1u);
  // A 500 is this request failing in the webhook: refused, an attempt (docs/sinks_file_http.md).
  EXPECT_EQ(results[0].status, DeliveryResult::Status::failed);
  EXPECT_EQ(results[0].error.rfind("refused: HTTP 500: boom: database down", 0), 0u)
      << results[0].error;
  EXPECT_LT(results[0].error.size(), 300u) << "the body is cut to an excerpt";
}

TEST(HttpSink, SlowServerIsUnavailableNamingTheTimeout) {
  HookServer* self = nullptr;
  HookServer server([&self](const Recorded&, httplib::Response&) { self->sleep(3s); });
  self = &server;
  auto sink = open_http_sink(server.url("/hook?timeout_ms=200"));
  std::vector<StoredEvent> batch = {make_event("a")};
  auto start = std::chrono::steady_clock::now();
  auto results = sink->deliver(batch);
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[0].error.rfind("unavailable: timeout", 0), 0u) << results[0].error;
  EXPECT_NE(results[0].error.find("200 ms"), std::string::npos) << results[0].error;
  EXPECT_LT(took, 2s);
  sink.reset();
}

TEST(HttpSink, SendsCloudEventsBinaryHeadersAndIdempotencyKey) {
  HookServer server;
  auto sink = open_http_sink(
      server.url("/hook?tenant=a&timeout_ms=3000&header.X-Token=s3cret&concurrency=2&x=1"));
  StoredEvent e = make_event("customer 42/ü", 7);
  e.headers.emplace("correlation_id", "corr-1");
  e.headers.emplace("id", "must-not-override");
  StoredEvent no_key = make_event("", 8);
  std::vector<StoredEvent> batch = {e, no_key};
  auto results = sink->deliver(batch);
  ASSERT_TRUE(results[0].ok()) << results[0].error;
  ASSERT_TRUE(results[1].ok()) << results[1].error;

  auto got = server.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  const Recorded* first = got[0].header("ce-id") == e.id.str() ? &got[0] : &got[1];
  const Recorded* second = first == &got[0] ? &got[1] : &got[0];
  EXPECT_EQ(first->header("ce-specversion"), "1.0");
  EXPECT_EQ(first->header("ce-id"), e.id.str());
  EXPECT_EQ(first->header("ce-type"), "invoice.paid");
  EXPECT_EQ(first->header("ce-source"), "outpost");
  EXPECT_EQ(first->header("ce-time"), format_rfc3339(e.occurred_at));
  // Sent percent-encoded as the CloudEvents HTTP binding requires (space, non-ASCII); httplib
  // decodes header values on receipt, so decoding again must be harmless.
  EXPECT_EQ(core::percent_decode(first->header("ce-partitionkey")), e.key);
  EXPECT_EQ(first->header("ce-correlationid"), "corr-1");
  EXPECT_EQ(first->header("idempotency-key"), e.id.str());
  EXPECT_EQ(first->header("content-type"), "application/json");
  EXPECT_EQ(first->header("x-token"), "s3cret");
  EXPECT_EQ(first->body, e.payload);
  // The webhook's own query parameters pass through; ours are removed.
  EXPECT_EQ(first->params.count("tenant"), 1u);
  EXPECT_EQ(first->params.count("x"), 1u);
  EXPECT_EQ(first->params.count("timeout_ms"), 0u);
  EXPECT_EQ(first->params.count("concurrency"), 0u);
  EXPECT_EQ(first->params.count("header.X-Token"), 0u);
  EXPECT_EQ(second->headers.count("ce-partitionkey"), 0u) << "no partition key for an empty key";
  EXPECT_EQ(second->header("ce-id"), no_key.id.str());
}

// The User-Agent names the version the project is built as, not a number written into the code.
TEST(HttpSink, UserAgentIsTheProjectVersion) {
  HookServer server;
  auto sink = open_http_sink(server.url());
  std::vector<StoredEvent> batch = {make_event("k", 1)};
  ASSERT_TRUE(sink->deliver(batch)[0].ok());
  auto got = server.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].header("user-agent"), std::string("outpost/") + OUTPOST_VERSION);
}

TEST(HttpSink, EventDataCannotInjectRequestHeaders) {
  HookServer server;
  auto sink = open_http_sink(server.url());
  StoredEvent e = make_event("k\r\nX-Evil: 1");
  e.type = "t\r\nX-Evil-Type: 1";
  e.headers.emplace("note", "v\r\nX-Evil-Header: 1");
  e.headers.emplace("content_type", "text/plain\r\nX-Evil-Ct: 1");
  std::vector<StoredEvent> batch = {e};
  ASSERT_TRUE(sink->deliver(batch)[0].ok());
  auto got = server.wait_for(1);
  ASSERT_EQ(got.size(), 1u);
  for (const char* name : {"x-evil", "x-evil-type", "x-evil-header", "x-evil-ct"})
    EXPECT_EQ(got[0].headers.count(name), 0u) << name;
  EXPECT_EQ(core::percent_decode(got[0].header("ce-partitionkey")), e.key);
  EXPECT_EQ(core::percent_decode(got[0].header("ce-type")), e.type);
}

TEST(HttpSink, ContentTypeFromEventHeaderOrUrl) {
  HookServer server;
  {
    auto sink = open_http_sink(server.url());
    StoredEvent e = make_event("a");
    e.payload = "plain words";
    e.headers.emplace("content_type", "text/plain; charset=utf-8");
    std::vector<StoredEvent> batch = {e};
    ASSERT_TRUE(sink->deliver(batch)[0].ok());
  }
  {
    auto sink = open_http_sink(server.url("/hook?header.Content-Type=application/cloudevents"));
    std::vector<StoredEvent> batch = {make_event("a")};
    ASSERT_TRUE(sink->deliver(batch)[0].ok());
  }
  auto got = server.wait_for(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].header("content-type"), "text/plain; charset=utf-8");
  EXPECT_EQ(got[0].body, "plain words");
  EXPECT_EQ(got[1].header("content-type"), "application/cloudevents");
}

TEST(HttpSink, ConcurrencyKeepsPerKeyOrderAndNeverOverlapsAKey) {
  std::mutex mu;
  std::map<std::string, int> in_flight_by_key;
  std::map<std::string, std::vector<std::string>> arrivals;
  int in_flight = 0, max_in_flight = 0;
  bool overlapped_key = false;
  HookServer* self = nullptr;
  HookServer server([&](const Recorded& r, httplib::Response&) {
    std::string key = core::percent_decode(r.header("ce-partitionkey"));
    {
      std::lock_guard lock(mu);
      if (!key.empty() && ++in_flight_by_key[key] > 1) overlapped_key = true;
      if (!key.empty()) arrivals[key].push_back(r.header("ce-id"));
      max_in_flight = std::max(max_in_flight, ++in_flight);
    }
    self->sleep(10ms);
    std::lock_guard lock(mu);
    --in_flight;
    if (!key.empty()) --in_flight_by_key[key];
  });
  self = &server;
  auto sink = open_http_sink(server.url(), SinkOptions{.concurrency = 4});

  std::vector<StoredEvent> batch;
  std::map<std::string, std::vector<std::string>> sent;
  for (int i = 0; i < 48; ++i) {
    std::string key = i % 6 == 5 ? "" : "key-" + std::to_string(i % 4);
    batch.push_back(make_event(key, i));
    if (!key.empty()) sent[key].push_back(batch.back().id.str());
  }
  auto results = sink->deliver(batch);
  for (const auto& r : results) ASSERT_TRUE(r.ok()) << r.error;
  std::lock_guard lock(mu);
  EXPECT_FALSE(overlapped_key) << "two requests of one key were in flight at once";
  EXPECT_EQ(arrivals, sent) << "per-key arrival order differs from batch order";
  EXPECT_LE(max_in_flight, 4);
  EXPECT_GE(max_in_flight, 2) << "concurrency 4 never had two requests in flight";
}

TEST(HttpSink, ReusesConnectionsAcrossBatches) {
  HookServer server;
  auto sink = open_http_sink(server.url());  // concurrency 1
  for (int b = 0; b < 3; ++b) {
    std::vector<StoredEvent> batch;
    for (int i = 0; i < 10; ++i) batch.push_back(make_event("k", i));
    for (const auto& r : sink->deliver(batch)) ASSERT_TRUE(r.ok()) << r.error;
  }
  EXPECT_EQ(server.wait_for(30).size(), 30u);
  EXPECT_EQ(server.connections(), 1u) << "30 requests in 3 batches should share one connection";
}

TEST(HttpSink, AFailedEventSkipsTheLaterEventsOfItsKeyOnly) {
  std::string poison;
  HookServer server([&poison](const Recorded& r, httplib::Response& res) {
    if (r.header("ce-id") == poison) {
      res.status = 422;
      res.set_content("bad amount", "text/plain");
    }
  });
  auto sink = open_http_sink(server.url("/hook?concurrency=3"));
  std::vector<StoredEvent> batch = {make_event("a", 0), make_event("b", 1), make_event("a", 2),
                                    make_event("", 3),  make_event("a", 4), make_event("b", 5)};
  poison = batch[0].id.str();
  auto results = sink->deliver(batch);
  ASSERT_EQ(results.size(), batch.size());
  EXPECT_EQ(results[0].status, DeliveryResult::Status::failed);
  EXPECT_EQ(results[0].error, "refused: HTTP 422: bad amount");
  EXPECT_EQ(results[2].status, DeliveryResult::Status::skipped);
  EXPECT_EQ(results[4].status, DeliveryResult::Status::skipped);
  EXPECT_TRUE(results[1].ok());
  EXPECT_TRUE(results[3].ok());
  EXPECT_TRUE(results[5].ok());
  auto got = server.wait_for(4);
  std::set<std::string> ids;
  for (const auto& r : got) ids.insert(r.header("ce-id"));
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count(batch[2].id.str()), 0u) << "a skipped event must not be sent";
  EXPECT_EQ(ids.count(batch[4].id.str()), 0u) << "a skipped event must not be sent";
}

TEST(HttpSink, RedirectIsNotFollowed) {
  HookServer server([](const Recorded&, httplib::Response& res) {
    res.status = 302;
    res.set_header("Location", "http://127.0.0.1:1/elsewhere");
    res.set_content("", "text/plain");
  });
  auto sink = open_http_sink(server.url());
  std::vector<StoredEvent> batch = {make_event("a")};
  auto results = sink->deliver(batch);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::failed);
  EXPECT_EQ(results[0].error.rfind("refused: HTTP 302", 0), 0u) << results[0].error;
  EXPECT_EQ(server.wait_for(1).size(), 1u);
}

TEST(HttpSink, ConnectionRefusedIsUnavailableAndStopsTheBatch) {
  std::string url;
  {
    HookServer gone;  // a port that was just free and now has no listener
    url = gone.url();
  }
  auto sink = open_http_sink(url + "?timeout_ms=2000");
  std::vector<StoredEvent> batch = {make_event("a"), make_event("a"), make_event("b")};
  auto results = sink->deliver(batch);
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[0].error.rfind("unavailable: connection refused: ", 0), 0u) << results[0].error;
  EXPECT_NE(results[0].error.find("(POST " + url + ")"), std::string::npos) << results[0].error;
  EXPECT_EQ(results[0].retry_after, Duration{0});
  EXPECT_EQ(results[1].status, DeliveryResult::Status::skipped);
  // Not tried: the webhook was found down by the request before.
  EXPECT_EQ(results[2].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[2].error.rfind("unavailable: not sent", 0), 0u) << results[2].error;
}

// Failure classes (docs/sinks_file_http.md): the answers that say "not now" are unavailable
// with the Retry-After the webhook asked for; every other non-2xx is refused (an attempt).
TEST(HttpSink, EachStatusIsUnavailableOrRefused) {
  std::atomic<int> status{200};
  std::string retry_after;  // set before each deliver, read by the server thread during it
  HookServer server([&](const Recorded&, httplib::Response& res) {
    res.status = status.load();
    if (!retry_after.empty()) res.set_header("Retry-After", retry_after);
    res.set_content("said " + std::to_string(res.status), "text/plain");
  });
  auto sink = open_http_sink(server.url());
  auto deliver_one = [&](int code, std::string hint = {}) {
    status = code;
    retry_after = std::move(hint);
    std::vector<StoredEvent> batch = {make_event("k")};
    return sink->deliver(batch).at(0);
  };

  auto r = deliver_one(503, "2");
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(r.retry_after, std::chrono::milliseconds(2000));
  EXPECT_EQ(r.error, "unavailable: HTTP 503 (Retry-After: 2): said 503");

  r = deliver_one(429, "7");
  EXPECT_EQ(r.status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(r.retry_after, std::chrono::milliseconds(7000));

  for (int code : {429, 502, 503, 504, 408}) {
    r = deliver_one(code);
    EXPECT_EQ(r.status, DeliveryResult::Status::unavailable) << code << ": " << r.error;
    EXPECT_EQ(r.retry_after, Duration{0}) << code;
    EXPECT_EQ(r.error.rfind("unavailable: HTTP " + std::to_string(code), 0), 0u) << r.error;
  }
  for (int code : {400, 401, 403, 404, 409, 413, 422, 500, 501}) {
    r = deliver_one(code, "5");  // a Retry-After on a refusal changes nothing
    EXPECT_EQ(r.status, DeliveryResult::Status::failed) << code << ": " << r.error;
    EXPECT_EQ(r.retry_after, Duration{0}) << code;
    EXPECT_EQ(r.error, "refused: HTTP " + std::to_string(code) + ": said " + std::to_string(code));
  }
  EXPECT_TRUE(deliver_one(204).ok());
}

// Once the webhook answered 503, the rest of the batch is not sent: each request would only
// find it down again (with a connect timeout, one timeout per event).
TEST(HttpSink, AnUnavailableWebhookIsNotHammered) {
  HookServer server([](const Recorded&, httplib::Response& res) {
    res.status = 503;
    res.set_header("Retry-After", "3");
  });
  auto sink = open_http_sink(server.url("/hook?concurrency=2"));
  std::vector<StoredEvent> batch;
  for (int i = 0; i < 12; ++i) batch.push_back(make_event("key-" + std::to_string(i % 5), i));
  auto results = sink->deliver(batch);
  ASSERT_EQ(results.size(), batch.size());
  std::set<std::string> keys_seen;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (keys_seen.insert(batch[i].key).second) {
      EXPECT_EQ(results[i].status, DeliveryResult::Status::unavailable) << i << results[i].error;
      EXPECT_EQ(results[i].retry_after, std::chrono::milliseconds(3000)) << i;
    } else {
      EXPECT_EQ(results[i].status, DeliveryResult::Status::skipped) << i << results[i].error;
    }
  }
  // Two were in flight when the first 503 came back; nothing was started after it.
  EXPECT_LE(server.wait_for(3, 200ms).size(), 2u);
}

// A webhook that accepts connections but never answers: the first request times out, and the
// rest of the batch is not sent, so the call costs one timeout_ms, not one per event.
TEST(HttpSink, AWebhookThatHangsCostsOneTimeoutPerBatch) {
  HangingWebhook hanging;
  auto sink =
      open_http_sink("http://127.0.0.1:" + std::to_string(hanging.port()) + "/hook?timeout_ms=300");
  std::vector<StoredEvent> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(make_event("key-" + std::to_string(i), i));
  auto results = sink->deliver(batch);
  ASSERT_EQ(results.size(), batch.size());
  EXPECT_EQ(results[0].status, DeliveryResult::Status::unavailable);
  EXPECT_EQ(results[0].error.rfind("unavailable: timeout after 300 ms (timeout_ms): ", 0), 0u)
      << results[0].error;
  for (std::size_t i = 1; i < results.size(); ++i) {
    EXPECT_EQ(results[i].status, DeliveryResult::Status::unavailable) << i;
    EXPECT_EQ(results[i].error.rfind("unavailable: not sent", 0), 0u) << results[i].error;
  }
  EXPECT_LE(hanging.requests(), 1) << "requests were sent after the webhook was found down";
}

TEST(HttpClassify, CurlCodesAndStatuses) {
  using http::classify;
  using http::Outcome;
  EXPECT_EQ(classify(CURLE_OK, 200), Outcome::delivered);
  EXPECT_EQ(classify(CURLE_OK, 204), Outcome::delivered);
  for (long status : {408L, 429L, 502L, 503L, 504L})
    EXPECT_EQ(classify(CURLE_OK, status), Outcome::unavailable) << status;
  for (long status : {301L, 302L, 400L, 401L, 403L, 404L, 409L, 413L, 422L, 500L, 501L, 505L})
    EXPECT_EQ(classify(CURLE_OK, status), Outcome::refused) << status;
  for (CURLcode code : {CURLE_COULDNT_CONNECT, CURLE_COULDNT_RESOLVE_HOST, CURLE_OPERATION_TIMEDOUT,
                        CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_GOT_NOTHING,
                        CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION})
    EXPECT_EQ(classify(code, 0), Outcome::unavailable) << curl_easy_strerror(code);
  for (CURLcode code : {CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY})
    EXPECT_EQ(classify(code, 0), Outcome::refused) << curl_easy_strerror(code);
}

TEST(HttpClassify, RetryAfterInSecondsOrAsADate) {
  using http::parse_retry_after;
  using std::chrono::milliseconds;
  // A fixed "now" (2026-10-21 07:28:00 UTC) so the date forms need no clock.
  const auto now = std::chrono::system_clock::from_time_t(1792567680);
  EXPECT_EQ(parse_retry_after("2", now), milliseconds(2000));
  EXPECT_EQ(parse_retry_after(" 120 ", now), milliseconds(120'000));
  EXPECT_EQ(parse_retry_after("0", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("86400", now), http::kMaxRetryAfter) << "capped";
  EXPECT_EQ(parse_retry_after("99999999999999999999999", now), http::kMaxRetryAfter);
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2026 07:28:30 GMT", now), milliseconds(30'000));
  EXPECT_EQ(parse_retry_after("Wednesday, 21-Oct-26 07:29:00 GMT", now), milliseconds(60'000));
  EXPECT_EQ(parse_retry_after("Wed Oct 21 07:28:05 2026", now), milliseconds(5'000));
  EXPECT_EQ(parse_retry_after("Thu, 22 Oct 2026 07:28:00 GMT", now), http::kMaxRetryAfter);
  EXPECT_EQ(parse_retry_after("Wed, 21 Oct 2026 07:00:00 GMT", now), milliseconds(0)) << "past";
  EXPECT_EQ(parse_retry_after("", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("soon", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("-5", now), milliseconds(0));
  EXPECT_EQ(parse_retry_after("1.5", now), milliseconds(0));
}

TEST(HttpSink, BadUrlsAreConfigErrorsNamingThePart) {
  auto message = [](const std::string& url) {
    try {
      open_http_sink(url);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  EXPECT_NE(message("http://h/x?concurrency=0").find("concurrency"), std::string::npos);
  EXPECT_NE(message("http://h/x?timeout_ms=abc").find("timeout_ms"), std::string::npos);
  EXPECT_NE(message("http://h/x?header.Bad%20Name=1").find("header.Bad Name"), std::string::npos);
  EXPECT_NE(message("ftp://h/x").find("ftp"), std::string::npos);
  // Near misses of our parameters are typos, not webhook parameters.
  EXPECT_NE(message("http://h/x?timout_ms=5").find("'timout_ms'"), std::string::npos);
  EXPECT_NE(message("http://h/x?concurency=5").find("'concurency'"), std::string::npos);
  EXPECT_NE(message("http://h/x?headers.X-A=1").find("'headers.X-A'"), std::string::npos);
  EXPECT_EQ(message("http://h/x?timeout=5&page=2&q="), "no ConfigError");
  EXPECT_NE(message("http:///x").find("host"), std::string::npos);
  EXPECT_NE(message("http://a,b/x").find("one host"), std::string::npos);
  EXPECT_NE(message("http://user:pw@h/x?concurrency=0").find("***"), std::string::npos)
      << "passwords are redacted in messages";
}

TEST(HttpSink, EmptyBatchSendsNothing) {
  HookServer server;
  auto sink = open_http_sink(server.url());
  EXPECT_TRUE(sink->deliver({}).empty());
  EXPECT_EQ(server.wait_for(1, 50ms).size(), 0u);
}

}  // namespace
}  // namespace outpost::testing
