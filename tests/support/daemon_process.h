#pragma once
// `outpost run` for the daemon's black-box tests (tests/integration/daemon*_test.cpp,
// dashboard_*_test.cpp): the config file written, the daemon started with its log in a file, the
// port it serves read from its "http on 127.0.0.1:PORT" line; and the [[relay]] table they write.
// One copy of what each of those files had its own of.

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "../integration/cli_process.h"

namespace outpost::testing {

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Polls `done` every 20 ms for up to `timeout`; true once it held.
template <typename F>
bool eventually(F done, std::chrono::seconds timeout = std::chrono::seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// The log once it holds `text`, or as it is after `timeout`.
inline std::string wait_for_log(const std::string& log_path, const std::string& text,
                                std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string all = read_file(log_path);
  while (all.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    all = read_file(log_path);
  }
  return all;
}

// The port a daemon or `relay --metrics` with 127.0.0.1:0 logged ("http on 127.0.0.1:PORT"), or
// -1 when it did not within `timeout`.
inline int served_port(const std::string& log_path,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const std::regex re(R"(http on 127\.0\.0\.1:(\d+))");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::smatch m;
  std::string all = read_file(log_path);
  while (!std::regex_search(all, m, re) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    all = read_file(log_path);
  }
  return std::regex_search(all, m, re) ? std::stoi(m[1]) : -1;
}

// A [[relay]] table; `more` holds further `key = value` lines.
inline std::string relay_table(const std::string& name, const std::string& store,
                               const std::string& sink, const std::string& more = "") {
  return "\n[[relay]]\nname = \"" + name + "\"\nstore = \"" + store + "\"\nsink = \"" + sink +
         "\"\n" + more;
}

// A test with one daemon in a temporary directory. The daemon is killed (SIGKILL) when the test
// ends unless the test stopped it; fixtures that want a drain at the end call stop() in TearDown.
class DaemonFixture : public ::testing::Test {
 protected:
  // Writes `text` to `file_` and starts `outpost run` on it; with `http` (the file listens on
  // 127.0.0.1:0), returns the port it serves, -1 if it never said.
  int start(const std::string& text, bool http = true) {
    if (file_.empty()) file_ = dir_ / "daemon.toml";
    write_file(file_, text);
    log_ = dir_ / "run.log";
    daemon_ =
        std::make_unique<CliProcess>(std::vector<std::string>{"run", "--config", file_}, log_);
    return http ? served_port(log_) : 0;
  }
  // SIGTERM (a drain); the exit code, or -1 when it still runs after `timeout`.
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    if (!daemon_) return -1;
    daemon_->signal(SIGTERM);
    return daemon_->wait(timeout);
  }
  static std::string relay(const std::string& name, const std::string& store,
                           const std::string& sink, const std::string& more = "") {
    return relay_table(name, store, sink, more);
  }
  std::string log() const { return read_file(log_); }
  bool log_has(const std::string& text) const { return log().find(text) != std::string::npos; }

  TempDir dir_;
  std::string file_, log_;  // file_: set before start() to choose the file's name
  std::unique_ptr<CliProcess> daemon_;
};

}  // namespace outpost::testing
