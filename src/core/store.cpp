// Default implementations of the optional methods of OutboxStore and OutboxAdmin (store.h).

#include "outpost/store.h"

#include <string>

#include "core/duration.h"
#include "core/store_params.h"
#include "outpost/error.h"

namespace outpost {

ClaimedBatch OutboxStore::settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                           SettleCounts& counts, std::size_t max, Duration lease,
                                           ClaimOrder order) {
  counts = {};
  if (!settlement.acks.empty()) counts.acked = ack(done, settlement.acks);
  if (!settlement.nacks.empty()) counts.nacked = nack(done, settlement.nacks);
  if (!settlement.releases.empty()) counts.released = release(done, settlement.releases);
  return claim(max, lease, order);
}

std::vector<ArchivedEvent> OutboxAdmin::archived(std::size_t) {
  throw Error(ErrorCode::not_found, std::string(backend()),
              "the " + std::string(backend()) +
                  " store of this build cannot read an archive (docs/cli.md, events archive)");
}

}  // namespace outpost

namespace outpost::core {

std::optional<Duration> duration_param(const Url& url, std::string_view name) {
  auto v = url.param(name);
  if (!v) return std::nullopt;
  return parse_duration(*v, "parameter '" + std::string(name) + "'");
}

void apply_retention_params(const Url& url, StoreOptions& options) {
  if (auto d = duration_param(url, "archive_retention")) options.archive_retention = *d;
  if (auto d = duration_param(url, "dead_retention")) options.dead_retention = *d;
}

}  // namespace outpost::core
