#pragma once
// The PostgreSQL store's URL: postgresql://user[:password]@host[:port][,host2...]/db?table=...
// (docs/postgres.md lists the parameters). Parsed and checked before anything is opened.

#include <cstddef>
#include <string>
#include <string_view>

#include "outpost/store.h"
#include "stores/postgres/pg_conn.h"

namespace outpost::core {
class Url;
}

namespace outpost::pg {

struct Config {
  Endpoint endpoint;
  std::string schema = "public";
  std::string table = "outbox";
  std::string partition_width = "day";
  std::size_t pool = 8;
  // Partitions (docs/postgres.md, "Partitions and owners"): how many a new outbox gets (an
  // existing outbox keeps its own; `partitions_given` refuses a URL asking for another count),
  // and how long an owner's partition lease lasts without a heartbeat.
  int partitions = 64;
  bool partitions_given = false;
  Duration partition_lease{5000};
};

// Parses the URL into libpq connection keywords and the outbox's names; the archive parameters
// go into `options`. Throws ConfigError naming the parameter (never the password).
Config parse_config(std::string_view url, StoreOptions& options);

// The connection part of a postgresql:// URL: hosts, user, password, dbname, libpq's
// connect_timeout, sslmode, sslrootcert, sslcert, sslkey, application_name and
// target_session_attrs (values checked as libpq would take them), and timeout_ms. One parse for
// the outbox store (parse_config) and the consumer's checkpoint store
// (src/consume/checkpoint_store.cpp), so one URL connects alike in both. Marks those parameters
// known on `url` (the caller reads its own and calls reject_unknown()); throws ConfigError
// naming the parameter (never the password).
Endpoint parse_endpoint(const core::Url& url);

}  // namespace outpost::pg
