#pragma once
// Renews the lease of the batch being delivered every lease/3 from a helper thread, so a slow
// sink does not lose its events to another relay. Arming and disarming only take an uncontended
// mutex (no wake-up per batch): the keeper wakes on its own every interval and renews only when a
// batch has been armed for at least one interval.
//
// Thread safety: arm/disarm from the relay thread only; the keeper runs on its own thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "outpost/store.h"

namespace outpost::relay_detail {

class LeaseKeeper {
 public:
  // `report` is called for renew calls that throw (the keeper tries again next interval).
  LeaseKeeper(Store& store, Duration lease, std::function<void(const std::string&)> report);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts keeping `batch` (which must stay alive until disarm()).
  void arm(const ClaimedBatch& batch);
  // Stops keeping it; waits for a renew in progress. false: a renew reported the lease lost.
  bool disarm();

  std::uint64_t renewals() const { return renewals_.load(std::memory_order_relaxed); }

 private:
  using SteadyClock = std::chrono::steady_clock;
  void run();

  Store& store_;
  const Duration lease_;
  const Duration interval_;
  const std::function<void(const std::string&)> report_;

  std::mutex mu_;
  std::condition_variable cv_;
  const ClaimedBatch* batch_ = nullptr;  // guarded by mu_; null: nothing to keep
  std::uint64_t generation_ = 0;         // guarded by mu_; bumped by every arm()
  SteadyClock::time_point last_renew_;   // guarded by mu_
  bool lost_ = false;                    // guarded by mu_
  bool renewing_ = false;                // guarded by mu_
  bool quit_ = false;                    // guarded by mu_
  std::atomic<std::uint64_t> renewals_{0};
  std::thread thread_;  // started by the first arm()
};

}  // namespace outpost::relay_detail
