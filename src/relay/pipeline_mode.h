#pragma once
// Decides, while a backlog lasts, whether the relay claims the next batch *ahead* (while the
// sink delivers the current one, on the delivery thread) or *after* the delivery (on the relay
// thread, no hand-off). Overlapping pays when the sink and the store wait on I/O (a remote
// broker, a webhook); on a machine whose cores are already busy it only adds hand-offs and
// contention. Which one holds is measured rather than guessed: a few batches each way, then the
// faster way for a longer stretch, then measure again.
//
// Without a backlog (a claim returns less than a full batch) the relay keeps up either way and
// claims after the delivery: fewer store calls at low rates.
//
// Not thread-safe: the relay thread only.

#include <chrono>
#include <cstddef>

namespace outpost::relay_detail {

class PipelineMode {
 public:
  static constexpr int kProbeBatches = 8;     // full batches measured each way
  static constexpr int kExploitBatches = 96;  // then this many the faster way

  // Whether to claim ahead for the next batch; `backlog`: the batch about to be delivered is full.
  bool claim_ahead(bool backlog) const {
    if (!backlog) return false;
    switch (phase_) {
      case Phase::probe_ahead:
        return true;
      case Phase::probe_after:
        return false;
      case Phase::exploit:
        return ahead_wins_;
    }
    return false;
  }

  // A batch of `events` was delivered; `full`: it was a full batch (a backlog).
  void batch_done(std::size_t events, bool full) {
    const auto now = Clock::now();
    if (!full) {  // no backlog: nothing to measure; start the epoch again
      restart();
      return;
    }
    if (!timing_) {  // an epoch is timed from the end of its first full batch
      timing_ = true;
      started_ = now;
      --left_;
      return;
    }
    events_ += events;
    if (--left_ > 0) return;
    const double seconds = std::chrono::duration<double>(now - started_).count();
    const double rate = seconds > 0 ? static_cast<double>(events_) / seconds : 0;
    switch (phase_) {
      case Phase::probe_ahead:
        ahead_rate_ = rate;
        phase_ = Phase::probe_after;
        break;
      case Phase::probe_after:
        // Ties go to claiming after: fewer threads busy for the same throughput.
        ahead_wins_ = ahead_rate_ > rate * 1.05;
        phase_ = Phase::exploit;
        break;
      case Phase::exploit:
        phase_ = Phase::probe_ahead;
        break;
    }
    left_ = phase_ == Phase::exploit ? kExploitBatches : kProbeBatches + 1;
    events_ = 0;
    timing_ = false;
  }

  // An ordered claim ahead, made with a backlog, found less than half a batch: most claimable
  // events belong to keys of the batch in flight (few keys for the batch size), which an
  // ordered claim ahead must skip. Claim after the delivery for a long stretch.
  void ahead_found_little() {
    phase_ = Phase::exploit;
    ahead_wins_ = false;
    left_ = kExploitBatches;
    events_ = 0;
    timing_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { probe_ahead, probe_after, exploit };

  void restart() {
    if (phase_ != Phase::exploit) left_ = kProbeBatches + 1;
    events_ = 0;
    timing_ = false;
  }

  Phase phase_ = Phase::probe_ahead;
  bool ahead_wins_ = true;
  // An epoch measures from the end of its first full batch to the end of its last, so it
  // spans kProbeBatches batches of the mode under test.
  int left_ = kProbeBatches + 1;
  bool timing_ = false;
  std::size_t events_ = 0;
  Clock::time_point started_{};
  double ahead_rate_ = 0;
};

}  // namespace outpost::relay_detail
