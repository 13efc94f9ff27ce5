#pragma once
// Reads of a store or log that /metrics and /readyz make at request time (StoreStats, a
// consumer's lag and dead count), held to a budget (docs/operations.md, "/metrics" and
// "/readyz"): a store that hangs must not hold the scrape or the probe of every pipeline for its
// full timeout_ms. Each read runs on a thread of its own; the request waits for it until a
// deadline and otherwise reports the pipeline's store as not answering. At most one read per
// pipeline is in flight: a later request waits for that one instead of starting another, so a
// hung store costs one waiting thread, not one per scrape.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline_view.h"

namespace outpost::cli {

// How long /metrics and /readyz wait for one pipeline's store (all are read at once).
inline constexpr std::chrono::milliseconds kReadBudget{1500};

// The reads in flight of every BoundedReads that counts on it. A read's thread holds what it
// reads (`keepalive`: the pipeline) and may hold the last reference to it; were that thread
// still running when main() returns, the pipeline would be destroyed beside the exit's own
// teardown. So the host waits for the reads at exit (settle, bounded: a hung store's read may
// never end), and a read that ends after that leaks what it holds instead of destroying it.
class ReadsInFlight {
 public:
  // Waits until every read has ended and released what it held, or `deadline`; then no read
  // destroys anything any more. Returns how many were still running (abandoned).
  std::size_t settle(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, deadline, [&] { return running_ == 0; });
    exiting_ = true;
    // One releasing its pipeline now finishes that (a destructor, not a store's reply).
    cv_.wait_until(lock, deadline + kReadBudget, [&] { return releasing_ == 0; });
    return running_;
  }
  void started() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++running_;
  }
  // A read has ended: destroys or (after settle) leaks `keepalive`.
  void ended(std::shared_ptr<const void> keepalive) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --running_;
      if (exiting_) {
        abandon(std::move(keepalive));
        return;
      }
      ++releasing_;
    }
    keepalive.reset();
    std::lock_guard<std::mutex> lock(mutex_);
    --releasing_;
    cv_.notify_all();
  }

 private:
  // Keeps what a read that ended after settle held, never destroyed (see above); reachable from
  // a static, so a leak checker (LeakSanitizer) does not count it.
  static void abandon(std::shared_ptr<const void> keepalive) {
    static auto* mutex = new std::mutex;
    static auto* kept = new std::vector<std::shared_ptr<const void>>;
    std::lock_guard<std::mutex> lock(*mutex);
    kept->push_back(std::move(keepalive));
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::size_t running_ = 0;
  std::size_t releasing_ = 0;
  bool exiting_ = false;
};

// The reads of /metrics and /readyz (never destroyed: threads may use it past main()).
inline ReadsInFlight& reads_in_flight() {
  static auto* reads = new ReadsInFlight;
  return *reads;
}

template <class T>
class BoundedReads {
  struct Slot {
    std::mutex mutex;
    std::condition_variable cv;
    bool in_flight = false;
    std::uint64_t done = 0;  // reads completed
    std::optional<T> value;  // of the last one completed
    std::string error;
  };

 public:
  struct Result {
    std::optional<T> value;  // the reading (the last one completed when !fresh); nullopt: failed
    std::string error;       // why it failed or is not fresh
    bool fresh = true;       // false: the read did not complete within the budget
  };
  class Pending {
    friend class BoundedReads;
    std::shared_ptr<Slot> slot_;
    std::uint64_t target_ = 0;
  };

  explicit BoundedReads(ReadsInFlight& in_flight = reads_in_flight()) : in_flight_(in_flight) {}

  // Starts reading `key` (a pipeline) with `read`, or joins the read in flight. `keepalive` holds
  // what `read` uses for as long as it runs (past the request, if the store hangs).
  Pending start(const std::string& key, std::shared_ptr<const void> keepalive,
                std::function<T()> read) {
    std::shared_ptr<Slot> slot;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& s = slots_[key];
      if (!s) s = std::make_shared<Slot>();
      slot = s;
    }
    Pending p;
    p.slot_ = slot;
    std::lock_guard<std::mutex> lock(slot->mutex);
    p.target_ = slot->done + 1;
    if (slot->in_flight) return p;
    slot->in_flight = true;
    in_flight_.started();
    try {
      std::thread([slot, keepalive = std::move(keepalive), read = std::move(read),
                   &in_flight = in_flight_]() mutable {
        std::optional<T> value;
        std::string error;
        try {
          value = read();
        } catch (const std::exception& e) {
          error = e.what();
        } catch (...) {  // nothing may leave a detached thread: that would end the daemon
          error = "an unknown error";
        }
        {
          std::lock_guard<std::mutex> lock(slot->mutex);
          slot->value = std::move(value);
          slot->error = std::move(error);
          slot->in_flight = false;
          ++slot->done;
          slot->cv.notify_all();
        }
        in_flight.ended(std::move(keepalive));
      }).detach();
    } catch (const std::exception& e) {  // no thread: report it as the reading's failure
      in_flight_.ended(nullptr);
      slot->in_flight = false;
      slot->value.reset();
      slot->error = std::string("cannot start a thread to read it: ") + e.what();
      ++slot->done;
    }
    return p;
  }

  // The read `p` started or joined, once done, or "no answer" at `deadline`.
  Result finish(const Pending& p, std::chrono::steady_clock::time_point deadline) {
    Slot& s = *p.slot_;
    std::unique_lock<std::mutex> lock(s.mutex);
    if (!s.cv.wait_until(lock, deadline, [&] { return s.done >= p.target_; }))
      return {s.value, "no answer within " + std::to_string(kReadBudget.count()) + " ms", false};
    return {s.value, s.error, true};
  }

 private:
  ReadsInFlight& in_flight_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Slot>> slots_;
};

// The reads /metrics and /readyz share, keyed by pipeline (never destroyed: a read of a hung
// store may outlive everything else).
inline BoundedReads<StoreStats>& store_reads() {
  static auto* reads = new BoundedReads<StoreStats>;
  return *reads;
}
inline BoundedReads<ConsumerStatus>& consumer_reads() {
  static auto* reads = new BoundedReads<ConsumerStatus>;
  return *reads;
}
// A consumer's status from a bounded read: one that did not complete in time gives the last
// reading's counters and names with lag and dead unknown and the reason as the store's error.
inline ConsumerStatus bounded_status(BoundedReads<ConsumerStatus>::Result r) {
  ConsumerStatus s = r.value.value_or(ConsumerStatus{});
  if (!r.fresh || !r.value) {
    s.lag.reset();
    s.dead.reset();
    s.store_error = r.error;
  }
  return s;
}
// A pipeline's key: its name and the object read (a reload that replaces it starts afresh).
inline std::string read_key(const PipelineView& p, const void* what) {
  return p.name + '\n' + std::to_string(reinterpret_cast<std::uintptr_t>(what));
}

}  // namespace outpost::cli
