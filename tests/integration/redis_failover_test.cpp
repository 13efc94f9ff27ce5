// Redis topology changes under the store. Cluster failover: a private 6-node cluster (3 masters,
// 3 replicas) whose master for the store's prefix is failed over to its replica while a relay
// runs; the relay must find the new master by itself (MOVED from the old one, now a replica) and
// deliver every event. Slot migration: ASK redirects on a private 3-master cluster, through the
// client itself (the store's scripts cannot run while their slot migrates: docs/redis.md).
// Sentinel failover: SENTINEL FAILOVER of the group started by tests/servers/redis_sentinel.sh
// (OUTPOST_TEST_REDIS_SENTINEL_URL) while a relay runs; the store asks the sentinels again.
//
// The failover is the graceful kind (CLUSTER FAILOVER on the replica: it first catches up with
// its master), which is what a rolling upgrade or a planned switch does; an unplanned one
// (master killed) can lose the writes the replica had not received yet: Redis replication is
// asynchronous (docs/redis.md, durability).

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/url.h"
#include "outpost/error.h"
#include "outpost/relay.h"
#include "outpost/stores/redis.h"
#include "server_process.h"
#include "store_cases.h"
#include "stores/redis/redis_client.h"

namespace outpost {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
using testing::free_port;
using testing::ServerProcess;
using testing::wait_for_port;

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Ctx = std::unique_ptr<redisContext, CtxFree>;
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

Reply command(std::uint16_t port, const std::string& cmd) {
  Ctx c(redisConnect("127.0.0.1", port));
  if (!c || c->err) return nullptr;
  return Reply(static_cast<redisReply*>(redisCommand(c.get(), cmd.c_str())));
}

std::string text_of_element(const Reply& r, std::size_t i) {
  const redisReply* e = r->element[i];
  return std::string(e->str, e->len);
}

std::string text_of(const Reply& r) {
  if (!r) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR)
    return std::string(r->str, r->len);
  return {};
}

bool port_is_free(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  auto deadline = SteadyClock::now() + timeout;
  while (!done()) {
    if (SteadyClock::now() >= deadline) return done();
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// One node of CLUSTER NODES.
struct Node {
  std::string id;
  std::uint16_t port = 0;
  bool master = false;
  std::string master_id;  // for replicas
  std::vector<std::pair<int, int>> slots;
};

std::vector<Node> cluster_nodes(std::uint16_t port) {
  std::vector<Node> nodes;
  std::istringstream in(text_of(command(port, "CLUSTER NODES")));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string id, addr, flags, master, ping, pong, epoch, link;
    if (!(f >> id >> addr >> flags >> master >> ping >> pong >> epoch >> link)) continue;
    Node n;
    n.id = id;
    auto colon = addr.find(':');
    auto at = addr.find('@');
    n.port = static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1, at - colon - 1)));
    n.master = flags.find("master") != std::string::npos;
    n.master_id = master;
    std::string range;
    while (f >> range) {
      if (range.front() == '[') continue;  // slot being migrated
      auto dash = range.find('-');
      int lo = std::stoi(range.substr(0, dash));
      int hi = dash == std::string::npos ? lo : std::stoi(range.substr(dash + 1));
      n.slots.emplace_back(lo, hi);
    }
    nodes.push_back(n);
  }
  return nodes;
}

// A private cluster of `masters` masters with `replicas` replicas each.
class PrivateCluster {
 public:
  explicit PrivateCluster(int masters, int replicas = 1)
      : dir_(testing::temp_dir() + "/" + testing::unique_name("cl_")), replicas_(replicas) {
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < masters * (1 + replicas); ++i) {
      std::uint16_t p = 0;
      // The cluster bus listens on port + 10000. A port is free until its server binds it, so
      // free_port() may hand out one picked for an earlier node (or its bus) again: skip those.
      auto picked = [&](int q) {
        return std::find(ports_.begin(), ports_.end(), q) != ports_.end();
      };
      do {
        p = free_port();
      } while (p > 55535 || !port_is_free(static_cast<std::uint16_t>(p + 10000)) || picked(p) ||
               picked(p - 10000) || picked(p + 10000));
      ports_.push_back(p);
      const std::string node_dir = dir_ + "/" + std::to_string(p);
      std::filesystem::create_directories(node_dir);
      servers_.emplace_back(
          std::vector<std::string>{"redis-server", "--port", std::to_string(p), "--bind",
                                   "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file",
                                   node_dir + "/nodes.conf", "--cluster-node-timeout", "2000",
                                   "--save", "", "--appendonly", "no", "--dir", node_dir},
          node_dir + "/log");
    }
    for (auto p : ports_)
      if (!wait_for_port(p, 10s)) throw std::runtime_error("redis-server did not start");
    std::string create = "redis-cli --cluster create";
    for (auto p : ports_) create += " 127.0.0.1:" + std::to_string(p);
    create += " --cluster-replicas " + std::to_string(replicas) + " --cluster-yes > " + dir_ +
              "/create.log 2>&1";
    if (std::system(create.c_str()) != 0)
      throw std::runtime_error("redis-cli --cluster create failed: see " + dir_ + "/create.log");
    if (!eventually([&] { return healthy(); }, 30s))
      throw std::runtime_error("cluster did not become ok");
  }

  // Every node says cluster_state:ok and sees every master's replica.
  bool healthy() const {
    for (auto p : ports_) {
      if (text_of(command(p, "CLUSTER INFO")).find("cluster_state:ok") == std::string::npos)
        return false;
      int replicas = 0;
      for (const auto& n : cluster_nodes(p))
        if (!n.master) ++replicas;
      if (replicas * (1 + replicas_) != static_cast<int>(ports_.size()) * replicas_) return false;
    }
    return true;
  }

  std::string url(const std::string& prefix) const {
    std::string u = "redis://";
    for (std::size_t i = 0; i < 3; ++i)
      u += (i ? "," : "") + std::string("127.0.0.1:") + std::to_string(ports_[i]);
    return u + "/0?prefix=" + prefix;
  }

  std::uint16_t any_port() const { return ports_.front(); }

 private:
  std::string dir_;
  int replicas_;
  std::vector<std::uint16_t> ports_;
  std::vector<ServerProcess> servers_;
};

class CollectingSink final : public Sink {
 public:
  std::string_view name() const override { return "collect"; }
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::lock_guard lock(mu_);
    for (const auto& e : events) seen_.insert(e.id.str());
    return std::vector<DeliveryResult>(events.size(), DeliveryResult::delivered());
  }
  std::size_t distinct() {
    std::lock_guard lock(mu_);
    return seen_.size();
  }
  std::set<std::string> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
};

std::vector<Event> make_events(int n, int from) {
  std::vector<Event> out;
  for (int i = from; i < from + n; ++i)
    out.push_back(
        Event::make("t", "{\"i\":" + std::to_string(i) + "}", "k" + std::to_string(i % 7)));
  return out;
}

TEST(RedisClusterFailover, RelayFollowsTheNewMasterAfterAFailoverAndLosesNothing) {
  if (std::system("command -v redis-server >/dev/null && command -v redis-cli >/dev/null") != 0) {
    if (testing::require_all_endpoints()) FAIL() << "redis-server / redis-cli not installed";
    GTEST_SKIP() << "redis-server / redis-cli not installed";
  }
  PrivateCluster cluster(3);
  const std::string prefix = "fo";
  auto store = open_redis_store(cluster.url(prefix));

  // The master serving the prefix's slot, and its replica.
  const int slot =
      static_cast<int>(command(cluster.any_port(), "CLUSTER KEYSLOT {" + prefix + "}")->integer);
  Node master, replica;
  for (const auto& n : cluster_nodes(cluster.any_port()))
    for (auto [lo, hi] : n.slots)
      if (n.master && slot >= lo && slot <= hi) master = n;
  ASSERT_NE(master.port, 0) << "no master for slot " << slot;
  for (const auto& n : cluster_nodes(cluster.any_port()))
    if (!n.master && n.master_id == master.id) replica = n;
  ASSERT_NE(replica.port, 0) << "no replica of the master on " << master.port;

  CollectingSink sink;
  std::mutex errors_mu;
  std::vector<std::string> errors;
  RelayOptions o;
  o.batch_size = 50;
  o.poll_interval = 50ms;
  o.lease = 3000ms;
  o.on_error = [&](const std::string& m) {
    std::lock_guard lock(errors_mu);
    errors.push_back(m);
  };
  Relay relay(*store, sink, o);
  std::thread t([&] { relay.run(); });

  std::set<std::string> all;
  auto emit = [&](int n, int from) {
    auto events = make_events(n, from);
    for (const auto& e : events) all.insert(e.id.str());
    store->append(events);
  };
  emit(300, 0);
  EXPECT_TRUE(eventually([&] { return sink.distinct() >= 300; }, 20s));

  // Let the replica catch up, then switch roles.
  emit(200, 300);
  auto waited = command(master.port, "WAIT 1 5000");
  ASSERT_TRUE(waited && waited->type == REDIS_REPLY_INTEGER && waited->integer == 1);
  auto failover = command(replica.port, "CLUSTER FAILOVER");
  ASSERT_EQ(text_of(failover), "OK");
  ASSERT_TRUE(eventually(
      [&] {
        auto role = command(replica.port, "ROLE");
        return role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
               std::string(role->element[0]->str) == "master";
      },
      20s))
      << "the replica did not take over";
  ASSERT_TRUE(eventually([&] { return cluster.healthy(); }, 20s));

  // Emitting goes on through the new master, and the relay delivers everything.
  emit(300, 500);
  bool done = eventually([&] { return sink.distinct() >= all.size(); }, 30s);
  relay.stop();
  t.join();
  std::string joined;
  {
    std::lock_guard lock(errors_mu);
    for (std::size_t i = 0; i < errors.size() && i < 5; ++i) joined += "\n  " + errors[i];
  }
  EXPECT_TRUE(done) << "delivered " << sink.distinct() << " of " << all.size()
                    << "; first relay errors:" << joined;
  EXPECT_EQ(sink.seen(), all);
  auto s = store->stats();
  EXPECT_EQ(s.pending + s.leased, 0);
  EXPECT_EQ(s.dead, 0);
}

}  // namespace
}  // namespace outpost

namespace outpost {
namespace {

// --- slot migration: ASK ----------------------------------------------------------------------

// The prefix's slot set migrating from its master to another one: a key the source does not
// have is answered with ASK, and the client must send ASKING + the command to the target.
struct Migration {
  Node source, target;
  int slot = 0;
  std::string key;
  Migration(std::uint16_t any_port, const std::string& k) : key(k) {
    slot = static_cast<int>(command(any_port, "CLUSTER KEYSLOT " + key)->integer);
    for (const auto& n : cluster_nodes(any_port)) {
      if (!n.master) continue;
      bool owns = false;
      for (auto [lo, hi] : n.slots) owns = owns || (slot >= lo && slot <= hi);
      if (owns)
        source = n;
      else if (target.port == 0)
        target = n;
    }
    const std::string s = std::to_string(slot);
    EXPECT_EQ(text_of(command(target.port, "CLUSTER SETSLOT " + s + " IMPORTING " + source.id)),
              "OK");
    EXPECT_EQ(text_of(command(source.port, "CLUSTER SETSLOT " + s + " MIGRATING " + target.id)),
              "OK");
  }
  ~Migration() {
    const std::string s = std::to_string(slot);
    command(source.port, "CLUSTER SETSLOT " + s + " STABLE");
    command(target.port, "CLUSTER SETSLOT " + s + " STABLE");
  }
  // The key's value on the target (read with ASKING, as the slot is still the source's).
  std::string on_target() const {
    Ctx c(redisConnect("127.0.0.1", target.port));
    Reply(static_cast<redisReply*>(redisCommand(c.get(), "ASKING")));
    return text_of(Reply(static_cast<redisReply*>(redisCommand(c.get(), "GET %s", key.c_str()))));
  }
};

redis_store::ClientOptions client_options(std::uint16_t port, const std::string& key) {
  redis_store::ClientOptions o;
  o.seeds.push_back({"127.0.0.1", port});
  o.slot_key = key;
  return o;
}

bool have_redis() {
  if (std::system("command -v redis-server >/dev/null && command -v redis-cli >/dev/null") == 0)
    return true;
  if (testing::require_all_endpoints()) ADD_FAILURE() << "redis-server / redis-cli not installed";
  return false;
}

TEST(RedisClusterAsk, ACommandIsSentToTheAskTargetAfterAsking) {
  if (!have_redis()) GTEST_SKIP() << "redis-server / redis-cli not installed";
  PrivateCluster cluster(3, 0);
  const std::string key = "{ask}:n";
  Migration m(cluster.any_port(), key);
  redis_store::Client client(client_options(cluster.any_port(), key));
  std::string served_by;
  auto r = client.command({"INCR", key}, /*idempotent=*/false, &served_by);
  ASSERT_EQ(r->type, REDIS_REPLY_INTEGER) << redis_store::reply_string(r.get());
  EXPECT_EQ(r->integer, 1);
  EXPECT_EQ(served_by, "127.0.0.1:" + std::to_string(m.target.port));
  EXPECT_EQ(m.on_target(), "1");

  // A script the target never saw: its NOSCRIPT is answered by loading it there, not on the
  // master (which has it, so reloading there would loop until the attempts run out).
  command(m.target.port, "SCRIPT FLUSH");
  redis_store::Script script{"incr", "return redis.call('INCR', KEYS[1])", {}, {}};
  auto e = client.eval(script, key, {}, /*idempotent=*/false);
  ASSERT_EQ(e->type, REDIS_REPLY_INTEGER) << redis_store::reply_string(e.get());
  EXPECT_EQ(e->integer, 2);
  EXPECT_EQ(m.on_target(), "2");
}

// ASKING and the command leave in one write: when the reply is lost (here: the target is paused
// past the client's timeout), a non-idempotent command is in doubt, not a retryable connection
// error that a caller would send again. (Whether it ran is up to the server: a command queued by
// a client that has gone may be dropped or run.)
TEST(RedisClusterAsk, ALostReplyAfterAskIsInDoubtForANonIdempotentCommand) {
  if (!have_redis()) GTEST_SKIP() << "redis-server / redis-cli not installed";
  PrivateCluster cluster(3, 0);
  const std::string key = "{askdoubt}:n";
  Migration m(cluster.any_port(), key);
  auto o = client_options(m.source.port, key);  // the paused target must not be the seed
  o.timeout = 300ms;
  redis_store::Client client(o);
  ASSERT_EQ(redis_store::reply_string(client.command({"PING"}).get()),
            "PONG");  // the source is resolved
  ASSERT_EQ(text_of(command(m.target.port, "CLIENT PAUSE 1500 ALL")), "OK");
  try {
    client.command({"INCR", key}, /*idempotent=*/false);
    ADD_FAILURE() << "the command returned although the target was paused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::in_doubt) << e.what();
  }
}

}  // namespace
}  // namespace outpost

namespace outpost {
namespace {

// --- Redis Sentinel -----------------------------------------------------------------------------

// The master the sentinels name now (0 when none answers).
std::uint16_t sentinel_master_port(const core::Url& sentinels) {
  for (const auto& hp : sentinels.hosts()) {
    auto r = command(hp.port, "SENTINEL get-master-addr-by-name " + sentinels.path());
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
      return static_cast<std::uint16_t>(std::stoi(text_of_element(r, 1)));
  }
  return 0;
}

bool has_online_replica(std::uint16_t port) {
  auto info = command(port, "INFO replication");
  if (!info || info->type != REDIS_REPLY_STRING) return false;
  return std::string(info->str, info->len).find("state=online") != std::string::npos;
}

bool is_master(std::uint16_t port) {
  auto role = command(port, "ROLE");
  return role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
         std::string(role->element[0]->str, role->element[0]->len) == "master";
}

TEST(RedisSentinelFailover, RelayFollowsTheNewMasterAfterSentinelFailoverAndLosesNothing) {
  auto base = testing::env("OUTPOST_TEST_REDIS_SENTINEL_URL");
  if (!base) {
    if (testing::require_all_endpoints()) FAIL() << "OUTPOST_TEST_REDIS_SENTINEL_URL not set";
    GTEST_SKIP() << "OUTPOST_TEST_REDIS_SENTINEL_URL not set";
  }
  const auto sentinels = core::Url::parse(*base);
  const std::string prefix = testing::unique_name("sentinel_");
  auto store = open_redis_store(*base + "?prefix=" + prefix);
  const std::uint16_t old_master = sentinel_master_port(sentinels);
  ASSERT_NE(old_master, 0) << "no sentinel names the master";
  // After an earlier failover the old master comes back as a replica and syncs first.
  ASSERT_TRUE(eventually([&] { return has_online_replica(old_master); }, 30s))
      << "the master on " << old_master << " has no replica in sync";

  CollectingSink sink;
  std::mutex errors_mu;
  std::vector<std::string> errors;
  RelayOptions o;
  o.batch_size = 50;
  o.poll_interval = 50ms;
  o.lease = 2000ms;  // acks lost in the switch come back after this: delivered again
  o.on_error = [&](const std::string& m) {
    std::lock_guard lock(errors_mu);
    errors.push_back(m);
  };
  Relay relay(*store, sink, o);
  std::thread t([&] { relay.run(); });

  std::set<std::string> all;
  auto emit = [&](int n, int from) {
    auto events = make_events(n, from);
    for (const auto& e : events) all.insert(e.id.str());
    store->append(events);
  };
  emit(300, 0);
  EXPECT_TRUE(eventually([&] { return sink.distinct() >= 300; }, 20s));

  // Emits the replica has confirmed survive the switch (replication is asynchronous otherwise:
  // docs/redis.md, Durability); the relay keeps running through it.
  emit(200, 300);
  auto waited = command(old_master, "WAIT 1 5000");
  ASSERT_TRUE(waited && waited->type == REDIS_REPLY_INTEGER && waited->integer == 1);
  auto failover = command(sentinels.hosts().front().port, "SENTINEL FAILOVER " + sentinels.path());
  ASSERT_EQ(text_of(failover), "OK");
  std::uint16_t new_master = 0;
  ASSERT_TRUE(eventually(
      [&] {
        new_master = sentinel_master_port(sentinels);
        return new_master != 0 && new_master != old_master && is_master(new_master);
      },
      30s))
      << "the sentinels did not switch the master";

  // Emitting goes on through the new master, and the relay delivers everything.
  emit(300, 500);
  bool done = eventually([&] { return sink.distinct() >= all.size(); }, 30s);
  relay.stop();
  t.join();
  std::string joined;
  {
    std::lock_guard lock(errors_mu);
    for (std::size_t i = 0; i < errors.size() && i < 5; ++i) joined += "\n  " + errors[i];
  }
  EXPECT_TRUE(done) << "delivered " << sink.distinct() << " of " << all.size()
                    << "; first relay errors:" << joined;
  EXPECT_EQ(sink.seen(), all);
  auto st = store->stats();
  EXPECT_EQ(st.pending + st.leased, 0);
  EXPECT_EQ(st.dead, 0);
  store.reset();
  Ctx c(redisConnect("127.0.0.1", new_master));
  const std::string pattern = "{" + prefix + "}:*";
  Reply(static_cast<redisReply*>(
      redisCommand(c.get(), "EVAL %s 0 %s",
                   "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end",
                   pattern.c_str())));
}

}  // namespace
}  // namespace outpost
