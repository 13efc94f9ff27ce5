#include "lease_keeper.h"

#include <algorithm>

#include "guarded.h"

namespace outpost::relay_detail {

LeaseKeeper::LeaseKeeper(Store& store, Duration lease,
                         std::function<void(const std::string&)> report, Renewed renewed)
    : store_(store),
      lease_(lease),
      interval_(std::max(Duration{1}, lease / 3)),
      report_(std::move(report)),
      renewed_(std::move(renewed)) {}

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
  entries_.push_back(Entry{&batch, SteadyClock::now()});
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
}

void LeaseKeeper::renew_until(const ClaimedBatch& batch, SteadyClock::time_point until) {
  std::lock_guard lock(mu_);
  for (auto& e : entries_)
    if (e.batch == &batch) e.until = until;
}

bool LeaseKeeper::disarm(const ClaimedBatch& batch) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !renewing_; });
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.batch == &batch; });
  if (it == entries_.end()) return true;
  bool held = !it->lost;
  entries_.erase(it);
  return held;
}

void LeaseKeeper::run() {
  std::unique_lock lock(mu_);
  while (!quit_) {
    // The entry that is due first (lost ones, and those past their deadline, are no longer
    // renewed).
    const auto now = SteadyClock::now();
    Entry* next = nullptr;
    for (auto& e : entries_)
      if (!e.lost && now < e.until && (!next || e.last_renew < next->last_renew)) next = &e;
    if (!next) {
      cv_.wait_for(lock, interval_);
      continue;
    }
    auto due = next->last_renew + interval_;
    if (SteadyClock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    const ClaimedBatch* batch = next->batch;
    auto started = SteadyClock::now();
    // Up to the deadline plus one interval at most (no lease past what renew_until allows).
    Duration lease = lease_;
    if (next->until != SteadyClock::time_point::max())
      lease =
          std::min(lease, std::chrono::duration_cast<Duration>(next->until - started) + interval_);
    renewing_ = true;
    lock.unlock();
    bool held = true;
    auto error = failure_of([&] { held = store_.renew(*batch, lease); });
    if (error && report_)  // report_ must not throw; if it does, the keeper goes on regardless
      failure_of([&] { report_("lease renewal failed (will retry): " + error->text); });
    if (!error && held && renewed_) failure_of([&] { renewed_(*batch, started, lease); });
    lock.lock();
    renewing_ = false;
    // disarm() waits for renewing_ to clear, so the entry is still there.
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.batch == batch; });
    if (it != entries_.end()) {
      // A throwing renew is retried one interval later: two more chances before the lease ends.
      it->last_renew = started;
      if (!held) it->lost = true;
    }
    cv_.notify_all();
  }
}

}  // namespace outpost::relay_detail
