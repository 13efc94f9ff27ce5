// The consumer's pure decisions (src/consume/decisions.h) without a database: which messages of
// an attempt the inbox is asked about, which are parked at once, skipped or handled; how the
// handler's verdicts become attempts, dead letters, retries and inbox ids to forget; and the
// pause of a destination that is down (docs/consumers.md, "Failure classes").

#include "consume/decisions.h"

#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

namespace outpost::consume {
namespace {

using namespace std::chrono_literals;

Message event(std::string key, bool with_id = true) {
  Message m;
  m.event.key = std::move(key);
  if (with_id) m.event.id = EventId::generate();
  m.position = "p";
  return m;
}

Message torn(std::string why) {
  Message m;
  m.parse_error = std::move(why);
  return m;
}

std::vector<std::size_t> all(const std::vector<Message>& msgs) {
  std::vector<std::size_t> idx(msgs.size());
  std::iota(idx.begin(), idx.end(), 0);
  return idx;
}

TEST(ConsumerDecisions, TheInboxIsAskedOnlyAboutEventsWithAnId) {
  std::vector<Message> msgs{event("a"), torn("not JSON"), event("b", false), event("c")};
  auto ids = inbox_ids(msgs, all(msgs));
  ASSERT_EQ(ids.index, (std::vector<std::size_t>{0, 3}));
  EXPECT_EQ(ids.ids[0], msgs[0].event.id);
  EXPECT_EQ(ids.ids[1], msgs[3].event.id);
  // Only the messages of this attempt.
  std::vector<std::size_t> some{3};
  EXPECT_EQ(inbox_ids(msgs, some).index, (std::vector<std::size_t>{3}));
}

TEST(ConsumerDecisions, SortOutParksTornAndHeldMessagesSkipsDuplicatesAndKeepsLogOrder) {
  // 0 a, 1 torn, 2 b (duplicate), 3 x (held: parked earlier), 4 x, 5 c, 6 a
  std::vector<Message> msgs{
      event("a"), torn("not an outpost event"), event("b"), event("x"), event("x"), event("c"),
      event("a")};
  auto idx = all(msgs);
  auto ids = inbox_ids(msgs, idx);
  std::vector<bool> fresh(ids.ids.size(), true);
  fresh[1] = false;  // ids.index[1] == 2
  ASSERT_EQ(ids.index[1], 2u);
  std::set<std::string> held{"x"};
  auto s = sort_out(msgs, idx, ids, fresh, true, held);
  ASSERT_EQ(s.park.size(), 3u);
  EXPECT_EQ(s.park[0], (std::pair<std::size_t, std::string>{1, "not an outpost event"}));
  EXPECT_EQ(s.park[1].first, 3u);
  EXPECT_EQ(s.park[1].second, "held behind an earlier parked message of key 'x'");
  EXPECT_EQ(s.park[2].first, 4u);
  EXPECT_EQ(s.duplicates, (std::set<std::size_t>{2}));
  EXPECT_EQ(s.work, (std::vector<std::size_t>{0, 5, 6}));

  // Unordered: a parked key holds nothing back.
  std::set<std::string> none{"x"};
  auto u = sort_out(msgs, idx, ids, fresh, false, none);
  EXPECT_EQ(u.park.size(), 1u);
  EXPECT_EQ(u.work, (std::vector<std::size_t>{0, 3, 4, 5, 6}));
}

TEST(ConsumerDecisions, AMessageParkedInABatchHoldsLaterMessagesOfItsKeyInThatBatch) {
  Message bad = torn("torn");
  bad.event.key = "k";
  std::vector<Message> msgs{bad, event("k"), event("other")};
  auto idx = all(msgs);
  auto ids = inbox_ids(msgs, idx);
  std::set<std::string> held;
  auto s = sort_out(msgs, idx, ids, std::vector<bool>(ids.ids.size(), true), true, held);
  ASSERT_EQ(s.park.size(), 2u);
  EXPECT_EQ(s.park[1].first, 1u);
  EXPECT_EQ(s.work, (std::vector<std::size_t>{2}));
  EXPECT_TRUE(held.count("k"));
}

TEST(ConsumerDecisions, FailuresCountAttemptsAndParkAtMaxAttemptsUnavailableCountsNone) {
  std::vector<Message> msgs{event("a"), event("b"), event("c"), event("d"), event("e")};
  std::vector<std::size_t> work{0, 1, 3, 4};  // msgs[2] was parked or a duplicate
  std::vector<int> attempts{0, 2, 0, 0, 0};
  // Indexes into `work`: 1 (msgs[1]) fails for the third time, 2 (msgs[3]) twice in the list,
  // 3 (msgs[4]) is both unavailable and failed (unavailable wins), 9 is out of range.
  std::vector<std::pair<std::size_t, std::string>> failures{
      {2, "refused z"}, {1, "refused"}, {2, "refused a"}, {3, "refused"}, {9, "stray"}};
  std::vector<ConsumerBatch::Unavailable> down{{3, "connection refused", 2s}, {3, "again", 5s}};
  auto j = judge(msgs, work, failures, down, attempts, 3);
  EXPECT_EQ(attempts, (std::vector<int>{0, 3, 0, 1, 0}));
  ASSERT_EQ(j.failed.size(), 2u);
  EXPECT_EQ(j.failed[0].index, 1u);
  EXPECT_EQ(j.failed[0].attempt, 3);
  EXPECT_EQ(j.failed[1].index, 3u);
  EXPECT_EQ(j.failed[1].why, "refused a");  // one verdict per message
  EXPECT_EQ(j.park, (std::vector<std::pair<std::size_t, std::string>>{{1, "refused"}}));
  EXPECT_EQ(j.retry, (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(j.forget, (std::vector<EventId>{msgs[3].event.id, msgs[4].event.id}));
  EXPECT_EQ(j.down, (std::set<std::size_t>{4}));
  EXPECT_EQ(j.why, "connection refused");
  EXPECT_EQ(j.retry_after, Duration(2s));  // the one counted (the repeat is ignored)
  EXPECT_TRUE(j.answered);
  EXPECT_EQ(j.handled, 1u);  // msgs[0]
}

TEST(ConsumerDecisions, AllUnavailableIsNoAnswerAndMessagesWithoutIdHaveNothingToForget) {
  std::vector<Message> msgs{event("a", false), event("b")};
  std::vector<std::size_t> work{0, 1};
  std::vector<int> attempts{0, 0};
  auto j = judge(msgs, work, {}, {{0, "down", 0s}, {1, "down", 1500ms}}, attempts, 3);
  EXPECT_FALSE(j.answered);
  EXPECT_EQ(j.handled, 0u);
  EXPECT_EQ(j.retry, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(j.forget, (std::vector<EventId>{msgs[1].event.id}));
  EXPECT_EQ(j.retry_after, Duration(1500ms));
  EXPECT_EQ(attempts, (std::vector<int>{0, 0}));

  auto ok = judge(msgs, work, {}, {}, attempts, 3);
  EXPECT_TRUE(ok.answered);
  EXPECT_EQ(ok.handled, 2u);
  EXPECT_TRUE(ok.retry.empty());
}

// The probe wait is the step plus up to 10 % jitter.
void expect_wait(const DestinationPause& p, Duration step) {
  EXPECT_GE(p.wait(), step);
  EXPECT_LE(p.wait(), step + step / 10);
}

TEST(ConsumerDecisions, ThePauseBeginsOnceDoublesItsProbeWaitUpToTheCapAndEndsOnAnAnswer) {
  DestinationPause p(3'000ms);
  EXPECT_FALSE(p.down());
  EXPECT_FALSE(p.answered()) << "no pause to end";
  auto began = p.unavailable("http: connection refused", 0ms);
  ASSERT_TRUE(began);
  EXPECT_NE(began->find("destination down since "), std::string::npos) << *began;
  EXPECT_NE(began->find(": http: connection refused; its messages wait (no attempt counted, "
                        "nothing parked); probing with one message in 500 ms, then backing off "
                        "to every 3000 ms"),
            std::string::npos)
      << *began;
  EXPECT_TRUE(p.down());
  EXPECT_EQ(p.why(), "http: connection refused");
  expect_wait(p, 500ms);
  EXPECT_FALSE(p.unavailable("still", 0ms)) << "said once per outage";
  expect_wait(p, 1'000ms);
  EXPECT_FALSE(p.unavailable("still", 0ms));
  expect_wait(p, 2'000ms);
  EXPECT_FALSE(p.unavailable("still", 0ms));
  expect_wait(p, 3'000ms);
  EXPECT_EQ(p.why(), "http: connection refused") << "the outage's first reason";
  p.count_probe();
  p.count_probe();
  auto ended = p.answered();
  ASSERT_TRUE(ended);
  EXPECT_NE(ended->find("destination back after "), std::string::npos) << *ended;
  EXPECT_NE(ended->find(" s (2 probes); consuming again"), std::string::npos) << *ended;
  EXPECT_FALSE(p.down());
  EXPECT_FALSE(p.answered());
  // A new outage starts again at the first step.
  ASSERT_TRUE(p.unavailable("again", 0ms));
  expect_wait(p, 500ms);
}

TEST(ConsumerDecisions, RetryAfterIsHonouredWithinTheCapAndTheCapStaysWithin10msAnd30s) {
  DestinationPause p(60'000ms);
  EXPECT_EQ(p.probe_cap(), Duration(30'000ms));
  ASSERT_TRUE(p.unavailable("503", 7'000ms));
  expect_wait(p, 7'000ms);
  EXPECT_FALSE(p.unavailable("503", 120'000ms));
  expect_wait(p, 30'000ms);

  DestinationPause tiny(1ms);
  EXPECT_EQ(tiny.probe_cap(), Duration(10ms));
  ASSERT_TRUE(tiny.unavailable("down", 0ms));
  expect_wait(tiny, 10ms);
}

}  // namespace
}  // namespace outpost::consume
