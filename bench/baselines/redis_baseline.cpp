// The raw Redis baseline for `outpost bench --store redis://...`: what a hand-written sorted-set
// outbox does at best (docs/benchmarks.md), with no outpost code. One producer connection pipelines
// HSET (the event hash) + ZADD (pending, scored by time) for `batch` events per round trip,
// while one consumer connection claims with a bare Lua script (ZRANGEBYSCORE + ZREM + ZADD
// active + HMGET of the event, `batch` per call) and deletes the claimed events with one
// pipelined round trip (DEL + ZREM per event). Keys live under their own hash tag
// {outpost_baseline_PID} on the node that owns it, and are deleted afterwards.

#include <hiredis/hiredis.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "baseline.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::bench {
namespace {

struct CtxFree {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Ctx = std::unique_ptr<redisContext, CtxFree>;
using Reply = std::unique_ptr<redisReply, ReplyFree>;

constexpr const char* kClaim = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], now + 30000, id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HMGET', ARGV[1] .. id, 'type', 'key', 'payload', 'occurred_at')
end
return out
)lua";

Ctx connect(const std::string& host, int port, const core::Url& url) {
  timeval tv{5, 0};
  Ctx c(redisConnectWithTimeout(host.c_str(), port, tv));
  if (!c || c->err)
    throw ConnectionError("redis", "baseline: cannot connect to " + host + ":" +
                                       std::to_string(port) +
                                       (c ? std::string(": ") + c->errstr : ""));
  if (!url.password().empty())
    Reply(static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", url.password().c_str())));
  if (!url.path().empty() && url.path() != "0")
    Reply(static_cast<redisReply*>(redisCommand(c.get(), "SELECT %s", url.path().c_str())));
  return c;
}

// A connection to the node owning `key` (a cluster node answers MOVED for other slots).
Ctx connect_for(const core::Url& url, const std::string& key) {
  const auto& hp = url.hosts().front();
  Ctx c = connect(hp.host, hp.port ? hp.port : 6379, url);
  Reply r(static_cast<redisReply*>(redisCommand(c.get(), "EXISTS %s", key.c_str())));
  if (r && r->type == REDIS_REPLY_ERROR && std::string(r->str).rfind("MOVED ", 0) == 0) {
    std::string target(r->str);
    target = target.substr(target.rfind(' ') + 1);
    auto colon = target.rfind(':');
    return connect(target.substr(0, colon), std::stoi(target.substr(colon + 1)), url);
  }
  return c;
}

void read_replies(redisContext* c, std::size_t n, const char* what) {
  for (std::size_t i = 0; i < n; ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK)
      throw ConnectionError("redis", std::string("baseline: ") + what + ": " + c->errstr);
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR)
      throw Error(ErrorCode::backend, "redis", std::string("baseline: ") + what + ": " + r->str);
  }
}

}  // namespace

BaselineResult redis_baseline(const BaselineRequest& request) {
  auto url = core::Url::parse(request.url);
  for (const auto& [k, v] : url.query()) url.param(k);  // store parameters do not apply here
  const std::size_t total = request.events;
  const std::size_t batch = request.batch ? request.batch : 100;
  const std::string tag = "{outpost_baseline_" + std::to_string(::getpid()) + "}";
  const std::string pending = tag + ":pending", active = tag + ":active", ev = tag + ":e:";
  const std::string payload(request.payload_bytes, 'x');

  Ctx producer = connect_for(url, pending);
  Ctx consumer = connect_for(url, pending);
  Reply loaded(static_cast<redisReply*>(redisCommand(consumer.get(), "SCRIPT LOAD %s", kClaim)));
  if (!loaded || loaded->type != REDIS_REPLY_STRING)
    throw Error(ErrorCode::backend, "redis", "baseline: SCRIPT LOAD failed");
  const std::string sha(loaded->str, loaded->len);

  std::atomic<bool> failed{false};
  std::string error;
  auto t0 = std::chrono::steady_clock::now();
  std::thread produce([&] {
    try {
      const std::string ts = format_rfc3339(now());
      for (std::size_t done = 0; done < total && !failed; done += batch) {
        std::size_t n = std::min(batch, total - done);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
        const std::string score = std::to_string(ms);
        for (std::size_t i = 0; i < n; ++i) {
          const std::string id = EventId::generate().str();
          const std::string key = ev + id;
          const std::string k = "k" + std::to_string((done + i) % 1000);
          redisAppendCommand(producer.get(),
                             "HSET %b type bench.event key %b payload %b occurred_at %b",
                             key.data(), key.size(), k.data(), k.size(), payload.data(),
                             payload.size(), ts.data(), ts.size());
          redisAppendCommand(producer.get(), "ZADD %b %b %b", pending.data(), pending.size(),
                             score.data(), score.size(), id.data(), id.size());
        }
        read_replies(producer.get(), n * 2, "HSET+ZADD");
      }
    } catch (const std::exception& e) {
      error = e.what();
      failed = true;
    }
  });
  std::size_t consumed = 0;
  const std::string limit = std::to_string(batch);
  try {
    while (consumed < total && !failed) {
      Reply r(static_cast<redisReply*>(redisCommand(
          consumer.get(), "EVALSHA %s 2 %b %b %b %s", sha.c_str(), pending.data(), pending.size(),
          active.data(), active.size(), ev.data(), ev.size(), limit.c_str())));
      if (!r || r->type != REDIS_REPLY_ARRAY)
        throw Error(
            ErrorCode::backend, "redis",
            std::string("baseline: claim: ") + (r ? r->str ? r->str : "?" : consumer->errstr));
      if (r->elements == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      std::size_t sent = 0;
      for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
        const std::string id(r->element[i]->str, r->element[i]->len);
        const std::string key = ev + id;
        redisAppendCommand(consumer.get(), "DEL %b", key.data(), key.size());
        redisAppendCommand(consumer.get(), "ZREM %b %b", active.data(), active.size(), id.data(),
                           id.size());
        sent += 2;
      }
      read_replies(consumer.get(), sent, "DEL+ZREM");
      consumed += r->elements / 2;
    }
  } catch (const std::exception& e) {
    if (!failed) error = e.what();
    failed = true;
  }
  produce.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Reply(static_cast<redisReply*>(redisCommand(consumer.get(), "DEL %b %b", pending.data(),
                                              pending.size(), active.data(), active.size())));
  if (failed) throw Error(ErrorCode::backend, "redis", error);
  BaselineResult result;
  result.events_per_s = seconds > 0 ? static_cast<double>(consumed) / seconds : 0;
  result.what = "pipelined HSET+ZADD " + std::to_string(batch) +
                " events/round trip + Lua claim of " + std::to_string(batch) +
                " and pipelined DEL+ZREM, concurrently";
  return result;
}

}  // namespace outpost::bench
