#include "http_connections.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "outpost/error.h"

namespace outpost::cli {
namespace {

using Clock = std::chrono::steady_clock;

// A request head longer than this is handed on as it is: cpp-httplib refuses it (414, 400).
constexpr std::size_t kMaxHead = 64 * 1024;

// cpp-httplib's listening thread hands each accepted socket to a task queue; this one runs the
// task there at once: the task only admits the socket (ConnectionServer::process_and_close_socket).
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

std::string address_of(const sockaddr_storage& a, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  port = 0;
  if (a.ss_family == AF_INET) {
    auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    port = ntohs(v6.sin6_port);
  }
  return buf;
}

void close_socket(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

int millis_until(Clock::time_point t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
}

// One connection: its socket, what has been read of it and not yet parsed, and until when its
// current request must have arrived.
struct Conn {
  int fd = -1;
  std::string peer;
  std::string buffer;
  Clock::time_point deadline;
  bool idle = false;  // kept alive, waiting for the next request's first byte
  std::size_t served = 0;
};

// The Stream cpp-httplib parses a request from and writes its response to: the bytes read ahead
// first, then the socket, each read waiting at most the read timeout and never past the
// request's deadline.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn& c, const ConnectionServer::Limits& l) : c_(c), l_(l) {}
  bool is_readable() const override { return !c_.buffer.empty() || wait(POLLIN, read_wait()); }
  bool is_writable() const override {
    return wait(POLLOUT, static_cast<int>(l_.write_timeout.count()));
  }
  ssize_t read(char* ptr, std::size_t size) override {
    if (c_.buffer.empty()) {
      if (!wait(POLLIN, read_wait())) return -1;
      char buf[16 * 1024];
      auto n = ::recv(c_.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n <= 0) return n == 0 ? 0 : -1;
      c_.buffer.append(buf, std::size_t(n));
    }
    std::size_t n = std::min(size, c_.buffer.size() - at_);
    std::copy_n(c_.buffer.data() + at_, n, ptr);
    at_ += n;
    if (at_ == c_.buffer.size()) {
      c_.buffer.clear();
      at_ = 0;
    }
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, std::size_t size) override {
    if (!is_writable()) return -1;
    auto n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0 && !head_done_) note_head(ptr, std::size_t(n));
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = address_of(a, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(c_.fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip = address_of(a, port);
  }
  socket_t socket() const override { return c_.fd; }
  // What was read ahead and not parsed (a pipelined next request) stays with the connection.
  void keep_unread() {
    c_.buffer.erase(0, at_);
    at_ = 0;
  }
  // Whether the response written says `Connection: close`. cpp-httplib 0.11 writes that header
  // for a refusal answered before the body was read (405, 403, 401, 413) but keeps serving the
  // connection, so the unread body would be parsed as the next request: the caller closes it.
  bool close_asked() const { return close_; }

 private:
  // Collects the response's head (status line and headers) as it is written.
  void note_head(const char* ptr, std::size_t n) {
    head_.append(ptr, std::min(n, kMaxHead - std::min(kMaxHead, head_.size())));
    auto end = head_.find("\r\n\r\n");
    // An interim answer (`100 Continue`, written before the request is routed when it says
    // `Expect: 100-continue`) is not the response: its final head follows.
    while (end != std::string::npos && interim(head_)) {
      head_.erase(0, end + 4);
      end = head_.find("\r\n\r\n");
    }
    if (end == std::string::npos && head_.size() < kMaxHead) return;
    head_done_ = true;
    if (end != std::string::npos) head_.resize(end + 2);  // the last header's line end kept
    for (char& ch : head_) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    close_ = head_.find("\r\nconnection: close\r\n") != std::string::npos;
    head_.clear();
  }
  static bool interim(const std::string& head) {
    return head.size() > 9 && (head.compare(0, 7, "HTTP/1.") == 0) && head[8] == ' ' &&
           head[9] == '1';
  }
  int read_wait() const {
    return std::min(static_cast<int>(l_.read_timeout.count()), millis_until(c_.deadline));
  }
  bool wait(short events, int ms) const {
    if (ms <= 0) return false;
    pollfd p{c_.fd, events, 0};
    int r;
    do r = ::poll(&p, 1, ms);
    while (r < 0 && errno == EINTR);
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR));
  }
  Conn& c_;
  const ConnectionServer::Limits& l_;
  std::size_t at_ = 0;
  std::string head_;
  bool head_done_ = false;
  bool close_ = false;
};

bool head_complete(const std::string& b) {
  return b.find("\r\n\r\n") != std::string::npos || b.find("\n\n") != std::string::npos ||
         b.size() >= kMaxHead;
}

}  // namespace

struct ConnectionServer::State {
  ConnectionServer& server;
  Limits limits;
  std::mutex mutex;
  std::condition_variable ready_cv;
  bool stopping = false;
  int wake = -1;                                // eventfd: wakes the waiting thread
  std::vector<std::unique_ptr<Conn>> incoming;  // admitted or kept alive, for the waiting thread
  std::deque<std::unique_ptr<Conn>> ready;      // heads arrived, for the serving threads
  std::set<int> serving;                        // sockets being served (shut down on stop)
  std::map<std::string, std::size_t> per_peer;  // open connections by address
  std::size_t open = 0;
  std::thread waiter;
  std::vector<std::thread> workers;

  State(ConnectionServer& s, const Limits& l) : server(s), limits(l) {
    // Without it the waiting thread would see a new connection only at its 10 s poll timeout:
    // every request would wait that long. A start error instead.
    wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0)
      throw Error(ErrorCode::connection, "http",
                  std::string("cannot start the HTTP server: eventfd: ") + std::strerror(errno));
    waiter = std::thread([this] { wait_loop(); });
    for (std::size_t i = 0; i < limits.threads; ++i) workers.emplace_back([this] { serve_loop(); });
  }

  void notify_waiter() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake, &one, sizeof one);
  }

  // Closes a connection and forgets it (mutex held).
  void drop(Conn& c) {
    close_socket(c.fd);
    auto it = per_peer.find(c.peer);
    if (it != per_peer.end() && --it->second == 0) per_peer.erase(it);
    --open;
  }

  void admit(int fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int port = 0;
    std::string peer = ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0
                           ? address_of(a, port)
                           : std::string();
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping || open >= limits.max_connections || per_peer[peer] >= limits.max_per_peer) {
      if (per_peer[peer] == 0) per_peer.erase(peer);
      close_socket(fd);
      return;
    }
    ++per_peer[peer];
    ++open;
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->peer = std::move(peer);
    c->deadline = Clock::now() + limits.request_deadline;
    incoming.push_back(std::move(c));
    notify_waiter();
  }

  // The waiting thread: every connection whose request has not fully arrived.
  void wait_loop() {
    std::vector<std::unique_ptr<Conn>> waiting;
    std::vector<pollfd> fds;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (stopping) {
          for (auto& c : waiting) drop(*c);
          return;
        }
        for (auto& c : incoming) waiting.push_back(std::move(c));
        incoming.clear();
      }
      fds.assign(1, pollfd{wake, POLLIN, 0});
      Clock::time_point next = Clock::now() + std::chrono::seconds(10);
      for (auto& c : waiting) {
        fds.push_back(pollfd{c->fd, POLLIN, 0});
        next = std::min(next, c->deadline);
      }
      int r = ::poll(fds.data(), fds.size(), millis_until(next) + 1);
      if (r < 0 && errno != EINTR) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (fds[0].revents & POLLIN) {
        std::uint64_t n;
        [[maybe_unused]] auto got = ::read(wake, &n, sizeof n);
      }
      const auto now = Clock::now();
      std::vector<std::unique_ptr<Conn>> still, done, expired;
      for (std::size_t i = 0; i < waiting.size(); ++i) {
        auto& c = waiting[i];
        bool closed = false;
        if (fds[i + 1].revents) {
          char buf[4096];
          auto n = ::recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
          if (n > 0) {
            if (c->idle) {  // the next request on a kept-alive connection: its own deadline
              c->idle = false;
              c->deadline = now + limits.request_deadline;
            }
            c->buffer.append(buf, std::size_t(n));
          } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            closed = true;
          }
        }
        if (closed || (!head_complete(c->buffer) && now >= c->deadline))
          expired.push_back(std::move(c));
        else if (head_complete(c->buffer))
          done.push_back(std::move(c));
        else
          still.push_back(std::move(c));
      }
      waiting = std::move(still);
      std::lock_guard<std::mutex> lock(mutex);
      for (auto& c : expired) drop(*c);
      for (auto& c : done) ready.push_back(std::move(c));
      if (!done.empty()) ready_cv.notify_all();
    }
  }

  // A serving thread: one request of a connection whose head has arrived, then the connection
  // goes back to the waiting thread (kept alive) or is closed.
  void serve_loop() {
    for (;;) {
      std::unique_ptr<Conn> c;
      {
        std::unique_lock<std::mutex> lock(mutex);
        ready_cv.wait(lock, [&] { return stopping || !ready.empty(); });
        if (stopping) return;
        c = std::move(ready.front());
        ready.pop_front();
        serving.insert(c->fd);
      }
      ConnStream stream(*c, limits);
      ++c->served;
      bool connection_closed = false;
      bool ok = false;
      try {
        ok = server.serve(stream, c->served >= limits.keep_alive_requests, connection_closed);
      } catch (...) {
        ok = false;
      }
      stream.keep_unread();
      std::lock_guard<std::mutex> lock(mutex);
      serving.erase(c->fd);
      if (!ok || connection_closed || stream.close_asked() || stopping ||
          c->served >= limits.keep_alive_requests) {
        drop(*c);
        continue;
      }
      const auto now = Clock::now();
      c->idle = c->buffer.empty();
      c->deadline = now + (c->idle ? limits.keep_alive : limits.request_deadline);
      if (!c->idle && head_complete(c->buffer)) {
        ready.push_back(std::move(c));
        ready_cv.notify_one();
      } else {
        incoming.push_back(std::move(c));
        notify_waiter();
      }
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping && !waiter.joinable()) return;
      stopping = true;
      // A request being served ends at its next read or write.
      for (int fd : serving) ::shutdown(fd, SHUT_RDWR);
      ready_cv.notify_all();
      notify_waiter();
    }
    if (waiter.joinable()) waiter.join();
    for (auto& w : workers)
      if (w.joinable()) w.join();
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& c : incoming) drop(*c);
    incoming.clear();
    for (auto& c : ready) drop(*c);
    ready.clear();
    if (wake >= 0) ::close(wake);
    wake = -1;
  }
};

ConnectionServer::ConnectionServer(const Limits& limits)
    : state_(std::make_unique<State>(*this, limits)) {
  new_task_queue = [] { return new InlineQueue; };
}

ConnectionServer::~ConnectionServer() {
  shutdown_connections();
}

void ConnectionServer::shutdown_connections() {
  state_->stop();
}

bool ConnectionServer::process_and_close_socket(socket_t sock) {
  state_->admit(sock);
  return true;
}

bool ConnectionServer::serve(httplib::Stream& stream, bool close_connection,
                             bool& connection_closed) {
  return process_request(stream, close_connection, connection_closed, nullptr);
}

}  // namespace outpost::cli
