// A claim over several partitions as one batch, and back: see redis_combined_batch.h.
#include "stores/redis/redis_combined_batch.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>

#include "stores/redis/redis_body.h"
#include "stores/redis/redis_partition.h"

namespace outpost::redis_store {

ClaimedBatch combine(std::vector<ClaimedBatch>& parts) {
  ClaimedBatch out;
  out.lease.owner = kCombined;
  for (auto& b : parts) {
    out.lease.owner += b.lease.owner + "|" + std::to_string(b.lease.fence) + "|";
    std::move(b.events.begin(), b.events.end(), std::back_inserter(out.events));
  }
  std::sort(out.events.begin(), out.events.end(),
            [](const StoredEvent& a, const StoredEvent& b) { return a.seq < b.seq; });
  return out;
}

std::vector<PartBatch> split(const ClaimedBatch& batch, int partitions) {
  std::vector<PartBatch> out;
  const std::string& o = batch.lease.owner;
  if (o.empty() || o[0] != kCombined) return out;
  for (std::size_t at = 1; at < o.size();) {
    const auto bar = o.find('|', at), bar2 = o.find('|', bar + 1);
    if (bar == std::string::npos || bar2 == std::string::npos) break;
    PartBatch pb;
    pb.batch.lease.owner = o.substr(at, bar - at);
    pb.batch.lease.fence = std::stoll(o.substr(bar + 1, bar2 - bar - 1));
    pb.p = partition_in(pb.batch.lease.owner, partitions);
    at = bar2 + 1;
    if (pb.p < 0) continue;
    for (const auto& e : batch.events) {
      if (static_cast<int>(e.seq % partitions) != pb.p) continue;
      StoredEvent& part = pb.batch.events.emplace_back();  // what settling and renewing read
      part.id = e.id;
      part.key = e.key;
      part.seq = e.seq;
    }
    out.push_back(std::move(pb));
  }
  return out;
}

bool contains(const ClaimedBatch& batch, const EventId& id) {
  return std::any_of(batch.events.begin(), batch.events.end(),
                     [&](const StoredEvent& e) { return e.id == id; });
}

PartSettlement settlement_of(const ClaimedBatch& part, const Settlement& settlement) {
  PartSettlement mine;
  for (const auto& id : settlement.acks)
    if (contains(part, id)) mine.acks.push_back(id);
  for (const auto& nk : settlement.nacks)
    if (contains(part, nk.id)) mine.nacks.push_back(nk);
  for (const auto& id : settlement.releases)
    if (contains(part, id)) mine.releases.push_back(id);
  return mine;
}

std::vector<std::size_t> append_partitions(Client& client, const Script& many, const Script& one,
                                           const std::string& prefix, const std::string& base,
                                           const std::string& key,
                                           const std::vector<std::vector<Event>>& groups,
                                           bool one_script) {
  std::vector<AppendArgv> args(groups.size());
  std::vector<std::string> bases(groups.size()), keys(groups.size());
  std::vector<std::size_t> of;  // the partitions with events, in order
  for (std::size_t p = 0; p < groups.size(); ++p) {
    if (groups[p].empty()) continue;
    bases[p] = "{" + prefix + ":p" + std::to_string(p) + "}:";
    keys[p] = bases[p] + "pending";
    append_argv(groups[p], bases[p], args[p]);  // points into bases[p]
    of.push_back(p);
  }
  if (one_script) {
    std::vector<std::string> lengths;
    lengths.reserve(of.size());
    for (std::size_t p : of) lengths.push_back(std::to_string(args[p].argv.size()));
    const std::string parts = std::to_string(of.size());
    std::vector<std::string_view> argv{base, parts};
    for (std::size_t i = 0; i < of.size(); ++i) {
      argv.push_back(lengths[i]);
      argv.insert(argv.end(), args[of[i]].argv.begin(), args[of[i]].argv.end());
    }
    client.eval(many, key, argv, /*idempotent=*/false);
    return {};
  }
  const std::string sha = client.sha_of(one);
  std::vector<std::vector<std::string_view>> commands;
  for (std::size_t p : of) {
    std::vector<std::string_view> cmd{"EVALSHA", sha, "1", keys[p]};
    cmd.insert(cmd.end(), args[p].argv.begin(), args[p].argv.end());
    commands.push_back(std::move(cmd));
  }
  std::vector<Reply> replies = client.pipeline(commands);
  std::vector<std::size_t> again;
  for (std::size_t i = 0; i < replies.size(); ++i)
    if (!reply_error(replies[i].get()).empty()) again.push_back(of[i]);
  return again;
}

void run_settle_many(Client& client, const Script& script, const std::string& key,
                     const std::string& base, std::vector<ManySettle>& settles,
                     std::vector<ManyClaim>& claims, std::size_t max, Duration lease,
                     ClaimOrder order) {
  std::vector<std::vector<std::string>> args;
  args.reserve(settles.size() + claims.size() + 1);
  args.push_back(
      {std::to_string(settles.size()), std::to_string(claims.size()), std::to_string(max)});
  for (auto& s : settles) args.push_back(s.store->settle_call(*s.batch, s.mine));
  for (auto& c : claims) args.push_back(c.store->claim_call(c.batch, max, lease, order));
  std::vector<std::string> lengths;
  lengths.reserve(settles.size());
  for (std::size_t i = 0; i < settles.size(); ++i)
    lengths.push_back(std::to_string(args[1 + i].size()));
  // `args` and `lengths` are complete: argv may point into them now.
  std::vector<std::string_view> argv{base};
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i >= 1 && i <= settles.size()) argv.push_back(lengths[i - 1]);
    argv.insert(argv.end(), args[i].begin(), args[i].end());
  }
  Reply r = client.eval(script, key, argv);
  if (r->type != REDIS_REPLY_ARRAY || r->elements < settles.size())
    throw Error(ErrorCode::backend, "redis", "settle_many: unexpected reply");
  auto count = [](const redisReply* c, std::size_t i) {
    const auto n = c->type == REDIS_REPLY_ARRAY && i < c->elements ? reply_int(c->element[i]) : 0;
    return n < 0 ? std::size_t{0} : static_cast<std::size_t>(n);  // -1: fenced off
  };
  auto error_of = [&](const redisReply* e) {
    try {
      throw_failure({"EVALSHA " + std::string(script.name), reply_error(e)});
    } catch (...) {
      return std::current_exception();
    }
  };
  for (std::size_t i = 0; i < settles.size(); ++i) {
    const redisReply* e = r->element[i];
    if (e->type == REDIS_REPLY_ERROR)
      settles[i].error = error_of(e);
    else
      settles[i].counts = {count(e, 0), count(e, 1), count(e, 2)};
  }
  for (std::size_t j = 0; j < claims.size() && settles.size() + j < r->elements; ++j) {
    const redisReply* e = r->element[settles.size() + j];
    claims[j].asked = true;
    if (e->type == REDIS_REPLY_ERROR)
      claims[j].error = error_of(e);
    else
      claims[j].store->claim_reply(claims[j].batch, e);
  }
}

}  // namespace outpost::redis_store
