// The daemon's HTTP server under hostile or broken surroundings (docs/operations.md, "HTTP
// endpoints"), black box on `outpost run`:
//   - clients that trickle their request a byte at a time, more of them than the server has
//     threads, do not keep /healthz and /readyz from answering;
//   - a store that hangs (its server stopped with SIGSTOP) holds up neither /metrics nor /readyz
//     for its timeout_ms: that pipeline is reported down within the read budget, the others
//     answer as usual;
//   - a chunked request body is held to the same 1 MiB as one with a Content-Length.
// Bounds are generous (seconds); before the fixes these requests went unanswered for 10 s or
// more, or never.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "daemon_process.h"
#include "server_process.h"

namespace {

using namespace outpost::testing;
using namespace std::chrono_literals;

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` on a new connection and returns what came back until the server closed the
// connection or `timeout` passed.
std::string raw_http(int port, const std::string& request, std::chrono::seconds timeout = 30s) {
  int fd = connect_to(port);
  if (fd < 0) return "connect failed";
  std::size_t sent = 0;
  while (sent < request.size()) {
    auto n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer (413) and close before reading it all
    sent += std::size_t(n);
  }
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, std::size_t(n));
  }
  ::close(fd);
  return out;
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

// One daemon, drained at the end of each test.
class DaemonHttpHardening : public DaemonFixture {
 protected:
  void TearDown() override {
    if (daemon_) stop();
  }
};

// A6: 64 clients (twice the server's threads) each send a request line and then one header byte
// every 2 s, well inside the per-read timeout. Before, they held every thread for as long as they
// trickled and /healthz went unanswered; now a request's head and body must arrive within a
// deadline and a connection holds a thread only once its request has arrived.
TEST_F(DaemonHttpHardening, ProbesAnswerWhileMoreSlowClientsThanThreadsTrickleHeaders) {
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\n" +
                   relay("orders", "sqlite:" + dir_ / "m.db", "file:" + dir_ / "a.jsonl"));
  ASSERT_GT(port, 0) << log();
  std::vector<int> slow;
  for (int i = 0; i < 64; ++i) {
    int fd = connect_to(port);
    ASSERT_GE(fd, 0);
    const std::string head = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    // One byte per connection every 2 s for at most 60 s (a connection the server closed just
    // fails to send).
    for (int i = 0; i < 30 && !stop.load(); ++i) {
      for (int fd : slow) ::send(fd, "X", 1, MSG_NOSIGNAL);
      for (int j = 0; j < 20 && !stop.load(); ++j) std::this_thread::sleep_for(100ms);
    }
  });
  std::this_thread::sleep_for(3s);  // every slow connection has been accepted
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(5, 0);
  client.set_read_timeout(5, 0);
  client.set_write_timeout(5, 0);
  for (int i = 0; i < 4; ++i) {
    for (const char* path : {"/healthz", "/readyz"}) {
      auto t0 = std::chrono::steady_clock::now();
      auto res = client.Get(path);
      auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
      EXPECT_TRUE(res) << path << ": no answer within 5 s while 64 clients trickle (" << took
                       << " ms): " << httplib::to_string(res.error());
      if (res) {
        EXPECT_EQ(res->status, 200) << path << " " << res->body;
      }
    }
    std::this_thread::sleep_for(2s);
  }
  stop.store(true);
  trickle.join();
  for (int fd : slow) ::close(fd);
}

// A private redis-server this test may pause.
struct PrivateRedis {
  PrivateRedis()
      : port(free_port()),
        server({"redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no"}) {
    if (!wait_for_port(port, 30s)) throw std::runtime_error("redis-server did not start");
  }
  ~PrivateRedis() { server.signal(SIGCONT); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port) + "/0"; }
  std::uint16_t port;
  ServerProcess server;
};

// A7: one pipeline's store hangs (redis-server stopped; its timeout_ms is 30 s). /metrics and
// /readyz used to wait for it (the whole scrape failed at a scraper's timeout, the probe saw no
// answer); now each answers within the read budget: that pipeline's store down, the other's
// values fresh.
TEST_F(DaemonHttpHardening, AHungStoreHoldsUpNeitherMetricsNorReadiness) {
  PrivateRedis redis;
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\n" +
                   relay("good", "sqlite:" + dir_ / "a.db", "file:" + dir_ / "a.jsonl") +
                   relay("hung", redis.url() + "?timeout_ms=30000", "file:" + dir_ / "b.jsonl"));
  ASSERT_GT(port, 0) << log();
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(8, 0);
  std::string body;
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    auto r = client.Get("/metrics");
    body = r ? r->body : "";
    up = body.find("outpost_store_up{pipeline=\"hung\",store=\"redis\",sink=\"file\"} 1") !=
         std::string::npos;
    if (!up) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(up) << body << log();

  redis.server.signal(SIGSTOP);
  std::this_thread::sleep_for(1s);
  for (int i = 0; i < 3; ++i) {
    auto metrics = client.Get("/metrics");
    ASSERT_TRUE(metrics) << "/metrics: no answer within 8 s while one store hangs: "
                         << httplib::to_string(metrics.error());
    EXPECT_EQ(metrics->status, 200);
    EXPECT_NE(
        metrics->body.find("outpost_store_up{pipeline=\"hung\",store=\"redis\",sink=\"file\"} 0"),
        std::string::npos)
        << metrics->body;
    EXPECT_NE(
        metrics->body.find("outpost_store_up{pipeline=\"good\",store=\"sqlite\",sink=\"file\"} 1"),
        std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("outpost_store_pending{pipeline=\"good\""), std::string::npos)
        << metrics->body;
    auto ready = client.Get("/readyz");
    ASSERT_TRUE(ready) << "/readyz: no answer within 8 s while one store hangs: "
                       << httplib::to_string(ready.error());
    EXPECT_EQ(ready->status, 503) << ready->body;
    EXPECT_NE(ready->body.find(R"({"check":"store_connected","error":"no answer within)"),
              std::string::npos)
        << ready->body;
    EXPECT_NE(ready->body.find(R"("pipeline":"hung")"), std::string::npos) << ready->body;
    EXPECT_EQ(ready->body.find(R"("pipeline":"good")"), std::string::npos) << ready->body;
  }
  redis.server.signal(SIGCONT);
  // Once it answers again, so do its metrics and readiness.
  bool ready = false;
  for (int i = 0; i < 600 && !ready; ++i) {
    auto r = client.Get("/readyz");
    ready = r && r->status == 200;
    if (!ready) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ready) << log();
}

// A5: a chunked body is held to the 1 MiB that a Content-Length body is (413); before, it was
// read whole, whatever its size.
TEST_F(DaemonHttpHardening, AChunkedBodyIsHeldToTheSameLimit) {
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"tok\"\n" +
                   relay("orders", "sqlite:" + dir_ / "m.db", "file:" + dir_ / "a.jsonl"));
  ASSERT_GT(port, 0) << log();
  const std::string body = R"({"pipeline":"orders","filter":{"type":")" +
                           std::string(3'000'000, 'a') + R"("},"expect":0})";
  std::string chunked;
  for (std::size_t at = 0; at < body.size(); at += 65536) {
    auto part = body.substr(at, 65536);
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", part.size());
    chunked += size + part + "\r\n";
  }
  chunked += "0\r\n\r\n";
  const std::string head =
      "POST /api/dead/discard HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
      "\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n"
      "Connection: close\r\n";
  auto r = raw_http(port, head + "Transfer-Encoding: chunked\r\n\r\n" + chunked);
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
  // The same with a Content-Length (held before), and a small chunked body still works.
  r = raw_http(port, head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(status_of(r), 413) << r.substr(0, 300);
  const std::string small = R"({"pipeline":"orders","filter":{"type":"x"},"expect":0})";
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", small.size());
  r = raw_http(port, head + "Transfer-Encoding: chunked\r\n\r\n" + size + small + "\r\n0\r\n\r\n");
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("\"discarded\":0"), std::string::npos) << r;
  // A body no route takes is not read (the client sends only the headers and gets its answer).
  r = raw_http(port, "POST /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n",
               20s);
  EXPECT_EQ(status_of(r), 405) << r;
}

// A15: a second daemon on an address the first one serves is refused (exit 1 naming the address
// and the reason), not let in beside it by SO_REUSEPORT to take half of the requests.
TEST_F(DaemonHttpHardening, ASecondDaemonOnTheSameAddressIsRefused) {
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\n" +
                   relay("orders", "sqlite:" + dir_ / "m.db", "file:" + dir_ / "a.jsonl"));
  ASSERT_GT(port, 0) << log();
  const std::string second = dir_ / "second.toml";
  const std::string addr = "127.0.0.1:" + std::to_string(port);
  write_file(second, "[http]\nlisten = \"" + addr + "\"\n" +
                         relay("other", "sqlite:" + dir_ / "m2.db", "file:" + dir_ / "b.jsonl"));
  auto r = run_cli({"run", "--config", second}, {}, 60s);
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("cannot listen on " + addr), std::string::npos) << r.all();
  EXPECT_NE(r.err.find("in use"), std::string::npos) << r.all();
  // The first one still answers every request.
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(
        status_of(raw_http(
            port, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 10s)),
        200);
}

}  // namespace

// Review finding: a refusal answered before the body is read (405, 403, 401) says
// `Connection: close`, and the connection must then close: cpp-httplib does not act on a
// response's `Connection: close`, so the unread body was parsed as the next request of the same
// connection and a request hidden in a body was answered (and executed).
TEST_F(DaemonHttpHardening, ARequestInsideAnUnreadBodyIsNotServed) {
  int port = start("[http]\nlisten = \"127.0.0.1:0\"\nadmin_token = \"tok\"\n" +
                   relay("orders", "sqlite:" + dir_ / "a.db", "file:" + dir_ / "a.jsonl"));
  ASSERT_GT(port, 0) << log();
  const std::string host = "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
  const std::string hidden = "GET /healthz HTTP/1.1\r\n" + host + "\r\n";
  const std::string length = "Content-Length: " + std::to_string(hidden.size()) + "\r\n\r\n";
  const std::vector<std::pair<std::string, int>> refusals{
      {"PUT /healthz HTTP/1.1\r\n" + host, 405},
      {"POST /api/dead/discard HTTP/1.1\r\nHost: elsewhere.example\r\n", 403},
      {"POST /api/dead/discard HTTP/1.1\r\nContent-Type: application/json\r\n" + host, 401},
  };
  for (const auto& [head, status] : refusals) {
    auto r = raw_http(port, head + length + hidden, 20s);
    EXPECT_EQ(status_of(r), status) << r;
    std::size_t answers = 0;
    for (auto at = r.find("HTTP/1.1 "); at != std::string::npos; at = r.find("HTTP/1.1 ", at + 1))
      ++answers;
    EXPECT_EQ(answers, 1u) << "the request inside the body was answered:\n" << r;
  }
  // With `Expect: 100-continue` cpp-httplib answers `100 Continue` before it routes the request:
  // the refusal after that interim answer closes the connection all the same.
  for (const auto& [head, status] : refusals) {
    auto r = raw_http(port, head + "Expect: 100-continue\r\n" + length + hidden, 20s);
    EXPECT_NE(r.find("HTTP/1.1 " + std::to_string(status) + " "), std::string::npos) << r;
    EXPECT_EQ(r.find("HTTP/1.1 200 "), std::string::npos)
        << "the request inside the body was answered:\n"
        << r;
  }
}

// Review finding: without its wake-up eventfd the connection server's waiting thread noticed a
// new connection only at its 10 s poll timeout, so every request waited up to 10 s. Now the
// server cannot start: exit 1 naming why, not a daemon that answers late.
TEST_F(DaemonHttpHardening, NoEventfdIsAStartErrorNotSlowAnswers) {
  const std::string file = dir_ / "noeventfd.toml";
  write_file(file, "[http]\nlisten = \"127.0.0.1:0\"\n" +
                       relay("orders", "sqlite:" + dir_ / "a.db", "file:" + dir_ / "a.jsonl"));
  // Under ASan its runtime checks that it comes first in the library list; the shim only
  // replaces eventfd, so that check is switched off for this one child.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_before = asan ? asan : "";
  ::setenv("ASAN_OPTIONS",
           (asan_before + (asan_before.empty() ? "" : ":") + "verify_asan_link_order=0").c_str(),
           1);
  ::setenv("LD_PRELOAD", OUTPOST_TEST_NO_EVENTFD, 1);
  auto r = run_cli({"run", "--config", file}, {}, 30s);
  ::unsetenv("LD_PRELOAD");
  if (asan)
    ::setenv("ASAN_OPTIONS", asan_before.c_str(), 1);
  else
    ::unsetenv("ASAN_OPTIONS");
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("eventfd"), std::string::npos) << r.all();
}

// Operator finding N6: `[http] listen` on a port in use was found only after every pipeline had
// opened its store and sink (the files were created); the address is now bound first, so the
// start error leaves nothing behind, as a listen host that does not resolve does.
TEST_F(DaemonHttpHardening, ABusyListenAddressIsFoundBeforeAnyPipelineOpens) {
  int busy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string listen = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const std::string file = dir_ / "busy.toml";
  write_file(file,
             "[http]\nlisten = \"" + listen + "\"\n" +
                 relay("orders", "sqlite:" + dir_ / "busy.db", "file:" + dir_ / "busy.jsonl"));
  auto r = run_cli({"run", "--config", file}, {}, 60s);
  ::close(busy);
  EXPECT_EQ(r.code, 1) << r.all();
  EXPECT_NE(r.err.find("cannot listen on " + listen + ": Address already in use"),
            std::string::npos)
      << r.all();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "busy.db")) << "the store was opened";
  EXPECT_FALSE(std::filesystem::exists(dir_ / "busy.jsonl")) << "the sink was opened";
}
