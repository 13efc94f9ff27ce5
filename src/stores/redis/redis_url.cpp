#include "stores/redis/redis_url.h"

#include <charconv>

#include "core/duration.h"
#include "core/store_params.h"
#include "core/url.h"
#include "outpost/error.h"
#include "stores/redis/redis_scripts.h"

namespace outpost::redis_store {
namespace {

std::string valid_prefix(std::string prefix) {
  if (prefix.size() >= 2 && prefix.front() == '{' && prefix.back() == '}')
    prefix = prefix.substr(1, prefix.size() - 2);
  bool ok = !prefix.empty() && prefix.size() <= 100;
  for (char c : prefix)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.');
  if (!ok)
    throw ConfigError("redis: prefix '" + prefix +
                          "' is invalid (URL parameter prefix): use 1-100 characters "
                          "[A-Za-z0-9_.-], optionally in braces",
                      "redis");
  return prefix;
}

int valid_db(const core::Url& u, std::string_view text, std::string_view where) {
  int db = -1;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), db);
  if (ec != std::errc() || p != text.data() + text.size() || db < 0 || db > 15)
    throw ConfigError("bad URL '" + u.redacted() + "': " + std::string(where) +
                          " must be a database number 0-15, got '" + std::string(text) + "'",
                      "redis");
  return db;
}

// A sentinel master name: what `sentinel monitor NAME ...` accepts in practice.
bool valid_master_name(std::string_view name) {
  if (name.empty() || name.size() > 100) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-' || c == '.'))
      return false;
  return true;
}

}  // namespace

StoreConfig parse_store_url(std::string_view url) {
  auto u = core::Url::parse(url);
  const bool sentinel = u.scheme() == "redis-sentinel";
  if (u.scheme() != "redis" && !sentinel)
    throw ConfigError("not a redis:// or redis-sentinel:// URL: '" + u.redacted() + "'", "redis");
  const std::string scheme = u.scheme() + "://";
  if (!u.hierarchical() || u.hosts().empty() || u.hosts().front().host.empty())
    throw ConfigError("bad URL '" + u.redacted() + "': " + scheme + " needs host:port", "redis");
  StoreConfig c;
  ClientOptions& co = c.client;
  for (auto hp : u.hosts()) {
    if (hp.port == 0) hp.port = sentinel ? 26379 : 6379;
    co.seeds.push_back(hp);
  }
  co.password = u.password();
  if (sentinel) {
    if (!valid_master_name(u.path()))
      throw ConfigError("bad URL '" + u.redacted() +
                            "': redis-sentinel:// needs the master's name as its path "
                            "(/NAME, [A-Za-z0-9_.-]), got '" +
                            u.path() + "'",
                        "redis");
    co.sentinel_master = u.path();
    if (auto db = u.param("db")) co.db = valid_db(u, *db, "parameter db");
    co.sentinel_password = u.param("sentinel_password").value_or("");
  } else if (!u.path().empty()) {
    co.db = valid_db(u, u.path(), "the path");
  }
  c.prefix = valid_prefix(u.param("prefix").value_or("outbox"));
  if (auto t = u.int_param("timeout_ms", 1, 600'000)) co.timeout = std::chrono::milliseconds(*t);
  const bool writer_lease = u.bool_param("writer_lease").value_or(true);
  c.writer_lease = kDefaultWriterLease;
  if (auto ms = u.int_param("writer_lease_ms", 100, 3'600'000)) c.writer_lease = Duration(*ms);
  if (!writer_lease) c.writer_lease = Duration(0);
  c.archive = u.bool_param("archive");
  c.archive_retention = core::duration_param(u, "archive_retention");
  c.dead_retention = core::duration_param(u, "dead_retention");
  if (auto n = u.int_param("partitions", 1, 1024)) c.partitions = static_cast<int>(*n);
  u.reject_unknown();
  co.slot_key = "{" + c.prefix + "}";
  return c;
}

std::string append_script() {
  // As redis_store.cpp's append script.
  return std::string(kPrologue) + kAppendFn + kAppend;
}

}  // namespace outpost::redis_store
