#pragma once
// A small hiredis client for the Redis store: owned contexts and replies, a node resolver for
// standalone servers and Redis Cluster (the master of one hash slot: CLUSTER SLOTS, MOVED/ASK,
// re-resolve after a failover), scripts by EVALSHA with reload on NOSCRIPT, and a connection
// pool. Internal to src/stores/redis (the only place that includes hiredis.h).
//
// Thread safety: Client is safe from any thread; a Connection is used by one thread at a time
// (the pool hands it out exclusively).

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/url.h"

namespace outpost::redis_store {

struct ReplyDeleter {
  void operator()(redisReply* r) const {
    if (r) freeReplyObject(r);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* c) const {
    if (c) redisFree(c);
  }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

// The 16384-slot hash of a key (CRC16/XMODEM of its hash tag when it has one).
std::uint16_t key_slot(std::string_view key);

struct ClientOptions {
  std::vector<core::HostPort> seeds;        // one or more host:port; several = a cluster seed list
  std::string password;                     // AUTH when non-empty
  int db = 0;                               // SELECT (must be 0 on a cluster)
  std::string slot_key;                     // the key whose slot's master we talk to
  std::chrono::milliseconds timeout{5000};  // connect and per-command timeout
  std::chrono::milliseconds retry{2000};    // how long to keep reconnecting after a break
};

// A Lua script known by its text; its SHA1 is learnt from SCRIPT LOAD.
struct Script {
  const char* name;
  std::string text;
  mutable std::mutex mu;
  mutable std::string sha;  // guarded by mu
};

class Client;

class Connection {
 public:
  Connection(Client& client, Context ctx, std::string addr)
      : client_(client), ctx_(std::move(ctx)), addr_(std::move(addr)) {}
  redisContext* get() const { return ctx_.get(); }
  const std::string& addr() const { return addr_; }
  bool broken() const { return !ctx_ || ctx_->err != 0; }

 private:
  friend class Client;
  Client& client_;
  Context ctx_;
  std::string addr_;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();

  // Runs one command (args are binary-safe). Follows MOVED/ASK and TRYAGAIN/LOADING/CLUSTERDOWN;
  // after a broken connection reconnects and re-sends when `idempotent`, else throws
  // InDoubtError when the command may have run. Server error replies other than redirects are
  // returned to the caller (type REDIS_REPLY_ERROR).
  Reply command(const std::vector<std::string_view>& args, bool idempotent = true);

  // EVALSHA with the script's SHA (SCRIPT LOAD first, and again after NOSCRIPT). `key` is
  // KEYS[1]. Error replies are thrown as Error(backend) with the script's name.
  Reply eval(const Script& script, std::string_view key, const std::vector<std::string_view>& argv,
             bool idempotent = true);

  // A new dedicated connection to the current master (for SUBSCRIBE); throws ConnectionError.
  Context connect_master();

  const ClientOptions& options() const { return options_; }
  bool cluster() const;
  std::string describe() const;  // "127.0.0.1:6379" or "cluster 127.0.0.1:7000 (master ...)"

 private:
  struct Pooled;
  std::unique_ptr<Connection> acquire();
  void give_back(std::unique_ptr<Connection> conn);
  std::unique_ptr<Connection> open(const std::string& addr);
  Context connect_to(const core::HostPort& hp, bool select_db);
  void resolve();  // finds the master of the slot; throws ConnectionError
  void set_master(std::string addr);

  const ClientOptions options_;
  const std::uint16_t slot_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
  std::string master_;                             // guarded by mu_; "" = not resolved
  std::uint64_t master_epoch_ = 0;                 // guarded by mu_; bumps on every change
  bool cluster_ = false;                           // guarded by mu_
};

// Helpers over replies.
std::string reply_string(const redisReply* r);
std::int64_t reply_int(const redisReply* r);
std::string reply_error(const redisReply* r);  // "" when not an error

}  // namespace outpost::redis_store
