#include "stores/redis/redis_client.h"

#include <sys/time.h>

#include <algorithm>
#include <charconv>
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

std::int64_t text_int(std::string_view s) {
  std::int64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v);
  return v;
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

namespace {

std::string first_word(std::string_view s) {
  return std::string(s.substr(0, s.find(' ')));
}

std::string hiredis_error_name(int err) {
  switch (err) {
    case REDIS_ERR_IO:
      return "REDIS_ERR_IO";
    case REDIS_ERR_EOF:
      return "REDIS_ERR_EOF";
    case REDIS_ERR_PROTOCOL:
      return "REDIS_ERR_PROTOCOL";
    case REDIS_ERR_OOM:
      return "REDIS_ERR_OOM";
#ifdef REDIS_ERR_TIMEOUT
    case REDIS_ERR_TIMEOUT:
      return "REDIS_ERR_TIMEOUT";
#endif
    default:
      return "REDIS_ERR";
  }
}

}  // namespace

void throw_failure(const Failure& f) {
  const std::string backend(kBackend);
  if (!f.reply_error.empty()) {
    const std::string& err = f.reply_error;
    const std::string code = first_word(err);
    // The scripts' own errors, wherever the server put them in the reply.
    for (auto [marker, ours] :
         {std::pair{std::string_view("OUTPOST_DUPLICATE"), ErrorCode::conflict},
          std::pair{std::string_view("OUTPOST_LAYOUT"), ErrorCode::corrupt},
          std::pair{std::string_view("OUTPOST_UNREADABLE"), ErrorCode::config},
          std::pair{std::string_view("OUTPOST_PARTITIONS"), ErrorCode::config}}) {
      auto at = err.find(marker);
      if (at == std::string::npos) continue;
      std::string message = err.substr(std::min(err.size(), at + marker.size() + 1));
      // A URL that disagrees with the outbox is bad input: exit 2 on the CLI (error.h).
      if (ours == ErrorCode::config) throw ConfigError(message, backend);
      throw Error(ours, backend, message, std::string(marker));
    }
    // A refused password is the server's answer, as PostgreSQL's is: a connection error (exit 1
    // on the CLI; a running relay retries, so a rotated password can be fixed without a restart).
    if (code == "WRONGPASS" || code == "NOAUTH" || code == "NOPERM" ||
        (code == "ERR" && err.find("AUTH") != std::string::npos))
      throw PasswordRefused(backend, f.context + " failed (URL password): " + err, code);
    if (code == "OOM")
      throw Error(ErrorCode::backend, backend,
                  f.context + ": " + err + " (maxmemory reached; use noeviction)", code);
    if (code == "LOADING" || code == "BUSY" || code == "MASTERDOWN" || code == "TRYAGAIN" ||
        code == "CLUSTERDOWN" || code == "READONLY")
      throw ConnectionError(backend, f.context + ": " + err, code);
    throw Error(ErrorCode::backend, backend, f.context + ": " + err, code);
  }
  if (!f.ctx) throw ConnectionError(backend, f.context + ": out of memory", "REDIS_ERR_OOM");
  const std::string why = f.context + ": " + (f.ctx->errstr[0] ? f.ctx->errstr : "no reply");
  if (f.maybe_applied)
    throw InDoubtError(backend, why + " (the write may or may not have taken effect)");
  throw ConnectionError(backend, why, hiredis_error_name(f.ctx->err));
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), slot_(key_slot(options_.slot_key)) {}

Client::~Client() = default;

std::uint64_t Client::master_epoch() const {
  std::lock_guard lock(mu_);
  return master_epoch_;
}

Context Client::connect_to(const core::HostPort& hp, const std::string& password, bool select_db) {
  const std::string addr = addr_of(hp);
  Context ctx(redisConnectWithTimeout(hp.host.c_str(), hp.port, to_timeval(options_.timeout)));
  if (!ctx || ctx->err) throw_failure({"cannot connect to " + addr, {}, ctx.get()});
  redisSetTimeout(ctx.get(), to_timeval(options_.timeout));
  redisEnableKeepAlive(ctx.get());
  auto run = [&](const std::string& what, std::vector<std::string> args) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    Reply r(static_cast<redisReply*>(
        redisCommandArgv(ctx.get(), static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (!r) throw_failure({what + " at " + addr, {}, ctx.get()});
    if (auto e = reply_error(r.get()); !e.empty()) throw_failure({what + " at " + addr, e});
  };
  if (!password.empty()) run("AUTH", {"AUTH", password});
  if (select_db && options_.db != 0) {
    try {
      run("SELECT", {"SELECT", std::to_string(options_.db)});
    } catch (const Error& e) {
      if (e.code() == ErrorCode::connection) throw;
      throw ConfigError("redis: SELECT " + std::to_string(options_.db) + " failed (URL path /db " +
                            "or parameter db): " + e.what(),
                        "redis");
    }
  }
  return ctx;
}

// Standalone or cluster: CLUSTER SLOTS names the master of the slot, or says there is no cluster.
bool Client::resolve_from_cluster(const core::HostPort& seed, Unreachable& last) {
  Context ctx;
  try {
    ctx = connect_to(seed, options_.password, false);
  } catch (const PasswordRefused&) {
    throw;
  } catch (const ConnectionError& e) {
    last = {e.what(), e.native_code()};
    return false;
  }
  Reply r(static_cast<redisReply*>(redisCommand(ctx.get(), "CLUSTER SLOTS")));
  if (!r) {
    last = {"connection to " + addr_of(seed) + " lost: " + ctx->errstr, {}};
    return false;
  }
  std::string err = reply_error(r.get());
  if (!err.empty()) {
    if (err.find("cluster support disabled") != std::string::npos) {
      cluster_ = 0;
      set_master(addr_of(seed));
      return true;
    }
    last = {addr_of(seed) + ": CLUSTER SLOTS: " + err, {}};
    return false;
  }
  for (std::size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements; ++i) {
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
    cluster_ = 1;
    set_master(addr_of(hp));
    return true;
  }
  last = {addr_of(seed) + ": no master serves slot " + std::to_string(slot_), {}};
  return false;
}

// A connection for resolving (no SELECT) into `ctx`: a bad URL or a refused password goes to the
// caller at once, any other failure is noted in `last` (false: try the next node).
bool Client::connect_or_note(const core::HostPort& hp, const std::string& password, Context& ctx,
                             Unreachable& last) {
  try {
    ctx = connect_to(hp, password, false);
    return true;
  } catch (const ConfigError&) {
    throw;
  } catch (const PasswordRefused&) {
    throw;
  } catch (const Error& e) {
    last = {e.what(), e.native_code()};
    return false;
  }
}

// Sentinel: the sentinel names the group's master, which must also say it is one (ROLE): just
// after a failover a sentinel may still name the old master, now a replica.
bool Client::resolve_from_sentinel(const core::HostPort& sentinel, Unreachable& last) {
  const std::string at = "sentinel " + addr_of(sentinel);
  Context ctx;
  if (!connect_or_note(sentinel, options_.sentinel_password, ctx, last)) return false;
  const std::string& name = options_.sentinel_master;
  Reply r(static_cast<redisReply*>(
      redisCommand(ctx.get(), "SENTINEL get-master-addr-by-name %b", name.data(), name.size())));
  if (!r) {
    last = {at + ": connection lost: " + ctx->errstr, {}};
    return false;
  }
  if (auto e = reply_error(r.get()); !e.empty()) {
    last = {at + ": " + e, {}};
    return false;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) {
    last = {at + " knows no master named '" + name + "' (URL path)", {}};
    return false;
  }
  core::HostPort hp;
  hp.host = reply_string(r->element[0]);
  hp.port = static_cast<std::uint16_t>(reply_int(r->element[1]));
  Context node;
  if (!connect_or_note(hp, options_.password, node, last)) return false;
  Reply role(static_cast<redisReply*>(redisCommand(node.get(), "ROLE")));
  if (!role || role->type != REDIS_REPLY_ARRAY || role->elements < 1 ||
      reply_string(role->element[0]) != "master") {
    last = {at + " names " + addr_of(hp) + " as master '" + name + "', which is not (yet)", {}};
    return false;
  }
  cluster_ = 0;
  set_master(addr_of(hp));
  return true;
}

void Client::resolve() {
  Unreachable last;
  for (const auto& seed : options_.seeds) {
    if (options_.sentinel_master.empty() ? resolve_from_cluster(seed, last)
                                         : resolve_from_sentinel(seed, last))
      return;
  }
  throw ConnectionError(std::string(kBackend), "cannot reach Redis: " + last.why, last.native);
}

void Client::set_master(std::string addr) {
  std::lock_guard lock(mu_);
  if (master_ != addr) ++master_epoch_;
  master_ = std::move(addr);
}

void Client::forget_master(const std::string& addr) {
  std::lock_guard lock(mu_);
  if (master_ == addr) master_.clear();
}

std::unique_ptr<Connection> Client::open(const std::string& addr) {
  Context ctx = connect_to(parse_addr(addr), options_.password, true);
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
    forget_master(master);  // it may have moved (failover) or died: the next try re-resolves
    throw;
  }
}

void Client::give_back(std::unique_ptr<Connection> conn) {
  if (!conn || conn->broken()) return;
  std::lock_guard lock(mu_);
  if (conn->addr() != master_ || idle_.size() >= kMaxIdle) return;
  idle_.push_back(std::move(conn));
}

Context Client::connect_master(std::uint64_t* epoch) {
  std::string master;
  std::uint64_t seen = 0;
  {
    std::lock_guard lock(mu_);
    master = master_;
    seen = master_epoch_;
  }
  if (master.empty()) {
    resolve();
    std::lock_guard lock(mu_);
    master = master_;
    seen = master_epoch_;
  }
  if (epoch) *epoch = seen;
  return connect_to(parse_addr(master), options_.password, false);
}

Reply Client::command(const std::vector<std::string_view>& args, bool idempotent,
                      std::string* served_by) {
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
  auto pause_or_give_up = [&] {
    if (std::chrono::steady_clock::now() + backoff > deadline) return false;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    return true;
  };
  std::string ask_target;  // after an ASK: the next try goes there, preceded by ASKING
  for (int redirects = 0;;) {
    const bool asking = !ask_target.empty();
    std::unique_ptr<Connection> conn;
    try {
      conn = asking ? open(ask_target) : acquire();
    } catch (const PasswordRefused&) {
      throw;
    } catch (const ConnectionError&) {
      ask_target.clear();  // nothing was sent: safe to try again (from the master)
      if (!pause_or_give_up()) throw;
      continue;
    }
    ask_target.clear();
    // After ASK, ASKING and the command go out in one write: if a reply is lost, the command
    // may have run, exactly as when the reply to a plain command is lost.
    std::string asking_error;
    if (asking) {
      redisAppendCommand(conn->get(), "ASKING");
      redisAppendCommandArgv(conn->get(), argc, argv.data(), lens.data());
      void* raw = nullptr;
      if (redisGetReply(conn->get(), &raw) == REDIS_OK) {
        Reply ok(static_cast<redisReply*>(raw));
        if (reply_string(ok.get()) != "OK")
          asking_error = reply_error(ok.get()).empty() ? "unexpected reply" : reply_error(ok.get());
      }
    }
    Reply r;
    if (!conn->broken()) {
      void* raw = nullptr;
      if (asking) {
        if (redisGetReply(conn->get(), &raw) == REDIS_OK) r.reset(static_cast<redisReply*>(raw));
      } else {
        r.reset(static_cast<redisReply*>(
            redisCommandArgv(conn->get(), argc, argv.data(), lens.data())));
      }
    }
    if (!r) {
      const Failure lost{"connection to " + conn->addr() + " lost", {}, conn->get(), !idempotent};
      forget_master(conn->addr());  // re-resolve: maybe a failover
      if (!idempotent || !pause_or_give_up()) throw_failure(lost);
      continue;
    }
    const std::string err = reply_error(r.get());
    if (err.empty()) {
      if (served_by) *served_by = conn->addr();
      give_back(std::move(conn));
      return r;
    }
    if (starts_with(err, "MOVED ") && ++redirects <= kMaxRedirects) {
      set_master(redirect_target(err));
      continue;
    }
    if (starts_with(err, "ASK ") && ++redirects <= kMaxRedirects) {
      ask_target = redirect_target(err);  // this slot is migrating: this one command goes there
      give_back(std::move(conn));
      continue;
    }
    const std::string code = first_word(err);
    if (code == "TRYAGAIN" || code == "CLUSTERDOWN" || code == "LOADING" || code == "READONLY" ||
        code == "MASTERDOWN") {
      // A resharding, a failover in progress or a server loading its AOF: wait and re-resolve.
      if (code != "LOADING") forget_master(conn->addr());
      if (!pause_or_give_up()) throw_failure({"at " + conn->addr(), err});
      continue;
    }
    if (!asking_error.empty())
      throw_failure({"ASKING at " + conn->addr() + ": " + asking_error, err});
    if (served_by) *served_by = conn->addr();
    give_back(std::move(conn));
    return r;
  }
}

std::vector<Reply> Client::pipeline(const std::vector<std::vector<std::string_view>>& commands) {
  auto conn = acquire();  // throws ConnectionError: nothing was sent
  for (const auto& args : commands) {
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (auto a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAppendCommandArgv(conn->get(), static_cast<int>(argv.size()), argv.data(), lens.data());
  }
  std::vector<Reply> out;
  out.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(conn->get(), &raw) != REDIS_OK || !raw) {
      forget_master(conn->addr());
      throw_failure({"pipelined commands at " + conn->addr() + ": connection lost",
                     {},
                     conn->get(),
                     /*maybe_applied=*/true});
    }
    out.emplace_back(static_cast<redisReply*>(raw));
  }
  give_back(std::move(conn));
  return out;
}

std::string Client::sha_of(const Script& script) {
  {
    std::lock_guard lock(script.mu);
    if (!script.sha.empty()) return script.sha;
  }
  Reply r = command({"SCRIPT", "LOAD", script.text});
  if (auto e = reply_error(r.get()); !e.empty())
    throw_failure({"SCRIPT LOAD " + std::string(script.name), e});
  std::lock_guard lock(script.mu);
  script.sha = reply_string(r.get());
  return script.sha;
}

Reply Client::eval(const Script& script, std::string_view key,
                   const std::vector<std::string_view>& argv, bool idempotent) {
  const std::string name(script.name);
  auto load = [&](const std::string& node) {
    // On the node that said NOSCRIPT: the master, or the target of an ASK (a slot migration).
    Reply r;
    std::string at = "SCRIPT LOAD " + name;
    if (node.empty()) {
      r = command({"SCRIPT", "LOAD", script.text});
    } else {
      auto conn = open(node);
      at += " at " + node;
      r.reset(static_cast<redisReply*>(
          redisCommand(conn->get(), "SCRIPT LOAD %b", script.text.data(), script.text.size())));
      if (!r) throw_failure({at, {}, conn->get()});
    }
    if (auto e = reply_error(r.get()); !e.empty()) throw_failure({at, e});
    std::lock_guard lock(script.mu);
    script.sha = reply_string(r.get());
    return script.sha;
  };
  std::string sha;
  {
    std::lock_guard lock(script.mu);
    sha = script.sha;
  }
  if (sha.empty()) sha = load({});
  std::vector<std::string_view> args;
  args.reserve(argv.size() + 4);
  args.push_back("EVALSHA");
  args.push_back(sha);
  args.push_back("1");
  args.push_back(key);
  args.insert(args.end(), argv.begin(), argv.end());
  for (int attempt = 0;; ++attempt) {
    std::string node;
    Reply r = command(args, idempotent, &node);
    std::string err = reply_error(r.get());
    if (err.empty()) return r;
    if (starts_with(err, "NOSCRIPT") && attempt < 3) {
      // The script cache was flushed (SCRIPT FLUSH, restart, failover), or an ASK led to a node
      // that never saw the script: it did not run.
      {
        std::lock_guard lock(mu_);
        if (node == master_) node.clear();
      }
      sha = load(node);
      args[1] = sha;
      continue;
    }
    throw_failure({name + " at " + node, err});
  }
}

}  // namespace outpost::redis_store
