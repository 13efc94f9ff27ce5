#pragma once
// Who may write a SQLite file when. Inside a process every store object on one file shares a
// FileShared: a FIFO write lock (SQLite's busy handler is not fair: a busy producer starves the
// relay) and the condition variable its in-process wake-ups use. Across processes, BEGIN
// IMMEDIATE is retried with jittered backoff until busy_timeout (begin_immediate).

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "core/fair_lock.h"
#include "outpost/error.h"
#include "stores/sqlite/sqlite_conn.h"

namespace outpost::sqlite_store {

using SteadyClock = std::chrono::steady_clock;

// Shared by every store object of this process on one file.
struct FileShared {
  core::FairLock write_lock;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t generation = 0;  // guarded by mu: bumped after each in-process commit of work
};

// The FileShared of a file (by canonical path), created on first use, dropped with its last user.
std::shared_ptr<FileShared> shared_for(const std::string& canonical_path);
// The absolute, normalised path (the path itself when that fails).
std::string canonical(const std::string& path);

// Sleeps a jittered 0.1 ms .. 10 ms, growing with `attempt`.
void backoff(int attempt);

// Runs fn, retrying TimeoutError (SQLITE_BUSY: another process holds a lock) until `timeout`.
template <class F>
void with_busy_retry(std::chrono::milliseconds timeout, F&& fn) {
  auto deadline = SteadyClock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    try {
      fn();
      return;
    } catch (const TimeoutError&) {
      if (SteadyClock::now() >= deadline) throw;
      backoff(attempt);
    }
  }
}

// BEGIN IMMEDIATE, retried while another process holds the file's write lock, up to `timeout`;
// then a TimeoutError naming the file.
void begin_immediate(Conn& c, const std::string& file, std::chrono::milliseconds timeout);

}  // namespace outpost::sqlite_store
