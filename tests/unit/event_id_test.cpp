// UUIDv7 event ids: layout (version 7, RFC 9562 variant, Unix milliseconds), monotonic within a
// process also across threads and within one millisecond, canonical text form and parsing.

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

#include "core/id_origin.h"
#include "outpost/event.h"

namespace outpost {
namespace {

std::uint64_t unix_ms_of(const EventId& id) {
  std::uint64_t ms = 0;
  for (int i = 0; i < 6; ++i) ms = ms << 8 | id.bytes()[i];
  return ms;
}

TEST(EventIdTest, GeneratedIdsAreVersion7WithTheCurrentTime) {
  auto before =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count();
  EventId id = EventId::generate();
  auto after =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
          .count();
  EXPECT_EQ(id.bytes()[6] >> 4, 7);
  EXPECT_EQ(id.bytes()[8] & 0xC0, 0x80);
  EXPECT_FALSE(id.is_nil());
  // The counter may run a few ms ahead when many ids are made in one millisecond.
  EXPECT_GE(unix_ms_of(id), static_cast<std::uint64_t>(before));
  EXPECT_LE(unix_ms_of(id), static_cast<std::uint64_t>(after) + 1000);
  std::string s = id.str();
  ASSERT_EQ(s.size(), 36u);
  EXPECT_EQ(s[14], '7');
}

TEST(EventIdTest, MonotonicWithinAThreadEvenInOneMillisecond) {
  constexpr int kIds = 200'000;  // far more than 4096 per ms: exercises the counter overflow
  std::vector<EventId> ids;
  ids.reserve(kIds);
  for (int i = 0; i < kIds; ++i) ids.push_back(EventId::generate());
  for (int i = 1; i < kIds; ++i) ASSERT_LT(ids[i - 1], ids[i]) << "at " << i;
  // Text order matches byte order (time-ordered ids sort as strings too).
  for (int i = 1; i < 1000; ++i) ASSERT_LT(ids[i - 1].str(), ids[i].str());
}

TEST(EventIdTest, UniqueAndPerThreadOrderedAcrossThreads) {
  constexpr int kThreads = 4, kPerThread = 20'000;
  std::vector<std::vector<EventId>> per(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) per[t].push_back(EventId::generate());
    });
  for (auto& t : threads) t.join();
  std::set<EventId> all;
  for (auto& v : per) {
    EXPECT_TRUE(std::is_sorted(v.begin(), v.end()));
    all.insert(v.begin(), v.end());
  }
  EXPECT_EQ(all.size(), static_cast<std::size_t>(kThreads * kPerThread));
}

// Stores that check only the ids a caller brought (SQLite) rely on telling them apart.
TEST(EventIdTest, IdsGeneratedInThisProcessAreToldFromBroughtOnes) {
  for (int i = 0; i < 10'000; ++i) {
    EventId id = EventId::generate();
    ASSERT_TRUE(core::generated_in_this_process(id)) << id.str();
    ASSERT_TRUE(core::generated_in_this_process(*EventId::parse(id.str())));
    auto bytes = id.bytes();
    bytes[15] ^= static_cast<std::uint8_t>(1 + i % 255);  // one bit pattern off
    ASSERT_FALSE(core::generated_in_this_process(EventId::from_bytes(bytes.data()))) << i;
  }
  EXPECT_FALSE(core::generated_in_this_process(EventId()));
  EXPECT_FALSE(
      core::generated_in_this_process(*EventId::parse("0190a0b0-0000-7000-8000-000000000001")));
}

TEST(EventIdTest, ParseRoundTripsAndAcceptsEitherCase) {
  EventId id = EventId::generate();
  auto back = EventId::parse(id.str());
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, id);
  std::string upper = id.str();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(EventId::parse(upper));
  EXPECT_EQ(*EventId::parse(upper), id);
  // Any version is accepted on input (v4 here).
  auto v4 = EventId::parse("9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f21");
  ASSERT_TRUE(v4);
  EXPECT_EQ(v4->str(), "9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f21");
  EXPECT_TRUE(EventId::parse("00000000-0000-0000-0000-000000000000")->is_nil());
  EXPECT_TRUE(EventId().is_nil());
  EXPECT_EQ(EventId::from_bytes(id.bytes().data()), id);
}

TEST(EventIdTest, ParseRejectsMalformedText) {
  for (const char* bad :
       {"", "not-a-uuid", "9b2f6c1e4a8d4f3b9c2e7d1a0b5e3f21", "9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f2",
        "9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f211", "9b2f6c1e-4a8d-4f3b-9c2e_7d1a0b5e3f21",
        "9b2f6c1g-4a8d-4f3b-9c2e-7d1a0b5e3f21", "{9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f}",
        " 9b2f6c1e-4a8d-4f3b-9c2e-7d1a0b5e3f2"})
    EXPECT_FALSE(EventId::parse(bad)) << bad;
}

TEST(EventIdTest, Rfc3339RoundTripAndOffsets) {
  TimePoint t = now();
  auto back = parse_rfc3339(format_rfc3339(t));
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, t);
  auto a = parse_rfc3339("2026-11-22T02:42:48.123456Z");
  auto b = parse_rfc3339("2026-11-22T04:42:48.123456+02:00");
  auto c = parse_rfc3339("2026-11-22T02:42:48.123Z");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(format_rfc3339(*a), "2026-11-22T02:42:48.123456Z");
  EXPECT_EQ(format_rfc3339(*c), "2026-11-22T02:42:48.123000Z");
  for (const char* bad : {"2026-11-22", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
                          "2026-11-22T02:42:48", "2026-11-22T02:42:48.Z", "2026-11-22T02:42:48Zx",
                          // RFC 3339 offsets: time-numoffset is time-hour ":" time-minute,
                          // -23:59..+23:59 (before, +25:00 was taken as 25 hours)
                          "2026-11-27T09:00:00+25:00", "2026-11-27T09:00:00-24:00",
                          "2026-11-27T09:00:00+01:60", "2026-11-27T09:00:00+99:99"})
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  auto edge = parse_rfc3339("2026-11-27T23:59:00+23:59");
  ASSERT_TRUE(edge);
  EXPECT_EQ(format_rfc3339(*edge), "2026-11-27T00:00:00.000000Z");
}

}  // namespace
}  // namespace outpost
