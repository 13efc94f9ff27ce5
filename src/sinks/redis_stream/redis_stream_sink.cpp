// Redis Streams sink over hiredis: see include/outpost/sinks/redis_stream.h for the contract.
//
// One pipelined round trip per batch (all XADDs written, then all replies read). The commands
// are encoded (RESP) straight into one reused buffer handed to hiredis at once, with the stream
// name rendered once per event type and the id/time formatted without allocations. Trimming runs
// as one Lua script per stream every `trim_every` appended entries, so the "oldest unread entry
// of any registered consumer" is computed and applied atomically on the server: a consumer group
// cannot advance (or be created) between the check and the XTRIM.

#include "outpost/sinks/redis_stream.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/key_seq.h"
#include "core/sink_batch.h"
#include "core/url.h"
#include "outpost/error.h"
#include "sinks/redis_stream/redis_stream_classify.h"
#include "sinks/redis_stream/redis_stream_common.h"
#include "stores/redis/redis_durability.h"

namespace outpost {

namespace redis_stream {

Outcome classify(int io_error, std::string_view reply_error) {
  if (io_error != 0) return Outcome::unavailable;
  const std::string_view code = reply_error.substr(0, reply_error.find(' '));
  for (std::string_view busy : {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM",
                                "MISCONF", "READONLY", "NOREPLICAS", "NOAUTH", "WRONGPASS"})
    if (code == busy) return Outcome::unavailable;
  return Outcome::refused;
}

}  // namespace redis_stream

namespace {

// The one place a failure becomes an outcome (redis_stream::classify), its text naming the class.
DeliveryResult outcome_of(int io_error, std::string_view reply_error, const std::string& why) {
  return redis_stream::classify(io_error, reply_error) == redis_stream::Outcome::unavailable
             ? core::unavailable(why)
             : core::refused(why);
}

using redis_stream::ContextPtr;
using redis_stream::ReplyPtr;

// KEYS: stream, checkpoint registry. ARGV: maxlen, largest number of entries to inspect.
// Removes entries only below both the maxlen cut and every registered consumer's oldest unread
// entry (group: last-delivered-id + 1 and its oldest pending entry; registry: checkpoint + 1).
constexpr const char* kTrimScript = R"lua(
local stream, registry = KEYS[1], KEYS[2]
local maxlen, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local len = redis.call('XLEN', stream)
if len <= maxlen then return 0 end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  if not ms then ms, seq = string.match(id, '^(%d+)$'), '0' end
  if not ms then return nil end
  return tonumber(ms), tonumber(seq)
end
local count = len - maxlen + 1
if count > cap then count = cap end
local cut = redis.call('XRANGE', stream, '-', '+', 'COUNT', count)
if #cut == 0 then return 0 end
local t_ms, t_seq = parse(cut[#cut][1])
local function bound(ms, seq)
  if ms and (ms < t_ms or (ms == t_ms and seq < t_seq)) then t_ms, t_seq = ms, seq end
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local info = {}
  for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
  local ms, seq = parse(info['last-delivered-id'])
  if ms then bound(ms, seq + 1) end
  if tonumber(info['pending']) > 0 then
    local p = redis.call('XPENDING', stream, info['name'])
    if p[2] then bound(parse(p[2])) end
  end
end
local cps = redis.call('HGETALL', registry)
for i = 2, #cps, 2 do
  local ms, seq = parse(cps[i])
  if ms then bound(ms, seq + 1) else bound(0, 0) end
end
return redis.call('XTRIM', stream, 'MINID', '~', string.format('%.0f-%.0f', t_ms, t_seq))
)lua";

struct RedisStreamConfig : redis_stream::Endpoint {
  std::string stream_template;
  std::int64_t maxlen = 0;
  std::int64_t trim_every = 0;
};

class RedisStreamSink final : public Sink {
 public:
  explicit RedisStreamSink(RedisStreamConfig config) : config_(std::move(config)) {}

  std::string_view name() const override { return "redis-stream"; }

  // On Redis Cluster a batch sent to a node that does not serve its streams' slot is refused
  // whole at queue time (MOVED: nothing was added); it is sent again to the node named, a few
  // times at most (a slot migrating, or streams in different slots: docs/redis.md).
  std::vector<DeliveryResult> deliver(std::span<const StoredEvent> events) override {
    std::vector<DeliveryResult> results;
    for (int redirects = 0;; ++redirects) {
      moved_to_.clear();
      results = deliver_once(events);
      if (moved_to_.empty() || redirects == 3) return results;
      const auto colon = moved_to_.rfind(':');
      int port = 0;
      if (colon == std::string::npos ||
          std::from_chars(moved_to_.data() + colon + 1, moved_to_.data() + moved_to_.size(), port)
                  .ec != std::errc())
        return results;
      config_.host = moved_to_.substr(0, colon);
      config_.port = port;
      ctx_.reset();
    }
  }

 private:
  std::vector<DeliveryResult> deliver_once(std::span<const StoredEvent> events) {
    std::vector<DeliveryResult> results(events.size());
    if (events.empty()) return results;
    if (!ctx_) {
      if (auto failure = connect()) {
        for (auto& r : results) r = *failure;
        core::hold_back_failed_keys(events, results);
        return results;
      }
    }

    // MULTI ... EXEC: the batch is applied all or nothing, so an error reply in the middle
    // (-LOADING right after a restart, -OOM) can never let a later event of a key into the
    // stream while an earlier one of that key is missing. Still one round trip.
    // Pointers into streams_ stay valid during the call (node-based map, cleared only here).
    if (streams_.size() >= 4096) streams_.clear();
    std::vector<const std::string*> streams(events.size());
    out_.clear();
    out_ += "*1\r\n$5\r\nMULTI\r\n";
    for (std::size_t i = 0; i < events.size(); ++i) {
      const auto& e = events[i];
      streams[i] = &stream_for(e.type);
      char id[37];
      core::format_event_id(e.id, id);
      const std::string_view occurred = time_.format(e.occurred_at);
      std::string_view headers_json = "{}";
      if (!e.headers.empty()) {
        nlohmann::json headers = nlohmann::json::object();
        for (const auto& [k, v] : e.headers) headers[k] = v;
        headers_text_ = headers.dump();
        headers_json = headers_text_;
      }
      // The W3C trace context also as fields of their own (docs/sinks.md, "Trace context"), so
      // a consumer's tracing code reads it without parsing the headers JSON.
      const auto parent = e.headers.find(header::kTraceparent);
      const auto state = e.headers.find(header::kTracestate);
      // The key position (outpost/key_seq.h), for events with a key.
      char seq[24];
      const std::string_view key_seq = core::format_key_seq(e, seq);
      const int extra_fields =
          (parent != e.headers.end()) + (state != e.headers.end()) + !key_seq.empty();
      out_ += "*";
      const int fields = 15 + 2 * extra_fields;  // at most 21: two digits
      out_ += static_cast<char>('0' + fields / 10);
      out_ += static_cast<char>('0' + fields % 10);
      out_ += "\r\n$4\r\nXADD\r\n";
      bulk(*streams[i]);
      out_ += "$1\r\n*\r\n$2\r\nid\r\n";
      bulk(std::string_view(id, 36));
      out_ += "$4\r\ntype\r\n";
      bulk(e.type);
      out_ += "$3\r\nkey\r\n";
      bulk(e.key);
      out_ += "$7\r\npayload\r\n";
      bulk(e.payload);
      out_ += "$11\r\noccurred_at\r\n";
      bulk(occurred);
      out_ += "$7\r\nheaders\r\n";
      bulk(headers_json);
      if (parent != e.headers.end()) {
        out_ += "$11\r\ntraceparent\r\n";
        bulk(parent->second);
      }
      if (state != e.headers.end()) {
        out_ += "$10\r\ntracestate\r\n";
        bulk(state->second);
      }
      if (!key_seq.empty()) {
        bulk(kKeySeqField);
        bulk(key_seq);
      }
    }
    out_ += "*1\r\n$4\r\nEXEC\r\n";
    if (redisAppendFormattedCommand(ctx_.get(), out_.data(), out_.size()) != REDIS_OK) {
      for (auto& r : results) r = outcome_of(REDIS_ERR_OOM, {}, "redis-stream: out of memory");
      ctx_.reset();  // the output buffer may hold a part of the batch: start over
      core::hold_back_failed_keys(events, results);
      return results;
    }
    if (out_.capacity() > kMaxKeptBuffer) std::string().swap(out_);
    read_transaction(events.size(), streams, results);
    core::hold_back_failed_keys(events, results);

    if (ctx_ && config_.maxlen > 0) {
      for (std::size_t i = 0; i < events.size(); ++i)
        if (results[i].ok()) ++appended_[*streams[i]];
      for (auto& [stream, count] : appended_) {
        if (count < config_.trim_every || !ctx_) continue;
        count = 0;
        trim(stream);  // best effort: a failure leaves the stream longer, never loses anything
      }
    }
    return results;
  }

  std::string host_port() const { return config_.host + ":" + std::to_string(config_.port); }

  // Appends one RESP bulk string to out_.
  void bulk(std::string_view v) {
    char len[24];
    len[0] = '$';
    char* end = std::to_chars(len + 1, len + sizeof len - 2, v.size()).ptr;
    *end++ = '\r';
    *end++ = '\n';
    out_.append(len, static_cast<std::size_t>(end - len));
    out_ += v;
    out_ += "\r\n";
  }

  // The stream of an event of `type` (the template rendered once per type).
  const std::string& stream_for(const std::string& type) {
    if (!per_type_) return config_.stream_template;
    if (auto it = streams_.find(type); it != streams_.end()) return it->second;
    return streams_.emplace(type, core::render_type_template(config_.stream_template, type))
        .first->second;
  }

  // Reads the replies of MULTI, the n queued XADDs and EXEC into `results`.
  void read_transaction(std::size_t n, const std::vector<const std::string*>& streams,
                        std::vector<DeliveryResult>& results) {
    auto fail_all = [&](int io_error, std::string_view reply_error, const std::string& why) {
      const DeliveryResult outcome = outcome_of(io_error, reply_error, why);
      for (auto& r : results) r = outcome;
    };
    std::string queue_error;  // first command rejected at queue time: EXEC will abort
    std::string queue_reply;  // ... and the server's words alone, which classify reads
    for (std::size_t i = 0; i < n + 2; ++i) {
      void* raw = nullptr;
      if (redisGetReply(ctx_.get(), &raw) != REDIS_OK) {
        // Connection broken: the transaction may or may not have run (all or nothing).
        fail_all(ctx_->err ? ctx_->err : REDIS_ERR_IO, {},
                 "redis-stream " + host_port() + ": " + ctx_->errstr +
                     " (reply lost; the batch may have been added)");
        ctx_.reset();
        return;
      }
      ReplyPtr reply(static_cast<redisReply*>(raw));
      if (i < n + 1) {  // MULTI, then one QUEUED per XADD
        if (reply->type == REDIS_REPLY_ERROR && queue_error.empty()) {
          queue_reply.assign(reply->str, reply->len);
          queue_error =
              (i == 0 ? std::string("MULTI") : "XADD " + *streams[i - 1]) + ": " + queue_reply;
        }
        continue;
      }
      // EXEC: an array of per-command replies, or an error/nil when the transaction aborted.
      if (reply->type != REDIS_REPLY_ARRAY || reply->elements != n) {
        std::string why = queue_error;
        std::string server_words = queue_reply;
        if (why.empty() && reply->type == REDIS_REPLY_ERROR) {
          server_words.assign(reply->str, reply->len);
          why = "EXEC: " + server_words;
        }
        if (why.empty()) why = "EXEC returned no results";
        if (server_words.rfind("MOVED ", 0) == 0)  // "MOVED <slot> <host:port>": deliver() resends
          moved_to_ = server_words.substr(server_words.rfind(' ') + 1);
        if (server_words.rfind("CROSSSLOT", 0) == 0 || server_words.rfind("MOVED", 0) == 0)
          why +=
              " (on Redis Cluster every stream of the sink needs the same hash tag, e.g. "
              "redis-stream://.../{outpost}.{type}: docs/redis.md)";
        fail_all(0, server_words, "redis-stream " + why + " (nothing of the batch was added)");
        return;
      }
      for (std::size_t k = 0; k < n; ++k) {
        const redisReply* r = reply->element[k];
        if (r->type == REDIS_REPLY_ERROR)
          results[k] =
              outcome_of(0, std::string_view(r->str, r->len),
                         "redis-stream XADD " + *streams[k] + ": " + std::string(r->str, r->len));
        else
          results[k] = DeliveryResult::delivered();
      }
    }
  }

  // Connects, authenticates and selects the database; the outcome of every event when that
  // failed.
  // The host tried first is the last one that answered (or a MOVED reply named); when it cannot
  // be reached, the URL's other hosts (a cluster's seeds) in turn.
  std::optional<DeliveryResult> connect() {
    std::optional<DeliveryResult> failure = connect_to_current();
    for (std::size_t i = 0; failure && i < config_.seeds.size() && config_.seeds.size() > 1; ++i) {
      config_.host = config_.seeds[i].host;
      config_.port = config_.seeds[i].port;
      failure = connect_to_current();
    }
    return failure;
  }

  std::optional<DeliveryResult> connect_to_current() {
    const timeval tv = redis_stream::to_timeval(config_.timeout);
    ContextPtr ctx(redisConnectWithTimeout(config_.host.c_str(), config_.port, tv));
    if (!ctx)
      return outcome_of(REDIS_ERR_OOM, {}, "redis-stream " + host_port() + ": out of memory");
    if (ctx->err)
      return outcome_of(ctx->err, {}, "redis-stream connect " + host_port() + ": " + ctx->errstr);
    redisSetTimeout(ctx.get(), tv);
    // The failure of one command: {hiredis error, server's error reply}; {0, ""} on success.
    auto command = [&](const std::vector<std::string>& args) -> std::pair<int, std::string> {
      ReplyPtr r = redis_stream::run_command(ctx.get(), args);
      if (!r) return {ctx->err ? ctx->err : REDIS_ERR_IO, std::string(ctx->errstr)};
      if (r->type == REDIS_REPLY_ERROR) return {0, std::string(r->str, r->len)};
      return {0, {}};
    };
    if (!config_.password.empty()) {
      auto [io, err] = config_.user.empty() ? command({"AUTH", config_.password})
                                            : command({"AUTH", config_.user, config_.password});
      if (io || !err.empty())
        return outcome_of(io, err, "redis-stream AUTH " + host_port() + ": " + err);
    }
    if (config_.db != 0) {
      auto [io, err] = command({"SELECT", std::to_string(config_.db)});
      if (io || !err.empty())
        return outcome_of(io, err,
                          "redis-stream SELECT " + std::to_string(config_.db) + ": " + err);
    }
    if (!durability_checked_) {  // once per sink, at its first connection (docs/redis.md)
      durability_checked_ = true;
      const std::string problems =
          redis_store::durability_problems([&](const char* name) -> std::optional<std::string> {
            ReplyPtr r = redis_stream::run_command(ctx.get(), {"CONFIG", "GET", name});
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2 ||
                r->element[1]->type != REDIS_REPLY_STRING)
              return std::nullopt;  // CONFIG refused (managed Redis): nothing is said
            return std::string(r->element[1]->str, r->element[1]->len);
          });
      const std::string line =
          redis_store::durability_warning("redis-stream sink " + host_port(), problems);
      if (!line.empty()) std::fputs(line.c_str(), stderr);
      if (ctx->err)
        return outcome_of(ctx->err, {}, "redis-stream " + host_port() + ": " + ctx->errstr);
    }
    ctx_ = std::move(ctx);
    return std::nullopt;
  }

  void trim(const std::string& stream) {
    const std::string registry = stream + ":checkpoints";
    const std::string maxlen = std::to_string(config_.maxlen);
    const std::string cap = std::to_string(std::max<std::int64_t>(config_.trim_every * 4, 10'000));
    const char* argv[] = {"EVAL",           kTrimScript,    "2",        stream.c_str(),
                          registry.c_str(), maxlen.c_str(), cap.c_str()};
    const size_t lens[] = {
        4, std::strlen(kTrimScript), 1, stream.size(), registry.size(), maxlen.size(), cap.size()};
    ReplyPtr r(static_cast<redisReply*>(redisCommandArgv(ctx_.get(), 7, argv, lens)));
    if (!r) ctx_.reset();  // connection broken: reconnect on the next batch
  }

  // A batch's commands beyond this size are not kept allocated between calls.
  static constexpr std::size_t kMaxKeptBuffer = std::size_t{8} << 20;

  RedisStreamConfig config_;
  bool per_type_ = config_.stream_template.find("{type}") != std::string::npos;
  std::unordered_map<std::string, std::string> streams_;  // event type -> stream
  core::Rfc3339Formatter time_;
  std::string out_;           // the batch's commands, RESP-encoded
  std::string headers_text_;  // scratch: an event's headers as JSON
  ContextPtr ctx_;
  bool durability_checked_ = false;
  std::string moved_to_;  // host:port of the last batch's MOVED reply ("" = none)               //
                          // the server's settings were read (connect())
  std::map<std::string, std::int64_t> appended_;  // entries appended per stream since last trim
};

}  // namespace

namespace {

// The URL read and checked, nothing connected: the same code opens and checks (check_sink_url).
RedisStreamConfig parse_redis_stream_url(std::string_view text, const SinkOptions& options) {
  const auto url = core::Url::parse(text);
  RedisStreamConfig c;
  c.where = url.redacted();
  auto bad = [&](const std::string& what) {
    return ConfigError("redis-stream sink URL " + c.where + ": " + what, "redis-stream");
  };
  if (url.scheme() != "redis-stream") throw bad("scheme must be redis-stream://");
  redis_stream::read_endpoint(url, options.timeout, c, bad, /*many_hosts=*/true);
  c.stream_template = url.path();
  if (c.stream_template.empty()) throw bad("stream name (the URL path) missing");
  const auto trimming = redis_stream::read_trimming(url);
  c.maxlen = trimming.maxlen;
  c.trim_every = trimming.trim_every;
  url.reject_unknown();
  return c;
}

}  // namespace

std::unique_ptr<Sink> open_redis_stream_sink(std::string_view text, const SinkOptions& options) {
  return std::make_unique<RedisStreamSink>(parse_redis_stream_url(text, options));
}

void check_redis_stream_sink_url(std::string_view text) {
  parse_redis_stream_url(text, SinkOptions{});
}

}  // namespace outpost
