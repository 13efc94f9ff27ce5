// The Redis store's packed event body (src/stores/redis/redis_body.h): round trips and
// malformed input.

#include "stores/redis/redis_body.h"

#include <gtest/gtest.h>

namespace outpost::redis_store {
namespace {

TEST(RedisBody, RoundTripsEveryFieldIncludingBinaryAndSeparators) {
  Event e = Event::make("order.placed", std::string("{\"a\":1}\0:\r\n9:x", 15), "key:with:colons");
  e.headers = {{"trace", "a:b"}, {"empty", ""}, {"", "no name"}};
  e.occurred_at = TimePoint(std::chrono::microseconds(1'763'800'000'123'456));
  Event back;
  ASSERT_TRUE(unpack_body(pack_body(e), back));
  EXPECT_EQ(back.key, e.key);
  EXPECT_EQ(back.type, e.type);
  EXPECT_EQ(back.payload, e.payload);
  EXPECT_EQ(back.headers, e.headers);
  EXPECT_EQ(back.occurred_at, e.occurred_at);
}

TEST(RedisBody, EmptyKeyAndPayloadRoundTrip) {
  Event e = Event::make("t", "", "");
  Event back;
  ASSERT_TRUE(unpack_body(pack_body(e), back));
  EXPECT_EQ(back.key, "");
  EXPECT_EQ(back.payload, "");
  EXPECT_TRUE(back.headers.empty());
}

TEST(RedisBody, TheKeyIsTheFirstField) {
  // The Lua scripts read the key as "<len>:<key>" at the start of the body.
  EXPECT_EQ(pack_body(Event::make("t", "{}", "user-7")).rfind("6:user-7", 0), 0u);
}

TEST(RedisBody, MalformedBodiesAreRejected) {
  Event out;
  for (std::string bad : {"", "x", "3:ab", "1:k1:t", "1:k1:t2:1x0:", "1:k1:t1:11:z", "-1:k"})
    EXPECT_FALSE(unpack_body(bad, out)) << bad;
  EXPECT_TRUE(unpack_body("1:k1:t1:10:{}", out));
  EXPECT_EQ(out.payload, "{}");
}

}  // namespace
}  // namespace outpost::redis_store
