#include "stores/postgres/config.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <initializer_list>

#include "core/names.h"
#include "core/store_params.h"
#include "core/url.h"

namespace outpost::pg {

Config parse_config(std::string_view text, StoreOptions& options) {
  auto url = core::Url::parse(text);
  if (url.scheme() != "postgresql" && url.scheme() != "postgres")
    throw ConfigError("not a postgresql:// URL: '" + url.redacted() + "'");
  if (!url.hierarchical())
    throw ConfigError("bad URL '" + url.redacted() + "': use postgresql://user@host:port/db");
  Config c;
  if (auto v = url.param("table")) c.table = *v;
  if (auto v = url.param("schema")) c.schema = *v;
  core::require_identifier(c.table, "table");
  core::require_identifier(c.schema, "schema");
  // Derived names (<table>_archive_pYYYYMMDDHH, ...) must stay within 63 characters.
  if (c.table.size() > 40)
    throw ConfigError("table '" + c.table +
                      "' is invalid: at most 40 characters (derived names such as " + c.table +
                      "_archive_pYYYYMMDDHH must fit PostgreSQL's 63)");
  if (auto v = url.bool_param("archive")) options.archive = *v;
  core::apply_retention_params(url, options);  // archive_retention=, dead_retention=
  if (auto v = url.param("archive_partition")) {
    if (*v != "day" && *v != "hour")
      throw ConfigError("parameter 'archive_partition' must be day or hour, got '" + *v + "'");
    c.partition_width = *v;
  }
  if (auto v = url.int_param("pool", 1, 64)) c.pool = static_cast<std::size_t>(*v);
  if (auto v = url.int_param("partitions", 1, 1024)) {
    c.partitions = static_cast<int>(*v);
    c.partitions_given = true;
  }
  if (auto v = url.int_param("partition_lease_ms", 200, 600'000)) c.partition_lease = Duration(*v);
  c.endpoint = parse_endpoint(url);
  url.reject_unknown();
  return c;
}

Endpoint parse_endpoint(const core::Url& url) {
  Endpoint ep;
  // Client-side deadline of each statement (Endpoint::timeout), as Redis's timeout_ms.
  if (auto v = url.int_param("timeout_ms", 1, 600'000)) ep.timeout = Duration(*v);

  auto add = [&](std::string k, std::string v) {
    ep.keys.push_back(std::move(k));
    ep.values.push_back(std::move(v));
  };
  std::string hosts, ports;
  for (const auto& hp : url.hosts()) {
    hosts += (hosts.empty() ? "" : ",") + hp.host;
    ports += (ports.empty() ? "" : ",") + std::to_string(hp.port ? hp.port : 5432);
  }
  if (!hosts.empty()) {
    add("host", hosts);
    add("port", ports);
  }
  std::string db = url.path();
  if (!url.user().empty()) add("user", url.user());
  if (!url.password().empty()) add("password", url.password());
  if (!db.empty()) add("dbname", db);
  bool timeout_given = false, app_given = false;
  // libpq's values are checked here, so a typo is a usage error (exit 2) before any connection
  // is tried, not libpq's "invalid ... value" at connect time.
  if (auto t = url.int_param("connect_timeout", 0, 86'400))
    add("connect_timeout", std::to_string(*t));
  auto one_of = [&](const char* k, std::initializer_list<std::string_view> values) {
    auto v = url.param(k);
    if (!v) return;
    if (std::find(values.begin(), values.end(), *v) == values.end()) {
      std::string list;
      for (auto x : values) list += (list.empty() ? "" : ", ") + std::string(x);
      throw ConfigError("bad URL '" + url.redacted() + "': parameter '" + k + "' must be one of " +
                        list + ", got '" + *v + "'");
    }
  };
  one_of("sslmode", {"disable", "allow", "prefer", "require", "verify-ca", "verify-full"});
  one_of("target_session_attrs",
         {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"});
  for (const char* k : {"connect_timeout", "sslmode", "sslrootcert", "sslcert", "sslkey",
                        "application_name", "target_session_attrs"}) {
    if (auto v = url.param(k)) {
      if (std::string_view(k) != "connect_timeout") add(k, *v);
      timeout_given |= std::string_view(k) == "connect_timeout";
      app_given |= std::string_view(k) == "application_name";
    }
  }
  // A server that is down must fail fast, not hang the relay; libpq's default is forever.
  if (!timeout_given) add("connect_timeout", "5");
  if (!app_given) add("application_name", "outpost");
  ep.where = (hosts.empty() ? std::string("local socket") : hosts + ":" + ports) +
             (db.empty() ? "" : "/" + db) + (url.user().empty() ? "" : " as " + url.user());
  return ep;
}

}  // namespace outpost::pg
