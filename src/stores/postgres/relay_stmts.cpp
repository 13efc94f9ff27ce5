#include "stores/postgres/relay_stmts.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

#include "core/batch_seqs.h"
#include "stores/postgres/refused.h"

namespace outpost::pg {
namespace {

// Text-format array literal element: always quoted, with " and \ escaped.
std::string text_array(const std::vector<std::string>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

}  // namespace

Stmt RelayStatements::claim(const std::string& owner, std::size_t max, Duration lease,
                            ClaimOrder order, const std::vector<std::string>& busy_keys) const {
  const bool strict = order == ClaimOrder::strict;
  const bool ordered = strict || order == ClaimOrder::ordered;
  Stmt s;
  // The batch size is spliced in as a literal (a number, not user text): with LIMIT $n a
  // cached generic plan cannot know n and chose a sequential scan and sort of the whole
  // table (3x slower claims under load). One prepared statement per batch size.
  s.sql = strict ? sql_.claim_strict : ordered ? sql_.claim_ordered : sql_.claim_any;
  s.sql.replace(s.sql.find("{max}"), 5, std::to_string(max));
  s.name = std::string(strict ? "claim_strict_" : ordered ? "claim_ordered_" : "claim_any_");
  s.name += std::to_string(max);
  s.params.text(owner);
  s.params.text(std::to_string(std::max<std::int64_t>(lease.count(), 1)));
  s.params.text(member_);
  if (ordered) s.params.text(text_array(busy_keys));
  s.what = "claim";
  return s;
}

std::optional<Stmt> RelayStatements::ack(const ClaimedBatch& batch,
                                         std::span<const EventId> ids) const {
  return archive_ ? by_seq(batch, ids, "ack_archive", sql_.ack_archive, "ack")
                  : by_seq(batch, ids, "ack", sql_.ack, "ack");
}

std::optional<Stmt> RelayStatements::release(const ClaimedBatch& batch,
                                             std::span<const EventId> ids) const {
  return by_seq(batch, ids, "release", sql_.release, "release");
}

std::optional<Stmt> RelayStatements::by_seq(const ClaimedBatch& batch, std::span<const EventId> ids,
                                            const char* name, const std::string& sql,
                                            const char* what) const {
  if (ids.empty()) return std::nullopt;
  auto seqs = core::seqs_of(batch, ids);  // ids not in the batch cannot count
  if (seqs.empty()) return std::nullopt;
  Stmt s{name, sql, {}, what};
  s.params.text(batch.lease.owner);
  s.params.text(int_array(seqs));
  s.params.text(member_);
  return s;
}

std::optional<Stmt> RelayStatements::nack(const ClaimedBatch& batch,
                                          std::span<const Nack> nacks) const {
  if (nacks.empty()) return std::nullopt;
  std::unordered_map<EventId, std::int64_t, EventIdHash> index;
  for (const auto& e : batch.events) index.emplace(e.id, e.seq);
  std::vector<std::int64_t> seqs, retry_ms;
  std::vector<std::string> errors;
  for (const auto& nk : nacks) {
    auto it = index.find(nk.id);
    if (it == index.end()) continue;
    seqs.push_back(it->second);
    errors.push_back(as_text(nk.error));
    retry_ms.push_back(nk.retry_in ? std::max<std::int64_t>(nk.retry_in->count(), 0) : -1);
  }
  if (seqs.empty()) return std::nullopt;
  Stmt s;
  s.params.text(batch.lease.owner);
  s.params.text(int_array(seqs));
  s.params.text(text_array(errors));
  s.params.text(int_array(retry_ms));
  s.params.text(member_);
  s.name = "nack";
  s.sql = sql_.nack;
  s.what = "nack";
  return s;
}

}  // namespace outpost::pg
