#pragma once
// Starting and stopping real server processes from tests (for fault tests that need a private
// instance they can kill, stop for a while, or restart). Ports are picked at run time; every
// process is stopped by PID in the destructor.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace outpost::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0 and read it back).
std::uint16_t free_port();

// True once a TCP connect to 127.0.0.1:port succeeds, polling until `timeout`.
bool wait_for_port(std::uint16_t port, std::chrono::milliseconds timeout);

class ServerProcess {
 public:
  ServerProcess() = default;
  // Starts argv[0] (looked up in PATH) with stdout/stderr to `log_path` (or /dev/null if empty).
  explicit ServerProcess(std::vector<std::string> argv, std::string log_path = {});
  ~ServerProcess();  // SIGKILL if still running, then reaps
  ServerProcess(ServerProcess&&) noexcept;
  ServerProcess& operator=(ServerProcess&&) noexcept;
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  void start();                                       // (re)starts with the same argv
  void signal(int sig);                               // e.g. SIGKILL, SIGTERM, SIGSTOP, SIGCONT
  bool wait_exit(std::chrono::milliseconds timeout);  // reaps; true if it exited in time
  void stop();                                        // SIGTERM, wait 5 s, then SIGKILL; reaps
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  std::vector<std::string> argv_;
  std::string log_path_;
  pid_t pid_ = -1;
};

}  // namespace outpost::testing
