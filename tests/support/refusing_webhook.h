#pragma once
// A webhook on 127.0.0.1 (port chosen by the kernel) that answers and refuses every event: 400 on
// /bad, 422 "no such account" on any other path. A refusal is a failure of the event, an attempt
// (docs/sinks_file_http.md, "Failure classes"), so `relay --max-attempts 1` dead-letters at once;
// a webhook that is down is an outage instead and dead-letters nothing. Tests that link
// cpp-httplib include it (cli, events_cli).

#include <httplib.h>

#include <chrono>
#include <string>
#include <thread>

namespace outpost::testing {

class RefusingWebhook {
 public:
  RefusingWebhook() {
    server_.Post("/bad", [](const httplib::Request&, httplib::Response& res) { res.status = 400; });
    server_.Post(".*", [](const httplib::Request&, httplib::Response& res) {
      res.status = 422;
      res.set_content("no such account", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // httplib's stop() before the listening loop started is lost and join() would wait forever
    // (a test that skips destroys the webhook at once).
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~RefusingWebhook() {
    server_.stop();
    thread_.join();
  }
  RefusingWebhook(const RefusingWebhook&) = delete;
  RefusingWebhook& operator=(const RefusingWebhook&) = delete;

  int port() const { return port_; }
  std::string url(const std::string& path = "/hook") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace outpost::testing
