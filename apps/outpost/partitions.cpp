// outpost partitions --store URL [--json]: who owns which partition of a PostgreSQL outbox
// (docs/postgres.md, "Partitions and owners") or of a Redis outbox opened with partitions=N
// (docs/redis.md, "Partitions"; docs/cli.md, "partitions"): per partition its owner, fence, lease
// left, how long the owner has held it, whether it is being handed over, and its backlog; then
// the live members. Both print the same table and JSON shape. Stores without partitions (SQLite,
// memory, a Redis URL without partitions=N) are refused with exit 2 and a line saying so, before
// anything is opened.

#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "outpost/error.h"

#ifdef OUTPOST_SCHEMA_POSTGRES
#include "stores/postgres/config.h"
#include "stores/postgres/pg_conn.h"
#include "stores/postgres/schema.h"
#endif
#ifdef OUTPOST_SCHEMA_REDIS
#include "stores/redis/redis_partitions_view.h"
#endif

namespace outpost::cli {
namespace {

std::string scheme_of(const std::string& url) {
  auto colon = url.find(':');
  return colon == std::string::npos ? std::string() : url.substr(0, colon);
}

// One partition's row and one member's, as both stores print them (null: not known).
struct Row {
  std::string partition, owner, fence, lease_left, moved, backlog, leased;
  bool handing_over = false;
};
struct Member {
  std::string member, joined, expires, partitions;
};

nlohmann::json number_or_null(const std::string& v) {
  return v.empty() ? nlohmann::json() : nlohmann::json(std::stoll(v));
}

void print(const std::string& outbox, const std::vector<Row>& rows,
           const std::vector<Member>& members, bool json) {
  if (json) {
    nlohmann::json out;
    out["outbox"] = outbox;
    out["partitions"] = nlohmann::json::array();
    for (const auto& r : rows)
      out["partitions"].push_back(
          {{"partition", std::stoi(r.partition)},
           {"owner", r.owner.empty() ? nlohmann::json() : nlohmann::json(r.owner)},
           {"fence", std::stoll(r.fence)},
           {"lease_left_ms", number_or_null(r.lease_left)},
           {"moved_ms_ago", number_or_null(r.moved)},
           {"handing_over", r.handing_over},
           {"backlog", std::stoll(r.backlog)},
           {"leased", std::stoll(r.leased)}});
    out["members"] = nlohmann::json::array();
    for (const auto& m : members)
      out["members"].push_back({{"member", m.member},
                                {"joined_ms_ago", number_or_null(m.joined)},
                                {"expires_in_ms", std::stoll(m.expires)},
                                {"partitions", std::stoll(m.partitions)}});
    std::cout << out.dump() << "\n";
    return;
  }
  auto dash = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
  std::cout << "outbox " << outbox << ": " << rows.size() << " partitions, " << members.size()
            << " live member(s)\n";
  std::cout << std::left << std::setw(10) << "PARTITION" << std::setw(26) << "OWNER" << std::setw(8)
            << "FENCE" << std::setw(15) << "LEASE_LEFT_MS" << std::setw(15) << "MOVED_MS_AGO"
            << std::setw(14) << "HANDING_OVER" << std::setw(9) << "BACKLOG"
            << "LEASED\n";
  for (const auto& r : rows)
    std::cout << std::setw(10) << r.partition << std::setw(26) << dash(r.owner) << std::setw(8)
              << r.fence << std::setw(15) << dash(r.lease_left) << std::setw(15) << dash(r.moved)
              << std::setw(14) << (r.handing_over ? "yes" : "no") << std::setw(9) << r.backlog
              << r.leased << "\n";
  std::cout << "\n"
            << std::setw(26) << "MEMBER" << std::setw(15) << "JOINED_MS_AGO" << std::setw(15)
            << "EXPIRES_IN_MS"
            << "PARTITIONS\n";
  for (const auto& m : members)
    std::cout << std::setw(26) << m.member << std::setw(15) << dash(m.joined) << std::setw(15)
              << m.expires << m.partitions << "\n";
}

#ifdef OUTPOST_SCHEMA_REDIS
int show_redis(const std::string& url, bool json) {
  const auto v = redis_store::read_partitions_view(url);
  auto text = [](const std::optional<std::int64_t>& n) {
    return n ? std::to_string(*n) : std::string();
  };
  std::vector<Row> rows;
  for (const auto& p : v.partitions)
    rows.push_back({std::to_string(p.partition), p.owner, std::to_string(p.fence),
                    text(p.lease_left_ms), text(p.moved_ms_ago), std::to_string(p.backlog),
                    std::to_string(p.leased), p.handing_over});
  std::vector<Member> members;
  for (const auto& m : v.members)
    members.push_back({m.member, text(m.joined_ms_ago), std::to_string(m.expires_in_ms),
                       std::to_string(m.partitions)});
  print(v.outbox, rows, members, json);
  return kExitOk;
}
#endif

#ifdef OUTPOST_SCHEMA_POSTGRES
std::string value(const PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) ? std::string() : std::string(PQgetvalue(r, row, col));
}

int show(const std::string& url, bool json) {
  StoreOptions options;
  const pg::Config config = pg::parse_config(url, options);  // ConfigError: exit 2
  const pg::Names n(config.schema, config.table);
  const pg::Endpoint& ep = config.endpoint;
  auto conn = pg::connect(ep);
  PGconn* c = conn.get();
  if (!pg::outbox_exists(ep, c, n))
    throw Error(ErrorCode::not_found, "postgres",
                "there is no outbox " + n.outbox + " at " + ep.where + " (nothing was created)");
  if (pg::partition_count(ep, c, n) == 0)
    throw ConfigError("outbox " + n.outbox +
                      " has no partitions yet (schema version 3 or older: the first relay of "
                      "this version to open it adds them, docs/postgres.md \"Upgrading\")");
  pg::Params none;
  // The backlog is one pass over the outbox grouped by partition (an operator's read, not
  // something to poll every second on a huge backlog).
  auto parts = pg::exec_params(
      ep, c,
      "SELECT p.part, p.owner, p.fence, (extract(epoch FROM p.lease_until - now()) * "
      "1000)::bigint, (extract(epoch FROM now() - p.moved_at) * 1000)::bigint, p.releasing, "
      "coalesce(b.backlog, 0), coalesce(b.leased, 0) FROM " +
          n.parts +
          " p LEFT JOIN (SELECT part, count(*) AS backlog, count(*) FILTER (WHERE state = 1 AND "
          "lease_until > now()) AS leased FROM " +
          n.outbox + " GROUP BY part) b ON b.part = p.part ORDER BY p.part",
      none, "partitions", pg::Results::text);
  auto members = pg::exec_params(
      ep, c,
      "SELECT m.member, (extract(epoch FROM now() - m.joined_at) * 1000)::bigint, "
      "(extract(epoch FROM m.until - now()) * 1000)::bigint, (SELECT count(*) FROM " +
          n.parts + " p WHERE p.owner = m.member AND p.lease_until > now()) FROM " + n.members +
          " m WHERE m.until > now() ORDER BY m.member",
      none, "partitions", pg::Results::text);
  const PGresult* p = parts.get();
  const PGresult* m = members.get();
  std::vector<Row> rows;
  for (int i = 0; i < PQntuples(p); ++i)
    rows.push_back({value(p, i, 0), value(p, i, 1), value(p, i, 2), value(p, i, 3), value(p, i, 4),
                    value(p, i, 6), value(p, i, 7), value(p, i, 5) == "t"});
  std::vector<Member> ms;
  for (int i = 0; i < PQntuples(m); ++i)
    ms.push_back({value(m, i, 0), value(m, i, 1), value(m, i, 2), value(m, i, 3)});
  print(n.schema + "." + n.table, rows, ms, json);
  return kExitOk;
}
#endif

}  // namespace

Runner add_partitions_command(CLI::App& root) {
  auto* cmd =
      root.add_subcommand("partitions",
                          "Who owns which partition of a PostgreSQL outbox or a Redis "
                          "outbox with partitions=N: owner, fence, lease, backlog, members");
  auto url = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--store", *url,
                  "Store URL (postgresql://...?table=T, redis://...?prefix=P&partitions=N)")
      ->required();
  cmd->add_flag("--json", *json, "One JSON object instead of the tables");
  return [url, json]() -> int {
    const std::string scheme = scheme_of(*url);
    if (scheme == "redis" || scheme == "redis-sentinel") {
#ifdef OUTPOST_SCHEMA_REDIS
      redis_store::check_partitions_url(*url);  // ConfigError (exit 2) before connecting
      return show_redis(*url, *json);
#else
      throw ConfigError("this build has no Redis store");
#endif
    }
    if (scheme != "postgresql" && scheme != "postgres") {
      if (scheme == "sqlite" || scheme == "memory" || scheme == "rediss")
        throw ConfigError(scheme +
                          " stores have no partitions (PostgreSQL outboxes and Redis outboxes "
                          "with partitions=N have them, docs/postgres.md \"Partitions and "
                          "owners\", docs/redis.md \"Partitions\")");
      throw ConfigError("--store must be a postgresql:// or redis:// URL, got '" + redact(*url) +
                        "'");
    }
#ifdef OUTPOST_SCHEMA_POSTGRES
    return show(*url, *json);
#else
    throw ConfigError("this build has no PostgreSQL store");
#endif
  };
}

}  // namespace outpost::cli
