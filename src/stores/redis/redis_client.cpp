#include "stores/redis/redis_client.h"

#include <sys/time.h>

#include <algorithm>
#include <thread>

#include "outpost/error.h"

namespace outpost::redis_store {
namespace {

constexpr std::string_view kBackend = "redis";
constexpr int kMaxRedirects = 16;
constexpr std::size_t kMaxIdle = 16;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

std::string addr_of(const core::HostPort& hp) {
  return hp.host + ":" + std::to_string(hp.port);
}

core::HostPort parse_addr(std::string_view addr) {
  core::HostPort hp;
  auto colon = addr.rfind(':');
  hp.host = std::string(addr.substr(0, colon));
  hp.port = static_cast<std::uint16_t>(std::stoi(std::string(addr.substr(colon + 1))));
  return hp;
}

bool starts_with(std::string_view s, std::string_view p) {
  return s.substr(0, p.size()) == p;
}

// "MOVED 3999 127.0.0.1:6381" -> "127.0.0.1:6381"
std::string redirect_target(std::string_view err) {
  auto sp = err.rfind(' ');
  return std::string(err.substr(sp + 1));
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
  auto open = key.find('{');
  if (open != std::string_view::npos) {
    auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1)
      key = key.substr(open + 1, close - open - 1);
  }
  std::uint16_t crc = 0;
  for (unsigned char c : key) {
    crc ^= static_cast<std::uint16_t>(c) << 8;
    for (int i = 0; i < 8; ++i)
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
  }
  return crc & 16383;
}

std::string reply_string(const redisReply* r) {
  if (!r) return {};
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR)
    return std::string(r->str, r->len);
  if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
  return {};
}

std::int64_t reply_int(const redisReply* r) {
  if (!r) return 0;
  if (r->type == REDIS_REPLY_INTEGER) return r->integer;
  if (r->type == REDIS_REPLY_STRING) {
    try {
      return std::stoll(std::string(r->str, r->len));
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

std::string reply_error(const redisReply* r) {
  if (!r || r->type != REDIS_REPLY_ERROR) return {};
  return std::string(r->str, r->len);
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), slot_(key_slot(options_.slot_key)) {}

Client::~Client() = default;

bool Client::cluster() const {
  std::lock_guard lock(mu_);
  return cluster_;
}

std::string Client::describe() const {
  std::lock_guard lock(mu_);
  std::string seeds;
  for (const auto& hp : options_.seeds) seeds += (seeds.empty() ? "" : ",") + addr_of(hp);
  if (cluster_)
    return "cluster " + seeds + " (slot " + std::to_string(slot_) + " on " + master_ + ")";
  return seeds;
}

Context Client::connect_to(const core::HostPort& hp, bool select_db) {
  const std::string addr = addr_of(hp);
  Context ctx(redisConnectWithTimeout(hp.host.c_str(), hp.port, to_timeval(options_.timeout)));
  if (!ctx)
    throw ConnectionError(std::string(kBackend), "cannot connect to " + addr + ": out of memory");
  if (ctx->err)
    throw ConnectionError(std::string(kBackend), "cannot connect to " + addr + ": " + ctx->errstr);
  redisSetTimeout(ctx.get(), to_timeval(options_.timeout));
  redisEnableKeepAlive(ctx.get());
  auto run = [&](std::vector<std::string> args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r)
      throw ConnectionError(std::string(kBackend),
                            "connection to " + addr + " lost: " + ctx->errstr);
    return r;
  };
  if (!options_.password.empty()) {
    auto r = run({"AUTH", options_.password});
    if (auto e = reply_error(r.get()); !e.empty())
      throw ConfigError("redis: AUTH at " + addr + " failed (URL password): " + e, "redis");
  }
  if (select_db && options_.db != 0) {
    auto r = run({"SELECT", std::to_string(options_.db)});
    if (auto e = reply_error(r.get()); !e.empty())
      throw ConfigError("redis: SELECT " + std::to_string(options_.db) + " at " + addr +
                            " failed (URL path /db): " + e,
                        "redis");
  }
  return ctx;
}

void Client::resolve() {
  std::string last_error;
  for (const auto& seed : options_.seeds) {
    Context ctx;
    try {
      ctx = connect_to(seed, false);
    } catch (const ConnectionError& e) {
      last_error = e.what();
      continue;
    }
    Reply r(static_cast<redisReply*>(redisCommand(ctx.get(), "CLUSTER SLOTS")));
    if (!r) {
      last_error = "connection to " + addr_of(seed) + " lost: " + ctx->errstr;
      continue;
    }
    std::string err = reply_error(r.get());
    if (!err.empty()) {
      if (err.find("cluster support disabled") != std::string::npos) {
        std::lock_guard lock(mu_);
        cluster_ = false;
        if (master_ != addr_of(seed)) ++master_epoch_;
        master_ = addr_of(seed);
        return;
      }
      last_error = addr_of(seed) + ": CLUSTER SLOTS: " + err;
      continue;
    }
    if (r->type != REDIS_REPLY_ARRAY) continue;
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* range = r->element[i];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      auto lo = reply_int(range->element[0]);
      auto hi = reply_int(range->element[1]);
      if (slot_ < lo || slot_ > hi) continue;
      const redisReply* node = range->element[2];
      if (node->type != REDIS_REPLY_ARRAY || node->elements < 2) continue;
      core::HostPort hp;
      hp.host = reply_string(node->element[0]);
      if (hp.host.empty() || hp.host == "?") hp.host = seed.host;
      hp.port = static_cast<std::uint16_t>(reply_int(node->element[1]));
      if (options_.db != 0)
        throw ConfigError("redis: a Redis Cluster has only database 0 (URL path /" +
                              std::to_string(options_.db) + ")",
                          "redis");
      std::lock_guard lock(mu_);
      cluster_ = true;
      if (master_ != addr_of(hp)) ++master_epoch_;
      master_ = addr_of(hp);
      return;
    }
    last_error = addr_of(seed) + ": no master serves slot " + std::to_string(slot_);
  }
  throw ConnectionError(std::string(kBackend), "cannot reach Redis: " + last_error);
}

void Client::set_master(std::string addr) {
  std::lock_guard lock(mu_);
  if (master_ != addr) ++master_epoch_;
  master_ = std::move(addr);
}

std::unique_ptr<Connection> Client::open(const std::string& addr) {
  Context ctx = connect_to(parse_addr(addr), true);
  return std::make_unique<Connection>(*this, std::move(ctx), addr);
}

std::unique_ptr<Connection> Client::acquire() {
  std::string master;
  {
    std::lock_guard lock(mu_);
    while (!idle_.empty()) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      if (conn->addr() == master_ && !conn->broken()) return conn;
    }
    master = master_;
  }
  if (master.empty()) {
    resolve();
    std::lock_guard lock(mu_);
    master = master_;
  }
  try {
    return open(master);
  } catch (const ConnectionError&) {
    // The master may have moved (failover) or died: forget it so the next try re-resolves.
    std::lock_guard lock(mu_);
    if (master_ == master) master_.clear();
    throw;
  }
}

void Client::give_back(std::unique_ptr<Connection> conn) {
  if (!conn || conn->broken()) return;
  std::lock_guard lock(mu_);
  if (conn->addr() != master_ || idle_.size() >= kMaxIdle) return;
  idle_.push_back(std::move(conn));
}

Context Client::connect_master() {
  std::string master;
  {
    std::lock_guard lock(mu_);
    master = master_;
  }
  if (master.empty()) {
    resolve();
    std::lock_guard lock(mu_);
    master = master_;
  }
  return connect_to(parse_addr(master), false);
}

Reply Client::command(const std::vector<std::string_view>& args, bool idempotent) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (auto a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  const int argc = static_cast<int>(argv.size());
  const auto deadline = std::chrono::steady_clock::now() + options_.retry;
  auto backoff = std::chrono::milliseconds(20);
  auto wait_or_give_up = [&](const std::string& why) {
    if (std::chrono::steady_clock::now() + backoff > deadline)
      throw ConnectionError(std::string(kBackend), why);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  };
  for (int redirects = 0;;) {
    std::unique_ptr<Connection> conn;
    try {
      conn = acquire();
    } catch (const ConnectionError& e) {
      wait_or_give_up(e.what());  // nothing was sent: safe to try again
      continue;
    }
    Reply r(
        static_cast<redisReply*>(redisCommandArgv(conn->get(), argc, argv.data(), lens.data())));
    if (!r) {
      std::string why = "connection to " + conn->addr() + " lost: " + conn->get()->errstr;
      {
        std::lock_guard lock(mu_);
        if (master_ == conn->addr()) master_.clear();  // re-resolve: maybe a failover
      }
      if (!idempotent)
        throw InDoubtError(std::string(kBackend),
                           why + " (the write may or may not have taken effect)");
      wait_or_give_up(why);
      continue;
    }
    std::string err = reply_error(r.get());
    if (err.empty()) {
      give_back(std::move(conn));
      return r;
    }
    if (starts_with(err, "MOVED ") && ++redirects <= kMaxRedirects) {
      set_master(redirect_target(err));
      continue;
    }
    if (starts_with(err, "ASK ") && ++redirects <= kMaxRedirects) {
      auto target = open(redirect_target(err));
      redisAppendCommand(target->get(), "ASKING");
      redisAppendCommandArgv(target->get(), argc, argv.data(), lens.data());
      void* raw = nullptr;
      if (redisGetReply(target->get(), &raw) != REDIS_OK)
        throw ConnectionError(std::string(kBackend), "ASKING at " + target->addr() + " failed");
      Reply asking(static_cast<redisReply*>(raw));
      raw = nullptr;
      if (redisGetReply(target->get(), &raw) != REDIS_OK)
        throw InDoubtError(std::string(kBackend), "connection to " + target->addr() + " lost");
      give_back(std::move(conn));
      return Reply(static_cast<redisReply*>(raw));
    }
    if (starts_with(err, "TRYAGAIN") || starts_with(err, "CLUSTERDOWN") ||
        starts_with(err, "LOADING") || starts_with(err, "READONLY") ||
        starts_with(err, "MASTERDOWN")) {
      // A resharding, a failover in progress or a server loading its AOF: wait and re-resolve.
      if (!starts_with(err, "LOADING")) {
        std::lock_guard lock(mu_);
        master_.clear();
      }
      wait_or_give_up(conn->addr() + ": " + err);
      continue;
    }
    give_back(std::move(conn));
    return r;
  }
}

Reply Client::eval(const Script& script, std::string_view key,
                   const std::vector<std::string_view>& argv, bool idempotent) {
  auto load = [&]() {
    Reply r = command({"SCRIPT", "LOAD", script.text});
    if (auto e = reply_error(r.get()); !e.empty())
      throw Error(ErrorCode::backend, std::string(kBackend),
                  "SCRIPT LOAD " + std::string(script.name) + ": " + e);
    std::lock_guard lock(script.mu);
    script.sha = reply_string(r.get());
    return script.sha;
  };
  std::string sha;
  {
    std::lock_guard lock(script.mu);
    sha = script.sha;
  }
  if (sha.empty()) sha = load();
  std::vector<std::string_view> args;
  args.reserve(argv.size() + 4);
  args.push_back("EVALSHA");
  args.push_back(sha);
  args.push_back("1");
  args.push_back(key);
  args.insert(args.end(), argv.begin(), argv.end());
  for (int attempt = 0;; ++attempt) {
    Reply r = command(args, idempotent);
    std::string err = reply_error(r.get());
    if (err.empty()) return r;
    if (starts_with(err, "NOSCRIPT") && attempt < 3) {
      // The script cache was flushed (SCRIPT FLUSH, restart, failover): the script did not run.
      sha = load();
      args[1] = sha;
      continue;
    }
    if (err.find("OUTPOST_DUPLICATE") != std::string::npos)
      throw Error(ErrorCode::conflict, std::string(kBackend),
                  err.substr(err.find("OUTPOST_DUPLICATE") + 18));
    if (err.find("OUTPOST_LAYOUT") != std::string::npos)  // an outbox of an older build
      throw Error(ErrorCode::corrupt, std::string(kBackend),
                  err.substr(err.find("OUTPOST_LAYOUT") + 15));
    if (starts_with(err, "OOM"))
      throw Error(ErrorCode::backend, std::string(kBackend),
                  std::string(script.name) + ": " + err + " (maxmemory reached; use noeviction)");
    throw Error(ErrorCode::backend, std::string(kBackend), std::string(script.name) + ": " + err);
  }
}

}  // namespace outpost::redis_store
