#pragma once
// The outbox schema (docs/postgres.md shows the same DDL for DBAs) and every statement the store
// runs. Names are validated identifiers (core::require_identifier) and always double-quoted.

#include <string>

namespace outpost::pg {

struct Names {
  std::string schema, table;
  std::string q_schema;  // "schema"
  std::string outbox;    // "schema"."table"
  std::string dead;      // "schema"."table_dead"
  std::string archive;   // "schema"."table_archive"
  std::string versions;  // "schema"."outpost_schema_version"
  std::string channel;   // LISTEN/NOTIFY channel, at most 63 characters
  std::string maintain;  // "schema"."table_archive_maintain"

  Names(std::string schema, std::string table);
};

inline constexpr int kSchemaVersion = 2;

// Migrations in order; migration_vN brings version N - 1 to N. Run under an advisory lock.
std::string migration_v1(const Names& n);
std::string migration_v2(const Names& n);

}  // namespace outpost::pg
