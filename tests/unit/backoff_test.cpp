// Full-jitter exponential backoff: caps double from the base up to the max (no overflow for
// huge attempt numbers), delays stay within [0, cap] and are spread over the whole range.

#include <gtest/gtest.h>

#include "outpost/relay.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

TEST(BackoffTest, CapDoublesUpToTheMax) {
  EXPECT_EQ(backoff_cap(1, 100ms, 60s), 100ms);
  EXPECT_EQ(backoff_cap(2, 100ms, 60s), 200ms);
  EXPECT_EQ(backoff_cap(3, 100ms, 60s), 400ms);
  EXPECT_EQ(backoff_cap(10, 100ms, 60s), 51200ms);
  EXPECT_EQ(backoff_cap(11, 100ms, 60s), 60s);
  EXPECT_EQ(backoff_cap(63, 100ms, 60s), 60s);
  EXPECT_EQ(backoff_cap(1'000'000, 100ms, 60s), 60s);
  EXPECT_EQ(backoff_cap(0, 100ms, 60s), 100ms);  // attempts count from 1
  EXPECT_EQ(backoff_cap(1, 0ms, 60s), 0ms);
  EXPECT_EQ(backoff_cap(5, 100ms, 0ms), 0ms);
  EXPECT_EQ(backoff_cap(1, 500ms, 200ms), 200ms);  // the max wins over the base
}

TEST(BackoffTest, DelayIsWithinZeroAndTheCap) {
  for (int attempt = 1; attempt <= 20; ++attempt) {
    Duration cap = backoff_cap(attempt, 10ms, 5s);
    for (int i = 0; i < 500; ++i) {
      Duration d = backoff_delay(attempt, 10ms, 5s);
      EXPECT_GE(d, 0ms);
      ASSERT_LE(d, cap) << "attempt " << attempt;
    }
  }
  EXPECT_EQ(backoff_delay(3, 0ms, 5s), 0ms);
}

TEST(BackoffTest, DelaysAreSpreadUniformlyAndGrowWithTheAttempt) {
  // 20,000 uniform samples: the mean is cap/2 within well under 2% (sd of the mean ~0.2% of cap).
  double previous_mean = 0;
  for (int attempt = 1; attempt <= 6; ++attempt) {
    Duration cap = backoff_cap(attempt, 100ms, 60s);
    double sum = 0;
    std::int64_t lo = cap.count(), hi = 0;
    constexpr int kSamples = 20000;
    for (int i = 0; i < kSamples; ++i) {
      auto d = backoff_delay(attempt, 100ms, 60s).count();
      sum += static_cast<double>(d);
      lo = std::min(lo, d);
      hi = std::max(hi, d);
    }
    double mean = sum / kSamples;
    EXPECT_NEAR(mean, cap.count() / 2.0, cap.count() * 0.02) << "attempt " << attempt;
    EXPECT_LT(lo, cap.count() / 20) << "full jitter reaches down to ~0";
    EXPECT_GT(hi, cap.count() * 19 / 20) << "and up to the cap";
    EXPECT_GT(mean, previous_mean * 1.8);
    previous_mean = mean;
  }
}

}  // namespace
}  // namespace outpost
