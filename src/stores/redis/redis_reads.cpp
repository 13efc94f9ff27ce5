// The Redis store's reads for inspection (list, dead, blocked, leased, archived) and the parsing
// of an event's id, body and seq from a script's reply, shared with the claim (redis_store.cpp).

#include "stores/redis/redis_reads.h"

#include <algorithm>
#include <charconv>

#include "outpost/error.h"
#include "stores/redis/redis_body.h"

namespace outpost::redis_store {
namespace {

std::string str(const redisReply* r) {
  return reply_string(r);
}

// The reply of a listing script (list.lua, inspect.lua: ARGV B, which, limit) when it is an
// array; null for limit 0 or any other reply (nothing to show).
Reply eval_listing(Client& client, const Script& script, std::string_view key,
                   const std::string& base, std::string_view which, std::size_t limit) {
  if (limit == 0) return nullptr;
  const std::string limit_s = std::to_string(std::min<std::size_t>(limit, 1'000'000'000));
  Reply r = client.eval(script, key, {base, which, limit_s});
  if (r->type != REDIS_REPLY_ARRAY) return nullptr;
  return r;
}

}  // namespace

// Plain reads (the archive's zset, then the bodies and deliver_at): an event that retention
// removed in between is left out.
std::vector<ArchivedEvent> read_archived(Client& client, const std::string& base,
                                         std::size_t limit) {
  std::vector<ArchivedEvent> out;
  if (limit == 0) return out;
  const std::string zset = base + "v3:archive", bodies = base + "v3:archived";
  const std::string last = std::to_string(std::min<std::size_t>(limit, 1'000'000'000) - 1);
  Reply r = client.command({"ZREVRANGE", zset, "0", last, "WITHSCORES"});
  if (r->type == REDIS_REPLY_ERROR)
    throw Error(ErrorCode::backend, "redis", "reading " + zset + ": " + str(r.get()));
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) return out;
  std::vector<std::string> ids;
  std::vector<std::string_view> args{"HMGET", bodies};
  for (std::size_t i = 0; i + 1 < r->elements; i += 2) ids.push_back(str(r->element[i]));
  for (const auto& id : ids) args.push_back(id);
  Reply b = client.command(args);
  if (b->type != REDIS_REPLY_ARRAY || b->elements != ids.size())
    throw Error(ErrorCode::backend, "redis", "reading " + bodies + ": unexpected reply");
  // The deliver_at of the scheduled ones (ack_fn.lua keeps it beside the body).
  const std::string ats = base + "v3:archived_at";
  args[1] = ats;
  Reply at = client.command(args);
  if (at->type != REDIS_REPLY_ARRAY || at->elements != ids.size())
    throw Error(ErrorCode::backend, "redis", "reading " + ats + ": unexpected reply");
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const redisReply* body = b->element[i];
    ArchivedEvent e;
    auto id = EventId::parse(ids[i]);
    if (!id || !body || body->type != REDIS_REPLY_STRING ||
        !unpack_body(std::string_view(body->str, body->len), e))
      continue;
    e.id = *id;
    e.archived_at = TimePoint(std::chrono::milliseconds(text_int(str(r->element[2 * i + 1]))));
    if (std::string ms = str(at->element[i]); !ms.empty())
      e.deliver_at = TimePoint(std::chrono::milliseconds(text_int(ms)));
    out.push_back(std::move(e));
  }
  return out;
}

// id, body, seq of one event of a claim or list reply. A claimed body that is malformed
// (written by hand, or a bug) is reported, not delivered as an empty event; a listed one is
// shown with empty fields, so `events dead` still shows it with its error. (A missing body
// never reaches a claim: the claim script dead-letters that event.)
void fill(StoredEvent& e, redisReply** f, const std::string& base, bool strict) {
  const std::string id = str(f[0]);
  auto parsed = EventId::parse(id);
  if (parsed) e.id = *parsed;
  // An id in other text than ours (uppercase, or not a UUID: written by hand past append.lua's
  // check) could be delivered but never acked by it: the relay stops on it instead.
  if (strict &&
      (!parsed || std::any_of(id.begin(), id.end(), [](char c) { return c >= 'A' && c <= 'F'; })))
    throw Error(ErrorCode::corrupt, "redis",
                "outbox " + base + ": event id '" + id +
                    "' is not a UUID in canonical lowercase text (docs/emit-contract.md)");
  const redisReply* body = f[1];
  if ((!body || body->type != REDIS_REPLY_STRING ||
       !unpack_body(std::string_view(body->str, body->len), e)) &&
      strict)
    throw Error(
        ErrorCode::corrupt, "redis",
        "outbox " + base + ": event " + id + " has no readable body in " + base + "v3:body");
  e.seq = text_int(str(f[2]));
}

std::vector<DeadEvent> read_list(Client& client, const Script& script, std::string_view key,
                                 const std::string& base, std::string_view which,
                                 std::size_t limit) {
  std::vector<DeadEvent> out;
  Reply r = eval_listing(client, script, key, base, which, limit);
  if (!r) return out;
  // id, body, seq, attempts, last_error, dead_at, crashes, deliver_at (list.lua)
  constexpr std::size_t kFields = 8;
  for (std::size_t i = 0; i + kFields <= r->elements; i += kFields) {
    redisReply** f = r->element + i;
    DeadEvent d;
    fill(d, f, base, /*strict=*/false);
    d.attempts = static_cast<int>(text_int(str(f[3])));
    d.last_error = str(f[4]);
    std::string dead_at = str(f[5]);
    if (!dead_at.empty()) d.dead_at = TimePoint(std::chrono::microseconds(text_int(dead_at)));
    d.crashes = static_cast<int>(text_int(str(f[6])));
    if (std::string at = str(f[7]); !at.empty())
      d.deliver_at = TimePoint(std::chrono::milliseconds(text_int(at)));
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<EventState> read_inspect(Client& client, const Script& script, std::string_view key,
                                     const std::string& base, std::string_view which,
                                     std::size_t limit) {
  std::vector<EventState> out;
  Reply r = eval_listing(client, script, key, base, which, limit);
  if (!r) return out;
  auto ms = [](const std::string& v) { return TimePoint(std::chrono::milliseconds(text_int(v))); };
  // id, body, seq, attempts, last_error, due, lease owner, fence, lease_until, crashes, reason
  // (inspect.lua)
  constexpr std::size_t kFields = 11;
  for (std::size_t i = 0; i + kFields <= r->elements; i += kFields) {
    redisReply** f = r->element + i;
    StoredEvent e;
    fill(e, f, base, /*strict=*/false);
    EventState& s = out.emplace_back();
    s.seq = e.seq;
    s.id = e.id;
    s.type = std::move(e.type);
    s.key = std::move(e.key);
    s.attempts = static_cast<int>(text_int(str(f[3])));
    s.crashes = static_cast<int>(text_int(str(f[9])));
    s.last_error = str(f[4]);
    s.reason = str(f[10]);  // blocked: "failing" or "dead" (store.h)
    s.lease_owner = str(f[6]);
    if (s.lease_owner.empty()) {
      if (std::string due = str(f[5]); !due.empty()) s.next_attempt = ms(due);
    } else {
      s.fence = text_int(str(f[7]));
      s.lease_until = ms(str(f[8]));
    }
  }
  return out;
}

}  // namespace outpost::redis_store
