// outpost partitions --store URL [--json]: who owns which partition of a PostgreSQL outbox
// (docs/postgres.md, "Partitions and owners"; docs/cli.md, "partitions"): per partition its
// owner, fence, lease left, how long the owner has held it, whether it is being handed over, and
// its backlog; then the live members. Stores without partitions (SQLite, memory, Redis today)
// are refused with exit 2 and a line saying so, before anything is opened.

#include <iomanip>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli.h"
#include "outpost/error.h"

#ifdef OUTPOST_SCHEMA_POSTGRES
#include "stores/postgres/config.h"
#include "stores/postgres/pg_conn.h"
#include "stores/postgres/schema.h"
#endif

namespace outpost::cli {
namespace {

std::string scheme_of(const std::string& url) {
  auto colon = url.find(':');
  return colon == std::string::npos ? std::string() : url.substr(0, colon);
}

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
  if (json) {
    nlohmann::json out;
    out["outbox"] = n.schema + "." + n.table;
    out["partitions"] = nlohmann::json::array();
    for (int i = 0; i < PQntuples(p); ++i) {
      nlohmann::json row;
      row["partition"] = std::stoi(value(p, i, 0));
      row["owner"] = value(p, i, 1).empty() ? nlohmann::json() : nlohmann::json(value(p, i, 1));
      row["fence"] = std::stoll(value(p, i, 2));
      auto left = value(p, i, 3);
      row["lease_left_ms"] = left.empty() ? nlohmann::json() : nlohmann::json(std::stoll(left));
      auto held = value(p, i, 4);
      row["moved_ms_ago"] = held.empty() ? nlohmann::json() : nlohmann::json(std::stoll(held));
      row["handing_over"] = value(p, i, 5) == "t";
      row["backlog"] = std::stoll(value(p, i, 6));
      row["leased"] = std::stoll(value(p, i, 7));
      out["partitions"].push_back(row);
    }
    out["members"] = nlohmann::json::array();
    for (int i = 0; i < PQntuples(m); ++i) {
      out["members"].push_back({{"member", value(m, i, 0)},
                                {"joined_ms_ago", std::stoll(value(m, i, 1))},
                                {"expires_in_ms", std::stoll(value(m, i, 2))},
                                {"partitions", std::stoll(value(m, i, 3))}});
    }
    std::cout << out.dump() << "\n";
    return kExitOk;
  }
  std::cout << "outbox " << n.schema << "." << n.table << ": " << PQntuples(p) << " partitions, "
            << PQntuples(m) << " live member(s)\n";
  std::cout << std::left << std::setw(10) << "PARTITION" << std::setw(22) << "OWNER" << std::setw(8)
            << "FENCE" << std::setw(15) << "LEASE_LEFT_MS" << std::setw(15) << "MOVED_MS_AGO"
            << std::setw(14) << "HANDING_OVER" << std::setw(9) << "BACKLOG"
            << "LEASED\n";
  for (int i = 0; i < PQntuples(p); ++i) {
    auto owner = value(p, i, 1);
    auto left = value(p, i, 3);
    auto moved = value(p, i, 4);
    std::cout << std::setw(10) << value(p, i, 0) << std::setw(22) << (owner.empty() ? "-" : owner)
              << std::setw(8) << value(p, i, 2) << std::setw(15) << (left.empty() ? "-" : left)
              << std::setw(15) << (moved.empty() ? "-" : moved) << std::setw(14)
              << (value(p, i, 5) == "t" ? "yes" : "no") << std::setw(9) << value(p, i, 6)
              << value(p, i, 7) << "\n";
  }
  std::cout << "\n"
            << std::setw(22) << "MEMBER" << std::setw(15) << "JOINED_MS_AGO" << std::setw(15)
            << "EXPIRES_IN_MS"
            << "PARTITIONS\n";
  for (int i = 0; i < PQntuples(m); ++i)
    std::cout << std::setw(22) << value(m, i, 0) << std::setw(15) << value(m, i, 1) << std::setw(15)
              << value(m, i, 2) << value(m, i, 3) << "\n";
  return kExitOk;
}
#endif

}  // namespace

Runner add_partitions_command(CLI::App& root) {
  auto* cmd = root.add_subcommand(
      "partitions",
      "Who owns which partition of a PostgreSQL outbox: owner, fence, lease, backlog, members");
  auto url = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--store", *url, "PostgreSQL store URL (postgresql://...?table=T)")->required();
  cmd->add_flag("--json", *json, "One JSON object instead of the tables");
  return [url, json]() -> int {
    const std::string scheme = scheme_of(*url);
    if (scheme != "postgresql" && scheme != "postgres") {
      if (scheme == "sqlite" || scheme == "memory" || scheme == "redis" || scheme == "rediss")
        throw ConfigError(scheme +
                          " stores have no partitions (only PostgreSQL outboxes have them, "
                          "docs/postgres.md \"Partitions and owners\")");
      throw ConfigError("--store must be a postgresql:// URL, got '" + redact(*url) + "'");
    }
#ifdef OUTPOST_SCHEMA_POSTGRES
    return show(*url, *json);
#else
    throw ConfigError("this build has no PostgreSQL store");
#endif
  };
}

}  // namespace outpost::cli
