#include "lease_keeper.h"

#include <algorithm>

namespace outpost::relay_detail {

LeaseKeeper::LeaseKeeper(Store& store, Duration lease,
                         std::function<void(const std::string&)> report)
    : store_(store),
      lease_(lease),
      interval_(std::max(Duration{1}, lease / 3)),
      report_(std::move(report)) {}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LeaseKeeper::arm(const ClaimedBatch& batch) {
  std::lock_guard lock(mu_);
  batch_ = &batch;
  ++generation_;
  last_renew_ = SteadyClock::now();
  lost_ = false;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

bool LeaseKeeper::disarm() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !renewing_; });
  batch_ = nullptr;
  return !lost_;
}

void LeaseKeeper::run() {
  std::unique_lock lock(mu_);
  while (!quit_) {
    if (!batch_ || lost_) {
      cv_.wait_for(lock, interval_);
      continue;
    }
    auto due = last_renew_ + interval_;
    if (SteadyClock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    const ClaimedBatch* batch = batch_;
    std::uint64_t generation = generation_;
    auto started = SteadyClock::now();
    renewing_ = true;
    lock.unlock();
    bool held = true;
    std::string error;
    try {
      held = store_.renew(*batch, lease_);
    } catch (const std::exception& ex) {
      error = ex.what();
    } catch (...) {
      error = "unknown exception";
    }
    if (!error.empty() && report_) {
      try {
        report_("lease renewal failed (will retry): " + error);
      } catch (...) {
      }
    }
    lock.lock();
    renewing_ = false;
    if (generation == generation_) {
      // A throwing renew is retried one interval later: two more chances before the lease ends.
      last_renew_ = started;
      if (error.empty()) renewals_.fetch_add(1, std::memory_order_relaxed);
      if (!held) lost_ = true;
    }
    cv_.notify_all();
  }
}

}  // namespace outpost::relay_detail
