#pragma once
// A FIFO ticket lock: threads get it in arrival order. SQLite's own busy handler is not fair (a
// busy producer starves the relay), so the SQLite store's writers of one file take this first;
// the SQLite bench baseline takes the same lock, so the comparison is like for like.

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace outpost::core {

class FairLock {
 public:
  void lock() {
    std::unique_lock l(mu_);
    std::uint64_t ticket = next_++;
    cv_.wait(l, [&] { return serving_ == ticket; });
  }
  bool try_lock() {
    std::lock_guard l(mu_);
    if (next_ != serving_) return false;
    ++next_;
    return true;
  }
  void unlock() {
    {
      std::lock_guard l(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t next_ = 0;     // guarded by mu_
  std::uint64_t serving_ = 0;  // guarded by mu_
};

}  // namespace outpost::core
