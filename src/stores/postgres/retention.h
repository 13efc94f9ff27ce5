#pragma once
// Dead-letter retention (StoreOptions::dead_retention, docs/postgres.md "Dead-letter
// retention"): dead letters older than the retention (by dead_at, the server's clock) are
// deleted, at open and then at most every retention / 2 (capped at a minute) after a
// settlement commits, as the archive's maintenance runs (schema.h ArchiveMaintenance).

#include <atomic>
#include <chrono>
#include <string>

#include "outpost/event.h"
#include "stores/postgres/pg_conn.h"
#include "stores/postgres/schema.h"

namespace outpost::pg {

class DeadRetention {
 public:
  // `retention` 0: off (run() does nothing).
  DeadRetention(Pool& pool, const Endpoint& ep, const Names& n, Duration retention);
  // Deletes the expired dead letters when forced or due; returns how many. Thread-safe.
  std::size_t run(bool force);

 private:
  Pool& pool_;
  const Endpoint& ep_;
  const std::string sql_;
  const Duration retention_;
  std::atomic<std::chrono::steady_clock::rep> last_run_{0};
};

}  // namespace outpost::pg
