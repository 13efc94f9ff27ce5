#include "stores/postgres/retention.h"

#include <algorithm>
#include <cstdlib>

namespace outpost::pg {

DeadRetention::DeadRetention(Pool& pool, const Endpoint& ep, const Names& n, Duration retention)
    : pool_(pool),
      ep_(ep),
      // clock_timestamp(): dead_at is stamped with it too (now() is the transaction's start).
      sql_("DELETE FROM " + n.dead +
           " WHERE dead_at < clock_timestamp() - $1::bigint * interval '1 millisecond'"),
      retention_(retention) {}

std::size_t DeadRetention::run(bool force) {
  if (retention_.count() <= 0) return 0;
  using SteadyClock = std::chrono::steady_clock;
  auto interval = std::chrono::duration_cast<SteadyClock::duration>(
      std::min<Duration>(retention_ / 2, Duration(60'000)));
  auto t = SteadyClock::now();
  auto last = last_run_.load();
  if (!force && last != 0 && t - SteadyClock::time_point(SteadyClock::duration(last)) < interval)
    return 0;
  last_run_ = t.time_since_epoch().count();
  Params p;
  p.text(std::to_string(retention_.count()));
  auto c = pool_.get();
  auto r = exec_prepared(ep_, *c, "dead_retention", sql_, p, "dead-letter retention");
  const char* n = PQcmdTuples(r.get());
  return n && *n ? static_cast<std::size_t>(std::strtoull(n, nullptr, 10)) : 0;
}

}  // namespace outpost::pg
