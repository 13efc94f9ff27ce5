// Redis Cluster failover: a private 6-node cluster (3 masters, 3 replicas) whose master for the
// store's prefix is failed over to its replica while a relay runs. The relay must find the new
// master by itself (MOVED from the old one, now a replica) and deliver every event.
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

#include "outpost/relay.h"
#include "outpost/stores/redis.h"
#include "server_process.h"
#include "store_cases.h"

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

// A private cluster of `masters` masters with one replica each.
class PrivateCluster {
 public:
  explicit PrivateCluster(int masters)
      : dir_(testing::temp_dir() + "/" + testing::unique_name("cl_")) {
    std::filesystem::create_directories(dir_);
    for (int i = 0; i < masters * 2; ++i) {
      std::uint16_t p = 0;
      do {  // the cluster bus listens on port + 10000
        p = free_port();
      } while (p > 55535 || !port_is_free(static_cast<std::uint16_t>(p + 10000)));
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
    create += " --cluster-replicas 1 --cluster-yes > " + dir_ + "/create.log 2>&1";
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
      if (replicas * 2 != static_cast<int>(ports_.size())) return false;
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
