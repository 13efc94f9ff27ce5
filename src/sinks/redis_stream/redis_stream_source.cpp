// The Redis Streams source (`redis-stream://host:port/STREAM`): XREAD from the group's
// checkpoint, the entry id as position. Entries are the ones the Redis Streams sink writes
// (fields id, type, key, payload, occurred_at, headers). After each commit the position is
// mirrored in the hash `<STREAM>:checkpoints` (field = group), the registry the sink's trimming
// reads, so entries this group has not consumed are never trimmed away.
//
// A checkpoint past the stream's last id is not an error here, unlike on NATS and Kafka: entry
// ids are the server clock's milliseconds, so a stream deleted and re-created (or restored from
// an older snapshot, or failed over to a replica that lacked its tail) gives its next entries
// ids after any checkpoint taken before, and the group reads them all; stopping would stop every
// group after such a failover for nothing (docs/consumers.md, "A log deleted and re-created").

#include <hiredis/hiredis.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "consume/sources.h"
#include "outpost/error.h"
#include "outpost/json.h"
#include "outpost/key_seq.h"
#include "sinks/redis_stream/redis_stream_common.h"

namespace outpost::consume {
namespace {

using redis_stream::ContextPtr;
using redis_stream::ReplyPtr;

struct Config : redis_stream::Endpoint {
  std::string stream;
};

std::string str(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
             ? std::string(r->str, r->len)
             : std::string();
}

// str() without the copy: valid while the reply lives.
std::string_view view(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS)
             ? std::string_view(r->str, r->len)
             : std::string_view();
}

// One stream entry as a Message: the event rebuilt field by field (exact bytes). `raw` stays
// empty: a dead letter encodes the event when it is parked (dead_letter_payload).
Message to_message(const redisReply* entry) {
  Message m;
  m.position = str(entry->element[0]);
  const redisReply* fields = entry->element[1];
  std::string_view id_text, occurred, headers, key_seq;
  bool has_type = false;
  for (std::size_t i = 0; fields && i + 1 < fields->elements; i += 2) {
    std::string_view k = view(fields->element[i]);
    std::string_view v = view(fields->element[i + 1]);
    if (k == "id")
      id_text = v;
    else if (k == "type")
      m.event.type = v, has_type = true;
    else if (k == "key")
      m.event.key = v;
    else if (k == "payload")
      m.event.payload = v;
    else if (k == "occurred_at")
      occurred = v;
    else if (k == "headers")
      headers = v;
    else if (k == kKeySeqField)  // the key position (outpost/key_seq.h), keyed events only
      key_seq = v;
  }
  if (std::int64_t seq = 0; !m.event.key.empty() && !key_seq.empty()) {
    auto [end, ec] = std::from_chars(key_seq.data(), key_seq.data() + key_seq.size(), seq);
    if (ec == std::errc{} && end == key_seq.data() + key_seq.size() && seq > 0) m.event.seq = seq;
  }
  if (auto id = EventId::parse(id_text)) m.event.id = *id;
  if (auto t = parse_rfc3339(occurred)) m.event.occurred_at = *t;
  if (!headers.empty() && headers != "{}") {
    auto j = nlohmann::json::parse(headers, nullptr, false);
    if (j.is_object())
      for (auto& [k, v] : j.items())
        if (v.is_string()) m.event.headers[k] = v.get<std::string>();
  }
  if (!has_type || m.event.type.empty())
    m.parse_error = "not an outpost event: stream entry " + m.position + " has no 'type' field";
  else if (m.event.id.is_nil())
    m.parse_error = "not an outpost event: stream entry " + m.position + " has no valid 'id' field";
  return m;
}

// MS-SEQ or MS, decimal, each part below 2^64, as XADD makes them (Redis refuses a larger
// part in every command that reads the id).
bool entry_id(const std::string& text) {
  auto digits = [](std::string_view d) {
    std::uint64_t n = 0;
    return !d.empty() &&
           std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
           std::from_chars(d.data(), d.data() + d.size(), n).ec == std::errc{};
  };
  auto dash = text.find('-');
  if (dash == std::string::npos) return digits(text);
  return digits(std::string_view(text).substr(0, dash)) &&
         digits(std::string_view(text).substr(dash + 1));
}

// An entry id as (milliseconds, sequence), for comparing; a missing sequence is 0 (as XREAD
// reads "MS"), a number beyond 64 bits the largest one.
std::pair<std::uint64_t, std::uint64_t> entry_order(std::string_view text) {
  auto number = [](std::string_view d) {
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(d.data(), d.data() + d.size(), n);
    return ec == std::errc::result_out_of_range ? UINT64_MAX : n;
  };
  auto dash = text.find('-');
  if (dash == std::string_view::npos) return {number(text), 0};
  return {number(text.substr(0, dash)), number(text.substr(dash + 1))};
}

class RedisStreamSource final : public Source {
 public:
  explicit RedisStreamSource(Config c) : c_(std::move(c)) {}

  std::string_view name() const override { return "redis-stream"; }
  std::string url() const override { return c_.where; }
  bool can_read_ahead() const override { return true; }

  // The log is the stream in its database (db): host, port, credentials and the tuning and
  // trimming parameters may differ (a moved server, one URL for relay and consumer).
  bool same_log(const std::string& stored_url) const override {
    if (stored_url == c_.where) return true;
    try {
      auto u = core::Url::parse(stored_url);
      return u.scheme() == "redis-stream" && u.path() == c_.stream &&
             u.int_param("db", 0, 1'000'000).value_or(0) == c_.db;
    } catch (const Error&) {
      return false;
    }
  }

  void seek(const std::string& position) override { last_ = position.empty() ? "0-0" : position; }

  std::vector<Message> read(std::size_t max, Duration wait) override {
    std::string count = std::to_string(max);
    std::string block = std::to_string(std::max<std::int64_t>(wait.count(), 1));
    ReplyPtr r =
        command({"XREAD", "COUNT", count, "BLOCK", block, "STREAMS", c_.stream, last_}, wait);
    std::vector<Message> out;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return out;  // nil: nothing new
    const redisReply* entries = r->element[0]->element[1];
    out.reserve(entries->elements);
    for (std::size_t i = 0; i < entries->elements; ++i)
      out.push_back(to_message(entries->element[i]));
    if (!out.empty()) last_ = out.back().position;
    return out;
  }

  std::optional<std::int64_t> lag(const std::string& position) override {
    std::string from = "(" + (position.empty() ? std::string("0-0") : position);
    std::int64_t n = 0;
    for (;;) {
      ReplyPtr r = command({"XRANGE", c_.stream, from, "+", "COUNT", "10000"}, Duration(0));
      if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) return n;
      n += static_cast<std::int64_t>(r->elements);
      from = "(" + str(r->element[r->elements - 1]->element[0]);
    }
  }

  void retire(const std::string& group) override {
    try {
      command({"HDEL", c_.stream + ":checkpoints", group}, Duration(0));
    } catch (const Error&) {
    }
  }

  void committed(const std::string& group, const std::string& position) override {
    try {
      command({"HSET", c_.stream + ":checkpoints", group, position}, Duration(0));
    } catch (const Error&) {
      // The next commit registers again; until then trimming stops at the older position.
    }
  }

  // Entry ids: "0-0" is the beginning (XREAD reads after it); a time T is the entry just before
  // the first one added at or after T (ids begin with their XADD's milliseconds). A position
  // past the last id the stream gave out is refused: the group would skip every entry added
  // until then (docs/consumers.md, "Moving and deleting a group").
  std::string position_for(const SeekTarget& t) override {
    using K = SeekTarget::Kind;
    if (t.kind == K::position) {
      if (!entry_id(t.position))
        throw ConfigError("redis-stream source: position '" + t.position +
                          "' is not a stream entry id (MS-SEQ, each a number below 2^64, e.g. "
                          "1764000000000-0)");
      std::string end = last_generated_id();
      if (entry_order(t.position) > entry_order(end))
        throw ConfigError("redis-stream source: position '" + t.position +
                          "' is past the end of stream '" + c_.stream + "' (its end: " + end +
                          (end == "0-0" ? ", it holds no entries" : ", its last entry id") + ")");
      return t.position;
    }
    if (t.kind == K::beginning) return "0-0";
    std::string before = "+";
    if (t.kind == K::time) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time.time_since_epoch());
      ReplyPtr first =
          command({"XRANGE", c_.stream,
                   std::to_string(std::max<std::int64_t>(ms.count(), 0)) + "-0", "+", "COUNT", "1"},
                  Duration(0));
      if (first->type == REDIS_REPLY_ARRAY && first->elements > 0)
        before = "(" + str(first->element[0]->element[0]);
    }
    ReplyPtr last = command({"XREVRANGE", c_.stream, before, "-", "COUNT", "1"}, Duration(0));
    if (last->type == REDIS_REPLY_ARRAY && last->elements > 0)
      return str(last->element[0]->element[0]);
    return "0-0";
  }

  void set_registration(const std::string& group,
                        const std::optional<std::string>& position) override {
    if (position)
      command({"HSET", c_.stream + ":checkpoints", group, *position}, Duration(0));
    else
      command({"HDEL", c_.stream + ":checkpoints", group}, Duration(0));
  }

 private:
  // The id of the last entry ever added to the stream (XINFO STREAM's last-generated-id, which
  // entries deleted since do not lower); "0-0" when there is no stream.
  std::string last_generated_id() {
    if (command({"EXISTS", c_.stream}, Duration(0))->integer == 0) return "0-0";
    ReplyPtr info = command({"XINFO", "STREAM", c_.stream}, Duration(0));
    for (std::size_t i = 0; info->type == REDIS_REPLY_ARRAY && i + 1 < info->elements; i += 2)
      if (view(info->element[i]) == "last-generated-id") return str(info->element[i + 1]);
    throw Error(ErrorCode::backend, "redis-stream",
                c_.where + ": XINFO STREAM " + c_.stream + " gave no last-generated-id");
  }

  // Runs one command, (re)connecting first; throws ConnectionError on a broken connection and
  // Error(backend) on an error reply. `extra` lengthens the socket timeout (blocking reads).
  ReplyPtr command(const std::vector<std::string>& args, Duration extra) {
    if (!ctx_) connect();
    redisSetTimeout(ctx_.get(), redis_stream::to_timeval(c_.timeout + extra));
    ReplyPtr r = redis_stream::run_command(ctx_.get(), args);
    if (!r) {
      std::string why = ctx_->errstr;
      ctx_.reset();
      throw ConnectionError("redis-stream", c_.where + ": " + args[0] + ": " + why);
    }
    if (r->type == REDIS_REPLY_ERROR)  // (str() reads only string replies)
      throw Error(ErrorCode::backend, "redis-stream",
                  c_.where + ": " + args[0] + (args[0] == "AUTH" ? " (URL password)" : "") + ": " +
                      std::string(r->str, r->len));
    return r;
  }

  void connect() {
    ContextPtr ctx(
        redisConnectWithTimeout(c_.host.c_str(), c_.port, redis_stream::to_timeval(c_.timeout)));
    if (!ctx || ctx->err)
      throw ConnectionError("redis-stream", "cannot connect to " + c_.where + ": " +
                                                (ctx ? ctx->errstr : "out of memory"));
    ctx_ = std::move(ctx);
    try {
      if (!c_.password.empty()) {
        if (c_.user.empty())
          command({"AUTH", c_.password}, Duration(0));
        else
          command({"AUTH", c_.user, c_.password}, Duration(0));
      }
      if (c_.db != 0) command({"SELECT", std::to_string(c_.db)}, Duration(0));
    } catch (...) {
      ctx_.reset();
      throw;
    }
  }

  Config c_;
  ContextPtr ctx_;
  std::string last_ = "0-0";
};

}  // namespace

std::unique_ptr<Source> open_redis_stream_source(std::string_view text) {
  auto url = core::Url::parse(text);
  Config c;
  c.where = url.redacted();
  auto bad = [&](const std::string& what) {
    return ConfigError("redis-stream source URL " + c.where + ": " + what, "redis-stream");
  };
  redis_stream::read_endpoint(url, Duration{10'000}, c, bad);
  c.stream = url.path();
  if (c.stream.empty()) throw bad("stream name (the URL path) missing");
  // Only the sink's placeholder is refused: other braces are a hash tag, part of the name (a
  // stream on Redis Cluster needs one, docs/redis.md).
  if (c.stream.find("{type}") != std::string::npos)
    throw bad("a consumer reads one stream: '{type}' templates are for the sink");
  redis_stream::read_trimming(url);  // the sink's own parameters: one URL serves relay and consumer
  url.reject_unknown();
  return std::make_unique<RedisStreamSource>(std::move(c));
}

}  // namespace outpost::consume
