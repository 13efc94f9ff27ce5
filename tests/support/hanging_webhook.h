#pragma once
// A webhook on 127.0.0.1 (port chosen by the kernel) that accepts connections and reads requests
// but never answers: an HTTP sink pointed at it hangs in every request until its own timeout.
// Used by the tests of relays stuck on a webhook (crash_test, sqlite_cli_test).

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace outpost::testing {

class HangingWebhook {
 public:
  HangingWebhook() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(fd_, 64) != 0 || ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len)) {
      if (fd_ >= 0) ::close(fd_);
      throw std::runtime_error("hanging webhook: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listening socket was shut down
        {
          std::lock_guard lock(mu_);
          if (stopping_) {
            ::close(c);
            return;
          }
          clients_.push_back(c);
        }
        char buf[4096];
        if (::recv(c, buf, sizeof buf, 0) > 0) ++requests_;  // read, never answered
      }
    });
  }
  HangingWebhook(const HangingWebhook&) = delete;
  HangingWebhook& operator=(const HangingWebhook&) = delete;
  ~HangingWebhook() {
    {
      // Shutting the sockets down wakes the accept thread from accept() or from a recv() on a
      // client that never sent anything.
      std::lock_guard lock(mu_);
      stopping_ = true;
      for (int c : clients_) ::shutdown(c, SHUT_RDWR);
    }
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    for (int c : clients_) ::close(c);
    ::close(fd_);
  }

  int port() const { return port_; }
  // Requests read so far (one per connection: the sink waits for the answer before the next).
  int requests() const { return requests_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  bool stopping_ = false;     // guarded by mu_
  std::vector<int> clients_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace outpost::testing
