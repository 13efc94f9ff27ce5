// Registers the Redis store with the store conformance suite twice: "redis" on a standalone
// server (OUTPOST_TEST_REDIS_URL) and "redis_cluster" on a 3-master Redis Cluster
// (OUTPOST_TEST_REDIS_CLUSTER_URL). Each make() uses a fresh prefix; append_in_tx runs the
// documented hiredis sequence on a raw redisContext: MULTI, append(TxHandle::redis_multi), then
// EXEC or DISCARD.

#include <hiredis/hiredis.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "core/url.h"
#include "outpost/error.h"
#include "outpost/stores/redis.h"
#include "store_cases.h"

namespace {

using outpost::testing::env;

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Ctx = std::unique_ptr<redisContext, CtxFree>;
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

Reply run(redisContext* c, const std::string& cmd, const std::string& arg = {}) {
  redisReply* r = arg.empty() ? static_cast<redisReply*>(redisCommand(c, cmd.c_str()))
                              : static_cast<redisReply*>(
                                    redisCommand(c, (cmd + " %b").c_str(), arg.data(), arg.size()));
  if (!r) throw std::runtime_error("redis test helper: " + cmd + ": " + c->errstr);
  return Reply(r);
}

Ctx connect(const std::string& host, int port, int db) {
  Ctx c(redisConnect(host.c_str(), port));
  if (!c || c->err) throw std::runtime_error("redis test helper: cannot connect");
  if (db != 0) run(c.get(), "SELECT " + std::to_string(db));
  return c;
}

// A raw connection to the node that owns `key` (follows one MOVED on a cluster).
Ctx connect_for_key(const std::string& url, const std::string& key) {
  auto u = outpost::core::Url::parse(url);
  int db = u.path().empty() ? 0 : std::stoi(u.path());
  const auto& hp = u.hosts().front();
  Ctx c = connect(hp.host, hp.port ? hp.port : 6379, db);
  Reply r = run(c.get(), "EXISTS", key);
  if (r->type == REDIS_REPLY_ERROR && std::string(r->str).rfind("MOVED ", 0) == 0) {
    std::string target = std::string(r->str).substr(std::string(r->str).rfind(' ') + 1);
    auto colon = target.rfind(':');
    return connect(target.substr(0, colon), std::stoi(target.substr(colon + 1)), 0);
  }
  return c;
}

// Deletes every key matching `pattern` on every node of the URL.
void delete_matching(const std::string& url, const std::string& pattern) {
  auto u = outpost::core::Url::parse(url);
  int db = u.path().empty() ? 0 : std::stoi(u.path());
  for (const auto& hp : u.hosts()) {
    Ctx c;
    try {
      c = connect(hp.host, hp.port ? hp.port : 6379, db);
    } catch (const std::exception&) {
      continue;
    }
    std::string cursor = "0";
    do {
      Reply r(static_cast<redisReply*>(redisCommand(
          c.get(), "SCAN %s MATCH %b COUNT 1000", cursor.c_str(), pattern.data(), pattern.size())));
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) break;
      cursor = r->element[0]->str;
      for (std::size_t i = 0; i < r->element[1]->elements; ++i) {
        const redisReply* k = r->element[1]->element[i];
        Reply d(static_cast<redisReply*>(redisCommand(c.get(), "DEL %b", k->str, k->len)));
      }
    } while (cursor != "0");
  }
}

// Deletes the outbox of the prefix, and its partitions' key spaces ({prefix:pN}) when a test
// opened it with partitions=N.
void delete_prefix(const std::string& url, const std::string& prefix) {
  delete_matching(url, "{" + prefix + "}:*");
  delete_matching(url, "{" + prefix + ":p*}:*");
}

std::string with_prefix(const std::string& url, const std::string& prefix) {
  return url + (url.find('?') == std::string::npos ? "?" : "&") + "prefix=" + prefix;
}

outpost::testing::StoreCase redis_case(std::string name, const char* var) {
  return {
      .name = std::move(name),
      .unavailable_reason =
          [var] { return env(var) ? std::string() : std::string(var) + " not set"; },
      .make =
          [var](const outpost::StoreOptions& options) {
            const std::string base = *env(var);
            const std::string prefix = outpost::testing::unique_name("conf_");
            const std::string url = with_prefix(base, prefix);
            outpost::testing::StoreFixture f;
            f.store = outpost::open_redis_store(url, options);
            f.url = url;
            f.single_writer = true;  // writer_lease defaults to true
            f.open_again = [url, options] {
              return std::shared_ptr<outpost::Store>(outpost::open_redis_store(url, options));
            };
            std::shared_ptr<outpost::Store> store = f.store;
            f.append_in_tx = [base, prefix, store](std::span<const outpost::Event> events,
                                                   bool commit) {
              Ctx c = connect_for_key(base, "{" + prefix + "}:seq");
              Reply m = run(c.get(), "MULTI");
              if (m->type == REDIS_REPLY_ERROR) throw std::runtime_error(m->str);
              // The user's own business write, in the same transaction.
              Reply s = run(c.get(), "SET {" + prefix + "}:business 1");
              store->append(events, outpost::TxHandle::redis_multi(c.get()));
              Reply e = run(c.get(), commit ? "EXEC" : "DISCARD");
              if (e->type == REDIS_REPLY_ERROR) throw std::runtime_error(e->str);
              // As docs/redis.md tells users: check every element of the EXEC reply (the append
              // script rejects a duplicate id there, having written nothing).
              for (std::size_t i = 0; e->type == REDIS_REPLY_ARRAY && i < e->elements; ++i) {
                const redisReply* r = e->element[i];
                if (r->type != REDIS_REPLY_ERROR) continue;
                const std::string err(r->str, r->len);
                throw outpost::Error(err.find("OUTPOST_DUPLICATE") != std::string::npos
                                         ? outpost::ErrorCode::conflict
                                         : outpost::ErrorCode::backend,
                                     "redis", err);
              }
            };
            f.cleanup = [base, prefix] { delete_prefix(base, prefix); };
            return f;
          },
  };
}

const bool registered_standalone =
    outpost::testing::register_store_case(redis_case("redis", "OUTPOST_TEST_REDIS_URL"));
const bool registered_cluster = outpost::testing::register_store_case(
    redis_case("redis_cluster", "OUTPOST_TEST_REDIS_CLUSTER_URL"));

}  // namespace
