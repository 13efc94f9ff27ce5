// The raw Redis Streams baseline for `outpost bench --sink redis-stream://...`: the same number
// of entries (the sink's six fields, payload_bytes of payload) appended by a plain hiredis loop,
// `batch` pipelined XADDs per round trip. No outpost code runs here. Stream: the sink URL's
// stream with `{type}` -> "baseline", plus ":baseline"; deleted afterwards.

#include <hiredis/hiredis.h>

#include <chrono>
#include <memory>
#include <string>

#include "baseline.h"
#include "core/url.h"
#include "outpost/error.h"

namespace outpost::bench {

BaselineResult redis_stream_baseline(const BaselineRequest& request) {
  const auto url = core::Url::parse(request.url);
  std::string stream = url.path();
  if (auto pos = stream.find("{type}"); pos != std::string::npos)
    stream.replace(pos, 6, "baseline");
  stream += ":baseline";
  const auto& hp = url.hosts().at(0);
  std::unique_ptr<redisContext, void (*)(redisContext*)> c(
      redisConnect(hp.host.c_str(), hp.port ? hp.port : 6379), redisFree);
  if (!c || c->err)
    throw ConnectionError("redis-stream",
                          "redis-stream baseline: " + std::string(c ? c->errstr : "oom"));
  if (!url.password().empty())
    freeReplyObject(redisCommand(c.get(), "AUTH %s", url.password().c_str()));
  if (auto db = url.param("db")) freeReplyObject(redisCommand(c.get(), "SELECT %s", db->c_str()));

  const std::string payload(request.payload_bytes, 'x');
  const std::string id = "0190a0b0-0000-7000-8000-000000000000";
  const std::string occurred = "2026-11-22T00:00:00.000000Z";
  const std::size_t batch = request.batch ? request.batch : 100;
  const auto start = std::chrono::steady_clock::now();
  std::size_t ok = 0;
  for (std::size_t at = 0; at < request.events; at += batch) {
    const std::size_t n = std::min(batch, request.events - at);
    for (std::size_t i = 0; i < n; ++i) {
      const std::string key = "key-" + std::to_string((at + i) % 1000);
      const char* argv[] = {
          "XADD",           stream.c_str(), "*",         "id",      id.c_str(),      "type",
          "baseline",       "key",          key.c_str(), "payload", payload.c_str(), "occurred_at",
          occurred.c_str(), "headers",      "{}"};
      const size_t lens[] = {
          4,  stream.size(),   1, 2, id.size(), 4, 8, 3, key.size(), 7, payload.size(),
          11, occurred.size(), 7, 2};
      redisAppendCommandArgv(c.get(), 15, argv, lens);
    }
    for (std::size_t i = 0; i < n; ++i) {
      void* reply = nullptr;
      if (redisGetReply(c.get(), &reply) != REDIS_OK)
        throw ConnectionError("redis-stream", std::string("redis-stream baseline: ") + c->errstr);
      if (static_cast<redisReply*>(reply)->type != REDIS_REPLY_ERROR) ++ok;
      freeReplyObject(reply);
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  freeReplyObject(redisCommand(c.get(), "DEL %s", stream.c_str()));
  BaselineResult r;
  r.events_per_s = seconds > 0 ? ok / seconds : 0;
  r.what = "hiredis XADD, " + std::to_string(batch) + " pipelined per round trip";
  return r;
}

}  // namespace outpost::bench
