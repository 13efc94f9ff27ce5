// The relay's choice between claiming ahead and claiming after the delivery
// (src/relay/pipeline_mode.h): measured per epoch of full batches, faster way kept.

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "relay/pipeline_mode.h"

namespace outpost::unit {
namespace {

using relay_detail::PipelineMode;
using namespace std::chrono_literals;

// Runs one probe epoch (kProbeBatches + 1 full batches of 100 events), each batch taking `per`.
void epoch(PipelineMode& mode, std::chrono::milliseconds per) {
  for (int i = 0; i < PipelineMode::kProbeBatches + 1; ++i) {
    std::this_thread::sleep_for(per);
    mode.batch_done(100, true);
  }
}

TEST(PipelineModeTest, WithoutABacklogItClaimsAfterTheDelivery) {
  PipelineMode mode;
  EXPECT_FALSE(mode.claim_ahead(false));
  EXPECT_TRUE(mode.claim_ahead(true));  // first probe: ahead
}

TEST(PipelineModeTest, KeepsClaimingAheadWhenThatWasFaster) {
  PipelineMode mode;
  ASSERT_TRUE(mode.claim_ahead(true));
  epoch(mode, 1ms);  // ahead: fast
  ASSERT_FALSE(mode.claim_ahead(true));
  epoch(mode, 10ms);  // after: slow
  for (int i = 0; i < PipelineMode::kExploitBatches - 1; ++i) {
    ASSERT_TRUE(mode.claim_ahead(true)) << i;
    mode.batch_done(100, true);
  }
  mode.batch_done(100, true);
  EXPECT_TRUE(mode.claim_ahead(true));  // probing again, ahead first
  epoch(mode, 1ms);
  EXPECT_FALSE(mode.claim_ahead(true));  // then after
}

TEST(PipelineModeTest, ClaimsAfterWhenAheadWasNotFaster) {
  PipelineMode mode;
  epoch(mode, 10ms);  // ahead: slow
  epoch(mode, 1ms);   // after: fast
  for (int i = 0; i < PipelineMode::kExploitBatches - 1; ++i) {
    ASSERT_FALSE(mode.claim_ahead(true)) << i;
    mode.batch_done(100, true);
  }
}

TEST(PipelineModeTest, AnOrderedClaimAheadThatFoundLittleSwitchesToClaimingAfter) {
  PipelineMode mode;
  ASSERT_TRUE(mode.claim_ahead(true));
  mode.ahead_found_little();
  for (int i = 0; i < PipelineMode::kExploitBatches - 1; ++i) {
    ASSERT_FALSE(mode.claim_ahead(true)) << i;
    mode.batch_done(100, true);
  }
  mode.batch_done(100, true);
  EXPECT_TRUE(mode.claim_ahead(true));  // and tries again later
}

TEST(PipelineModeTest, BatchesThatAreNotFullRestartTheProbe) {
  PipelineMode mode;
  for (int i = 0; i < PipelineMode::kProbeBatches; ++i) mode.batch_done(100, true);
  mode.batch_done(10, false);  // the backlog ran out: the probe starts over
  EXPECT_TRUE(mode.claim_ahead(true));
  for (int i = 0; i < PipelineMode::kProbeBatches; ++i) mode.batch_done(100, true);
  EXPECT_TRUE(mode.claim_ahead(true));  // one batch short of a whole epoch
  mode.batch_done(100, true);
  EXPECT_FALSE(mode.claim_ahead(true));
}

}  // namespace
}  // namespace outpost::unit
