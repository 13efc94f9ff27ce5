#pragma once
// A small hiredis client for the Redis store: owned contexts and replies, a node resolver for
// standalone servers, Redis Cluster (the master of one hash slot: CLUSTER SLOTS, MOVED/ASK,
// re-resolve after a failover) and Redis Sentinel (the master of a named group, asked again after
// a failover), scripts by EVALSHA with reload on NOSCRIPT, a connection pool, and the one
// function that maps Redis failures to outpost errors. Internal to src/stores/redis (the only
// place that includes hiredis.h).
//
// Thread safety: Client is safe from any thread; a Connection is used by one thread at a time
// (the pool hands it out exclusively).

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/url.h"
#include "outpost/error.h"

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
  std::vector<core::HostPort> seeds;  // one or more host:port: servers, cluster seeds, sentinels
  std::string sentinel_master;        // non-empty: the seeds are sentinels watching this master
  std::string sentinel_password;      // AUTH at the sentinels when non-empty
  std::string password;               // AUTH at the data nodes when non-empty
  int db = 0;                         // SELECT (must be 0 on a cluster)
  std::string slot_key;               // the key whose slot's master we talk to
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
  // returned to the caller (type REDIS_REPLY_ERROR); `served_by` (when given) is set to the
  // node that sent the reply (an ASK target is not the master).
  Reply command(const std::vector<std::string_view>& args, bool idempotent = true,
                std::string* served_by = nullptr);

  // EVALSHA with the script's SHA (SCRIPT LOAD first, and again after NOSCRIPT). `key` is
  // KEYS[1]. Error replies are thrown as Error(backend) with the script's name.
  Reply eval(const Script& script, std::string_view key, const std::vector<std::string_view>& argv,
             bool idempotent = true);

  // Sends every command on one connection to the master before reading any reply: one round
  // trip for all (the partitioned store's appends, redis_partitioned.cpp). Not retried: a
  // connection lost after sending is InDoubtError (any of them may have run). The replies in
  // order, error replies included (a redirect or NOSCRIPT: that command did not run).
  std::vector<Reply> pipeline(const std::vector<std::vector<std::string_view>>& commands);

  // The script's SHA1, loaded with SCRIPT LOAD on the master when not known yet.
  std::string sha_of(const Script& script);

  // A new dedicated connection to the current master (for SUBSCRIBE); throws ConnectionError.
  // `epoch` (when given) is set to master_epoch() of that master.
  Context connect_master(std::uint64_t* epoch = nullptr);

  // Changes whenever the master changes (failover, MOVED): a subscription made before is on a
  // node that no longer gets the writes.
  std::uint64_t master_epoch() const;

  const ClientOptions& options() const { return options_; }

  // Whether the servers are a Redis Cluster (1), a single master (0: standalone or Sentinel), or
  // not known yet (-1: no command has reached a server). On a single master one script may touch
  // every partition of an outbox (redis_partitioned.cpp); on a cluster a script stays in a slot.
  int cluster() const { return cluster_.load(); }

 private:
  std::unique_ptr<Connection> acquire();
  void give_back(std::unique_ptr<Connection> conn);
  std::unique_ptr<Connection> open(const std::string& addr);
  Context connect_to(const core::HostPort& hp, const std::string& password, bool select_db);
  void resolve();       // finds the master (of the slot, or of the sentinel group); ConnectionError
  struct Unreachable {  // why the last node tried could not be used
    std::string why, native;
  };
  bool resolve_from_cluster(const core::HostPort& seed, Unreachable& last);
  bool resolve_from_sentinel(const core::HostPort& sentinel, Unreachable& last);
  bool connect_or_note(const core::HostPort& hp, const std::string& password, Context& ctx,
                       Unreachable& last);
  void set_master(std::string addr);
  void forget_master(const std::string& addr);  // re-resolve next time (maybe a failover)

  const ClientOptions options_;
  const std::uint16_t slot_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by mu_
  std::string master_;                             // guarded by mu_; "" = not resolved
  std::uint64_t master_epoch_ = 0;                 // guarded by mu_; bumps on every change
  std::atomic<int> cluster_{-1};                   // cluster(), set by resolve
};

// The one place where a Redis failure becomes an outpost error (model: redis-plus-plus
// errors.cpp). `context` says what was done where ("EVALSHA claim at 127.0.0.1:7000").
// - `reply_error` non-empty: the server's error reply; native_code is its first word (OOM,
//   NOSCRIPT, WRONGPASS, ERR, OUTPOST_DUPLICATE, ...). Duplicate ids are conflict, an older
//   layout corrupt, a refused password PasswordRefused, LOADING/BUSY/MASTERDOWN/TRYAGAIN/
//   CLUSTERDOWN/READONLY a retryable ConnectionError, the rest backend.
// - else a connection failure of `ctx` (null: could not allocate one); native_code is hiredis'
//   error name (REDIS_ERR_IO, REDIS_ERR_EOF, REDIS_ERR_TIMEOUT, ...). `maybe_applied`: a write
//   was sent and its reply lost, so the error is InDoubtError, else ConnectionError.
struct Failure {
  std::string context;
  std::string reply_error;
  const redisContext* ctx = nullptr;
  bool maybe_applied = false;
};
[[noreturn]] void throw_failure(const Failure& f);

// A password the server refused (WRONGPASS, NOAUTH, NOPERM, "ERR AUTH ..."): to callers a
// ConnectionError like PostgreSQL's refusal (exit 1 on the CLI; a running relay retries it), but
// the client gives it up at once instead of trying the other seeds or reconnecting, so the
// message names the password and comes without the reconnect tries' delay.
class PasswordRefused : public ConnectionError {
 public:
  using ConnectionError::ConnectionError;
};

// Helpers over replies.
std::string reply_string(const redisReply* r);
std::int64_t reply_int(const redisReply* r);
std::string reply_error(const redisReply* r);  // "" when not an error
// A decimal integer in a reply's text (a score, a count, a time); 0 when it is none.
std::int64_t text_int(std::string_view s);

}  // namespace outpost::redis_store
