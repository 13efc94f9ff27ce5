// The durability warning of the Redis store and the redis-stream:// sink (docs/redis.md,
// "Durability"): one line on stderr when the server's maxmemory-policy is not noeviction or
// persistence is off, nothing when both are right or CONFIG is refused (managed Redis). Each
// case runs a private redis-server started with the settings under test.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "outpost/sinks/redis_stream.h"
#include "outpost/stores/redis.h"
#include "server_process.h"
#include "store_cases.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;

struct PrivateRedis {
  std::uint16_t port = testing::free_port();
  std::string dir = testing::temp_dir() + "/" + testing::unique_name("redis_durability_");
  testing::ServerProcess proc;
  explicit PrivateRedis(std::vector<std::string> settings) {
    std::filesystem::create_directories(dir);
    std::vector<std::string> argv{
        "redis-server", "--port", std::to_string(port), "--bind", "127.0.0.1", "--dir", dir};
    argv.insert(argv.end(), settings.begin(), settings.end());
    proc = testing::ServerProcess(argv, dir + "/log");
    EXPECT_TRUE(testing::wait_for_port(port, 10s));
    // Ready once PING answers (LOADING until then).
    for (auto deadline = std::chrono::steady_clock::now() + 10s;
         std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(20ms)) {
      redisContext* c = redisConnect("127.0.0.1", port);
      auto* r = c && !c->err ? static_cast<redisReply*>(redisCommand(c, "PING")) : nullptr;
      const bool up = r && r->type == REDIS_REPLY_STATUS;
      if (r) freeReplyObject(r);
      if (c) redisFree(c);
      if (up) return;
    }
  }
  std::string hostport() const { return "127.0.0.1:" + std::to_string(port); }
};

// What the store prints at its first claim and the sink at its first delivery.
std::string store_warning(const PrivateRedis& r) {
  auto store = open_redis_store("redis://" + r.hostport() + "/0?prefix=durability", {});
  ::testing::internal::CaptureStderr();
  store->claim(10, 30s);
  store->claim(10, 30s);  // once only
  return ::testing::internal::GetCapturedStderr();
}
std::string sink_warning(const PrivateRedis& r) {
  auto sink = open_redis_stream_sink("redis-stream://" + r.hostport() + "/outpost.durability", {});
  StoredEvent e;
  static_cast<Event&>(e) = Event::make("t", "{}", "k");
  e.seq = 1;
  ::testing::internal::CaptureStderr();
  auto results = sink->deliver(std::vector<StoredEvent>{e});
  sink->deliver(std::vector<StoredEvent>{e});
  std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(results.size(), 1u);
  EXPECT_TRUE(results.at(0).ok()) << "the warning must not fail the delivery";
  return out;
}

std::size_t lines(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

TEST(RedisDurabilityWarning, EvictionPolicyAndNoPersistenceAreOneWarningLine) {
  PrivateRedis r({"--save", "", "--appendonly", "no", "--maxmemory-policy", "allkeys-lru"});
  for (const std::string& out : {store_warning(r), sink_warning(r)}) {
    EXPECT_EQ(lines(out), 1u) << out;
    EXPECT_NE(out.find("outpost: warning:"), std::string::npos) << out;
    EXPECT_NE(out.find("maxmemory-policy is allkeys-lru"), std::string::npos) << out;
    EXPECT_NE(out.find("persistence is off"), std::string::npos) << out;
    EXPECT_NE(out.find(r.hostport()), std::string::npos) << "names the server: " << out;
  }
}

TEST(RedisDurabilityWarning, PersistenceOffAloneIsNamed) {
  PrivateRedis r({"--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction"});
  for (const std::string& out : {store_warning(r), sink_warning(r)}) {
    EXPECT_EQ(lines(out), 1u) << out;
    EXPECT_NE(out.find("persistence is off"), std::string::npos) << out;
    EXPECT_EQ(out.find("maxmemory-policy"), std::string::npos) << out;
  }
}

TEST(RedisDurabilityWarning, NoevictionWithAofOrSavePointsSaysNothing) {
  PrivateRedis aof({"--save", "", "--appendonly", "yes", "--maxmemory-policy", "noeviction"});
  EXPECT_EQ(store_warning(aof), "");
  EXPECT_EQ(sink_warning(aof), "");
  PrivateRedis rdb({"--save", "3600 1", "--appendonly", "no", "--maxmemory-policy", "noeviction"});
  EXPECT_EQ(store_warning(rdb), "");
  EXPECT_EQ(sink_warning(rdb), "");
}

// Managed Redis often renames or disables CONFIG: the settings cannot be read, nothing is said,
// and the store and sink work as usual.
TEST(RedisDurabilityWarning, ConfigDisabledSaysNothingAndWorks) {
  PrivateRedis r({"--save", "", "--appendonly", "no", "--rename-command", "CONFIG", ""});
  EXPECT_EQ(store_warning(r), "");
  EXPECT_EQ(sink_warning(r), "");
}

}  // namespace
}  // namespace outpost
