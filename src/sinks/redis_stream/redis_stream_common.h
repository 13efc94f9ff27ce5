#pragma once
// What the Redis Streams sink and the Redis Streams source (redis_stream_source.cpp,
// which reads what the sink writes) share: the connection part of a redis-stream:// URL and its
// trimming parameters (one URL serves relay and consumer), hiredis' owning pointers, a timeout as
// a timeval, and one command from a list of binary-safe arguments.

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/url.h"
#include "outpost/event.h"

namespace outpost::redis_stream {

struct ContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
struct ReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

inline timeval to_timeval(Duration d) {
  return timeval{static_cast<time_t>(d.count() / 1000),
                 static_cast<suseconds_t>((d.count() % 1000) * 1000)};
}

// Runs `args` as one command; null when the connection failed (ctx->errstr says why).
inline ReplyPtr run_command(redisContext* ctx, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) {
    argv.push_back(a.data());
    lens.push_back(a.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(ctx, static_cast<int>(argv.size()), argv.data(), lens.data())));
}

// Where to connect: host:port, user:password, ?db= and ?timeout_ms= of a redis-stream:// URL.
struct Endpoint {
  std::string host, user, password;
  int port = 6379;
  int db = 0;
  Duration timeout{10'000};
  std::string where;  // the redacted URL, for messages
  // Every host of the URL (the sink: seeds of a Redis Cluster, docs/redis.md); host:port above
  // is the first.
  std::vector<core::HostPort> seeds;
};

// Fills `e` from `url` (timeout_ms absent: `default_timeout`); `bad(what)` makes the ConfigError
// thrown for a wrong part.
// `many_hosts`: several host:port (a Redis Cluster's seeds) are allowed.
template <typename Bad>
void read_endpoint(const core::Url& url, Duration default_timeout, Endpoint& e, Bad&& bad,
                   bool many_hosts = false) {
  if (url.hosts().empty() || (!many_hosts && url.hosts().size() != 1))
    throw bad(many_hosts ? "host:port expected" : "exactly one host:port expected");
  for (const auto& hp : url.hosts()) {
    if (hp.host.empty()) throw bad("a host is empty");
    e.seeds.push_back({hp.host, hp.port ? hp.port : std::uint16_t{6379}});
  }
  e.host = url.hosts().front().host;
  e.port = url.hosts().front().port ? url.hosts().front().port : 6379;
  e.user = url.user();
  e.password = url.password();
  e.db = static_cast<int>(url.int_param("db", 0, 1'000'000).value_or(0));
  e.timeout = Duration{url.int_param("timeout_ms", 1, 3'600'000).value_or(default_timeout.count())};
}

// The sink's trimming: ?maxlen= (0: none) and ?trim_every= (default maxlen/10, at least 100).
struct Trimming {
  std::int64_t maxlen = 0;
  std::int64_t trim_every = 0;
};
inline Trimming read_trimming(const core::Url& url) {
  Trimming t;
  t.maxlen = url.int_param("maxlen", 0, std::int64_t{1} << 40).value_or(0);
  t.trim_every = url.int_param("trim_every", 1, std::int64_t{1} << 40)
                     .value_or(std::max<std::int64_t>(t.maxlen / 10, 100));
  return t;
}

}  // namespace outpost::redis_stream
