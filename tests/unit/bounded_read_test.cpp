// The store reads of /metrics and /readyz at the daemon's exit (apps/outpost/bounded_read.h): a
// read's thread may hold the last reference to its pipeline, so the host waits for the reads in
// flight (bounded) and a read that ends after that leaks what it holds instead of destroying
// it after main() returned. Before, nothing waited: the pipeline was destroyed on the read's
// detached thread whenever the store answered, beside the process's exit.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "bounded_read.h"

namespace {

using namespace std::chrono_literals;
using outpost::cli::BoundedReads;
using outpost::cli::ReadsInFlight;
using Clock = std::chrono::steady_clock;

// What a read holds (a pipeline): counts its destruction.
struct Held {
  explicit Held(std::atomic<int>& d) : destroyed(d) {}
  Held(const Held&) = delete;
  ~Held() { destroyed.fetch_add(1); }
  std::atomic<int>& destroyed;
};

// A ReadsInFlight of its own for each test, never destroyed (its read's thread may use it a
// moment longer) and reachable from a static, so that LeakSanitizer does not count it.
ReadsInFlight& kept_in_flight() {
  static auto* all = new std::vector<std::unique_ptr<ReadsInFlight>>;
  all->push_back(std::make_unique<ReadsInFlight>());
  return *all->back();
}

// One read of a store that answers when `answer` is set, holding a pipeline that counts its
// destruction in `destroyed`.
struct HeldRead {
  ReadsInFlight& in_flight = kept_in_flight();
  BoundedReads<int> reads{in_flight};
  std::atomic<int> destroyed{0};
  std::promise<void> answer;
  HeldRead() {
    auto answered = answer.get_future().share();
    reads.start("p", std::make_shared<Held>(destroyed), [answered] {
      answered.wait();
      return 7;
    });
  }
};

TEST(BoundedReadsAtExit, SettleWaitsForAReadThatEndsAndItsPipelineIsReleasedBeforeIt) {
  HeldRead read;
  EXPECT_EQ(read.destroyed.load(), 0);  // the read holds it
  std::thread store([&] {
    std::this_thread::sleep_for(200ms);
    read.answer.set_value();
  });
  // The store answers within the bound: settle returns once the pipeline has been released.
  EXPECT_EQ(read.in_flight.settle(Clock::now() + 30s), 0u);
  EXPECT_EQ(read.destroyed.load(), 1);
  store.join();
}

TEST(BoundedReadsAtExit, AReadEndingAfterSettleLeaksWhatItHoldsInsteadOfDestroyingIt) {
  HeldRead read;
  // A hung store: settle gives up at its deadline and says how many reads it left.
  EXPECT_EQ(read.in_flight.settle(Clock::now() + 100ms), 1u);
  read.answer.set_value();
  // The read completes (its result is there) but what it held is never destroyed.
  auto p = read.reads.start("p", nullptr, [] { return 1; });
  auto r = read.reads.finish(p, Clock::now() + 30s);
  EXPECT_TRUE(r.fresh);
  for (int i = 0; i < 50; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(read.destroyed.load(), 0);
}

}  // namespace
