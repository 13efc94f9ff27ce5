#pragma once
// The registry behind the store conformance suite. Each backend registers one StoreCase in its
// own file (tests/conformance/<backend>_case.cpp); the suite in store_conformance_test.cpp runs
// every test against every registered case (model: watermill's pubsub/tests).
//
// Endpoints come from the environment (OUTPOST_TEST_PG_URL, OUTPOST_TEST_REDIS_URL, ...), set by
// scripts/test. When an endpoint is missing the case is skipped with a message, unless
// OUTPOST_TEST_REQUIRE_ALL=1 (scripts/test sets it), then it fails.

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outpost/store.h"

namespace outpost::testing {

struct StoreFixture {
  std::shared_ptr<Store> store;
  // A second, independent Store object on the same backing data (another "process" or relay).
  // Null when the backend cannot share (memory:).
  std::function<std::shared_ptr<Store>()> open_again;
  // Appends `events` inside a user transaction on the backend's own native connection
  // (sqlite3* BEGIN, PGconn* BEGIN, Redis MULTI) and commits or rolls back. Null when the
  // backend takes no transaction handle.
  std::function<void(std::span<const Event> events, bool commit)> append_in_tx;
  // Whether the duplicate-id rule (tests/conformance: the id of an undelivered event, or one id
  // twice in a call, is a conflict) also covers ids this process generated. Every store checks
  // the ids a caller brings; SQLite skips ids its own process generated (unique by
  // construction) to keep its emit path fast (docs/sqlite.md).
  bool checks_generated_ids = true;
  // claim() takes a writer lease for the whole outbox (Redis, writer_lease=true): a Store object
  // that dies holding it stops every claim until the writer lease expires.
  bool single_writer = false;
  // claim() takes only from the partitions this Store object owns (PostgreSQL, docs/postgres.md
  // "Partitions and owners"): a second claiming object gets an even share of them, and a key's
  // events are claimable only by the object owning its partition.
  bool partitioned = false;
  // Store URL usable with the CLI (empty for stores that cannot be reopened by URL).
  std::string url;
  // Removes what make() created (files, tables, keys). Called by the fixture's TearDown.
  std::function<void()> cleanup;
};

struct StoreCase {
  std::string name;  // gtest-safe: [A-Za-z0-9_]
  // Empty when available; otherwise why not (e.g. "OUTPOST_TEST_PG_URL not set").
  std::function<std::string()> unavailable_reason;
  // A fresh, empty store with unique names (file, table, prefix) so tests never share state.
  std::function<StoreFixture(const StoreOptions&)> make;
};

// Registration from a static initialiser in each case file:
//   static const bool registered = outpost::testing::register_store_case({...});
bool register_store_case(StoreCase store_case);
const std::vector<StoreCase>& store_cases();

// Env helpers shared by cases.
std::optional<std::string> env(const char* name);
bool require_all_endpoints();
std::string unique_name(const std::string& prefix);  // prefix + pid + counter + random
std::string temp_dir();                              // a per-process temporary directory

}  // namespace outpost::testing
