#pragma once
// Renews the leases of the batches a relay holds (the one being delivered, and with pipelining
// the next one, claimed while the first is delivered) every lease/3 from a helper thread, so a
// slow sink does not lose its events to another relay. Arming and disarming only take an
// uncontended mutex (no wake-up per batch): the keeper wakes on its own every interval and
// renews only batches that have been armed for at least one interval.
//
// Thread safety: arm/disarm from the relay thread only, renew_until from the thread that
// delivers the batch; the keeper runs on its own thread.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "outpost/store.h"

namespace outpost::relay_detail {

class LeaseKeeper {
 public:
  // `report` is called for renew calls that throw (the keeper tries again next interval);
  // `renewed` after each renew that held the batch, with when the renew call started and the
  // lease it asked for (the relay moves the batch's lease deadline on), on the keeper's thread
  // while disarm() of that batch waits.
  using Renewed = std::function<void(
      const ClaimedBatch& batch, std::chrono::steady_clock::time_point started, Duration lease)>;
  LeaseKeeper(Store& store, Duration lease, std::function<void(const std::string&)> report,
              Renewed renewed = {});
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Starts keeping `batch` (which must stay alive and unchanged until disarm(batch)).
  void arm(const ClaimedBatch& batch);
  // Renews `batch` (armed) only until `until` (its delivery deadline) plus one interval, so
  // settling the batch right after the deadline still holds it; then its lease runs out and
  // another relay may claim the events of a sink that hangs past its deadline.
  void renew_until(const ClaimedBatch& batch, std::chrono::steady_clock::time_point until);
  // Stops keeping it; waits for a renew in progress. false: a renew reported the lease lost.
  // Disarming a batch that is not armed returns true.
  bool disarm(const ClaimedBatch& batch);

 private:
  using SteadyClock = std::chrono::steady_clock;
  struct Entry {
    const ClaimedBatch* batch;
    SteadyClock::time_point last_renew;
    SteadyClock::time_point until = SteadyClock::time_point::max();  // renew up to then
    bool lost = false;
  };
  void run();

  Store& store_;
  const Duration lease_;
  const Duration interval_;
  const std::function<void(const std::string&)> report_;
  const Renewed renewed_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;  // guarded by mu_: the batches being kept (at most a few)
  bool renewing_ = false;       // guarded by mu_
  bool quit_ = false;           // guarded by mu_
  std::thread thread_;          // started by the first arm()
};

}  // namespace outpost::relay_detail
