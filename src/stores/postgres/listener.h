#pragma once
// The wake-up side of the PostgreSQL store: one dedicated connection LISTENs on the outbox's
// channel (an insert trigger NOTIFYs it) and wait() sleeps in poll() on its socket and an
// eventfd that interrupt() writes. One thread at a time owns the connection; other waiters sleep
// on a condition variable the owner signals when it returns. A lost connection is reconnected
// with backoff (50 ms doubling to 5 s), and the first wait after a reconnect returns at once so
// the caller re-checks for work it may have missed.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "outpost/event.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::pg {

class Listener {
 public:
  // `next_due_sql` returns the milliseconds until the next retry falls due (or null).
  Listener(const Endpoint& ep, std::string channel, std::string next_due_sql);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Store::wait_for_work. Throws when poll() itself fails (the caller reports it and backs
  // off); connection trouble is handled inside.
  void wait(Duration max);
  // Store::interrupt: wakes every wait now.
  void interrupt();
  // A statement just succeeded on another connection: a reconnect need not wait its backoff.
  void server_seen_up() { server_seen_up_ = true; }

 private:
  using SteadyClock = std::chrono::steady_clock;
  void listen_once(SteadyClock::time_point deadline);
  bool drain_notifications();
  int poll_until(SteadyClock::time_point deadline, int sock);

  const Endpoint& ep_;
  const std::string channel_;
  const std::string next_due_sql_;
  int wake_fd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;
  bool listening_ = false;        // guarded by mu_: a thread owns listen_
  std::uint64_t generation_ = 0;  // guarded by mu_
  std::uint64_t interrupts_ = 0;  // guarded by mu_
  std::atomic<bool> server_seen_up_{false};
  // Owned by the thread with listening_ set.
  ConnPtr listen_;
  Duration backoff_{0};
  SteadyClock::time_point next_connect_{};
};

}  // namespace outpost::pg
