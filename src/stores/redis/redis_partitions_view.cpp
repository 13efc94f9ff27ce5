// `outpost partitions` on Redis (redis_partitions_view.h): one read-only script per partition on
// its own slot (partition_view.lua), and one on the outbox's slot for the members.

#include "stores/redis/redis_partitions_view.h"

#include <algorithm>
#include <map>

#include "outpost/error.h"
#include "stores/redis/redis_client.h"
#include "stores/redis/redis_scripts.h"
#include "stores/redis/redis_url.h"

namespace outpost::redis_store {
namespace {

std::string str(const redisReply* r) {
  return reply_string(r);
}

Reply view(Client& client, const Script& script, const std::string& base, const char* what) {
  Reply r = client.eval(script, base + "lock", {base, what});
  if (r->type != REDIS_REPLY_ARRAY)
    throw Error(ErrorCode::backend, "redis", "partition_view: unexpected reply");
  return r;
}

}  // namespace

void check_partitions_url(std::string_view url) {
  const StoreConfig c = parse_store_url(url);
  if (c.partitions <= 1)
    throw ConfigError(
        "redis outboxes have partitions only with the URL parameter partitions=N: give the URL "
        "the relays use (docs/redis.md, Partitions)");
}

PartitionsView read_partitions_view(std::string_view url) {
  check_partitions_url(url);
  StoreConfig c = parse_store_url(url);
  const Script script{"partition_view", std::string(kPrologue) + kPartitionView, {}, {}};
  const std::string base = "{" + c.prefix + "}:";
  PartitionsView out;
  out.outbox = c.prefix;

  ClientOptions meta_options = c.client;
  meta_options.slot_key = "{" + c.prefix + "}";
  Client meta(meta_options);
  Reply count = meta.command({"GET", base + "partitions"});
  if (count->type != REDIS_REPLY_STRING)
    throw Error(ErrorCode::not_found, "redis",
                "the outbox " + c.prefix +
                    " is not partitioned yet (no relay or emit opened it with partitions=" +
                    std::to_string(c.partitions) + ")");
  if (text_int(str(count.get())) != c.partitions)
    throw ConfigError("redis: the outbox " + c.prefix + " has " + str(count.get()) +
                      " partitions, the URL says partitions=" + std::to_string(c.partitions) +
                      ": use partitions=" + str(count.get()) + " (docs/redis.md, Partitions)");

  Reply m = view(meta, script, base, "members");
  const std::int64_t now = m->elements > 0 ? reply_int(m->element[0]) : 0;
  std::map<std::string, std::size_t> index;  // token -> its row
  for (std::size_t i = 1; i + 2 < m->elements; i += 3) {
    MemberView v;
    v.member = str(m->element[i]);
    v.expires_in_ms = text_int(str(m->element[i + 1])) - now;
    if (std::string j = str(m->element[i + 2]); !j.empty()) v.joined_ms_ago = now - text_int(j);
    out.members.push_back(std::move(v));
  }
  std::sort(out.members.begin(), out.members.end(),
            [](const MemberView& a, const MemberView& b) { return a.member < b.member; });
  for (std::size_t i = 0; i < out.members.size(); ++i) index[out.members[i].member] = i;

  for (int p = 0; p < c.partitions; ++p) {
    // Each partition in its own slot: a client for that slot's master, as the store's.
    const std::string prefix = c.prefix + ":p" + std::to_string(p);
    ClientOptions o = c.client;
    o.slot_key = "{" + prefix + "}";
    Client client(o);
    Reply r = view(client, script, "{" + prefix + "}:", "partition");
    if (r->elements < 7)
      throw Error(ErrorCode::backend, "redis", "partition_view: unexpected reply");
    PartitionView v;
    v.partition = p;
    v.owner = str(r->element[0]);
    v.fence = reply_int(r->element[2]);
    const std::int64_t pnow = reply_int(r->element[4]);
    if (!v.owner.empty()) {
      v.lease_left_ms = reply_int(r->element[1]);
      if (std::string moved = str(r->element[3]); !moved.empty())
        v.moved_ms_ago = pnow - text_int(moved);
      // The relays' rule (redis_partitioned.cpp): partition K goes to the live member at index
      // K mod members; a holder that is not that member gives it up once its batches settled.
      const auto n = out.members.size();
      v.handing_over = n == 0 || out.members[static_cast<std::size_t>(p) % n].member != v.owner;
      if (auto it = index.find(v.owner); it != index.end()) ++out.members[it->second].partitions;
    }
    v.backlog = reply_int(r->element[5]);
    v.leased = reply_int(r->element[6]);
    out.partitions.push_back(std::move(v));
  }
  return out;
}

}  // namespace outpost::redis_store
