#include "stores/postgres/listener.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

namespace outpost::pg {

Listener::Listener(const Endpoint& ep, std::string channel, std::string next_due_sql)
    : ep_(ep),
      channel_(std::move(channel)),
      next_due_sql_(std::move(next_due_sql)),
      wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (wake_fd_ < 0) throw Error(ErrorCode::internal, "postgres", "eventfd failed");
}

Listener::~Listener() {
  ::close(wake_fd_);
}

void Listener::wait(Duration max) {
  auto deadline = SteadyClock::now() + max;
  std::unique_lock lock(mu_);
  std::uint64_t gen = generation_, intr = interrupts_;
  if (listening_) {
    cv_.wait_until(lock, deadline, [&] { return generation_ != gen || interrupts_ != intr; });
    return;
  }
  listening_ = true;
  lock.unlock();
  // A lost LISTEN connection is handled inside (reconnect with backoff); what escapes is a
  // failure of this host (poll() itself failing): the caller reports it and backs off rather
  // than taking it for a timeout and waiting again at once.
  std::exception_ptr failed;
  try {
    listen_once(deadline);
  } catch (...) {
    failed = std::current_exception();
  }
  lock.lock();
  listening_ = false;
  ++generation_;
  cv_.notify_all();
  lock.unlock();
  if (failed) std::rethrow_exception(failed);
}

void Listener::interrupt() {
  {
    std::lock_guard lock(mu_);
    ++interrupts_;
  }
  cv_.notify_all();
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
}

// Runs on the thread that owns the LISTEN connection.
void Listener::listen_once(SteadyClock::time_point deadline) {
  const auto& ep = ep_;
  if (!listen_) {
    auto t = SteadyClock::now();
    // A claim that just succeeded proves the server is back: skip the rest of the backoff.
    if (t < next_connect_ && !server_seen_up_.exchange(false)) {
      poll_until(std::min(deadline, next_connect_), -1);
      return;
    }
    try {
      auto conn = connect(ep);
      exec_simple(ep, conn.get(), "LISTEN \"" + channel_ + "\"", "listen");
      listen_ = std::move(conn);
      backoff_ = Duration(0);
    } catch (const Error&) {
      backoff_ = std::min(Duration(5'000), std::max(Duration(50), backoff_ * 2));
      next_connect_ = SteadyClock::now() + backoff_;
      poll_until(std::min(deadline, next_connect_), -1);
      return;
    }
    // Freshly (re)connected: notifications sent while we were away are lost, so the caller
    // must re-check for work now.
    return;
  }
  if (drain_notifications()) return;
  // Sleep no longer than the next retry or lease expiry, so due work is not left waiting.
  try {
    Params none;
    auto r = exec_params(ep, listen_.get(), next_due_sql_, none, "wait");
    if (!is_null(r.get(), 0, 0)) {
      auto ms = get_i64(r.get(), 0, 0);
      if (ms <= 0) return;
      deadline = std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(ms));
    }
  } catch (const Error&) {
    if (broken(listen_.get())) {
      listen_.reset();
      return;
    }
  }
  if (drain_notifications()) return;
  while (SteadyClock::now() < deadline) {
    int which = poll_until(deadline, PQsocket(listen_.get()));
    if (which == 1) return;  // interrupted
    if (which == 2) {
      if (!PQconsumeInput(listen_.get()) || broken(listen_.get())) {
        listen_.reset();  // lost: reconnect on the next wait; the caller re-checks meanwhile
        return;
      }
      if (drain_notifications()) return;
    }
  }
}

bool Listener::drain_notifications() {
  if (!PQconsumeInput(listen_.get())) {
    listen_.reset();
    return true;
  }
  bool any = false;
  while (PGnotify* n = PQnotifies(listen_.get())) {
    any = true;
    PQfreemem(n);
  }
  return any;
}

// 0: timeout, 1: interrupt(), 2: socket readable. Throws when poll() fails (not EINTR): the
// failure would repeat at once, so returning it as a timeout made the wait loop spin.
int Listener::poll_until(SteadyClock::time_point deadline, int sock) {
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sock, POLLIN, 0}};
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    int rc = ::poll(fds, sock >= 0 ? 2 : 1,
                    static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0)
      throw Error(ErrorCode::backend, "postgres",
                  std::string("waiting for work: poll() failed: ") + std::strerror(errno));
    if (rc == 0) return 0;
    if (fds[0].revents) {
      std::uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
      return 1;
    }
    return 2;
  }
}

}  // namespace outpost::pg
