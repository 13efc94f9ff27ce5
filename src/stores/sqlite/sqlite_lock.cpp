#include "stores/sqlite/sqlite_lock.h"

#include <filesystem>
#include <map>

namespace outpost::sqlite_store {

std::shared_ptr<FileShared> shared_for(const std::string& canonical_path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<FileShared>> registry;
  std::lock_guard l(mu);
  for (auto it = registry.begin(); it != registry.end();)
    it = it->second.expired() ? registry.erase(it) : std::next(it);
  auto& slot = registry[canonical_path];
  auto shared = slot.lock();
  if (!shared) {
    shared = std::make_shared<FileShared>();
    slot = shared;
  }
  return shared;
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? path : p.string();
}

void backoff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  int cap = std::min(1 << std::min(attempt, 4), 10);  // 1, 2, 4, 8, 10 ms
  std::this_thread::sleep_for(std::chrono::microseconds(100 + rng() % (cap * 1000)));
}

void begin_immediate(Conn& c, const std::string& file, std::chrono::milliseconds timeout) {
  auto deadline = SteadyClock::now() + timeout;
  for (int attempt = 0;; ++attempt) {
    int rc = sqlite3_exec(c.db(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    int primary = rc & 0xff;
    if (primary != SQLITE_BUSY && primary != SQLITE_LOCKED)
      throw_sqlite(c.db(), rc, "could not be written", file);
    if (SteadyClock::now() >= deadline)
      throw TimeoutError("sqlite", "database file '" + file +
                                       "' stayed locked by another process for " +
                                       std::to_string(timeout.count()) + " ms");
    backoff(attempt);
  }
}

}  // namespace outpost::sqlite_store
