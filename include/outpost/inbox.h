#pragma once
// The inbox: the consumer side of exactly-once effects. Delivery is at least once (a relay that
// dies between delivery and ack, a broker retry, a double send), so a consumer records each
// event id it has handled in the SAME transaction as the effect, and skips ids already there:
//
//   sqlite3* db = ...;                               // the consumer's own database
//   outpost::Inbox inbox({.name = "billing", .consumer = "invoices"});
//   sqlite3_exec(db, "BEGIN IMMEDIATE", ...);        // IMMEDIATE: see "Concurrency" below
//   bool ran = inbox.process(event, outpost::TxHandle::sqlite(db), [&](const outpost::Event& e) {
//     ... UPDATE accounts ... (same db, same transaction)
//   });
//   sqlite3_exec(db, "COMMIT", ...);                  // effect and id commit together, or neither
//
// Table `<name>_inbox` (consumer TEXT, event_id TEXT, recorded_at BIGINT ms, PRIMARY KEY
// (consumer, event_id)) is created on first use in the caller's transaction; several consumers
// share it, each under its own `consumer` name. Works on SQLite (TxHandle::sqlite) and
// PostgreSQL (TxHandle::postgres); other handles are a ConfigError.
//
// Concurrency: two deliveries of one id at once (two threads, two processes) run the effect
// once. PostgreSQL: the second INSERT waits on the first transaction's row and, when that commits,
// sees the id (when it rolls back, the second one runs the effect). SQLite: use BEGIN IMMEDIATE,
// so the second transaction waits for the first one's write lock and then sees its row (a
// DEFERRED transaction that read first may instead fail with SQLITE_BUSY: TimeoutError).
//
// Dedup window: ids are kept `retention` long (purge() removes older ones). A duplicate that
// arrives later than that is not recognised, so the window must be longer than the longest time
// the upstream relay can take to redeliver: its lease plus its longest backoff times its attempts
// (check_dedup_window). The Inbox constructor warns through `on_warning` when it is not.
//
// Thread safety: an Inbox holds no connection and no mutable state; one object may be used
// from several threads, each with its own transaction.
//
// Redis: there is no Redis inbox. `SET id 1 NX PX window` cannot join the effect's transaction
// (the effect lives elsewhere), so it only protects effects that are themselves idempotent;
// docs/exactly-once.md explains the difference.

#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outpost/event.h"
#include "outpost/tx.h"

namespace outpost {

// How long the upstream relay may take to deliver a message again (RelayOptions of the relay
// that feeds this consumer). Zero fields mean unknown: no check.
struct RetryHorizon {
  Duration lease{0};        // RelayOptions::lease
  Duration backoff_max{0};  // RelayOptions::backoff_max
  int max_attempts = 0;     // RelayOptions::max_attempts
  // lease + backoff_max × max_attempts: the latest a redelivery can come after the first one.
  Duration span() const { return lease + backoff_max * max_attempts; }
};

struct InboxOptions {
  // Table name prefix: the table is `<name>_inbox`. [A-Za-z_][A-Za-z0-9_]*, at most 57 characters.
  std::string name = "outpost";
  // Which consumer the ids belong to (several share one table). 1..200 bytes, any text.
  std::string consumer = "default";
  // How long ids are kept; purge() removes older ones. 0 = forever (no purge, no window check).
  Duration retention = std::chrono::hours(24 * 7);
  // The upstream relay's redelivery horizon; when retention is not longer, on_warning is called.
  RetryHorizon upstream;
  // Receives the dedup-window warning. Null: the warning goes to standard error.
  std::function<void(const std::string&)> on_warning;
};

// The warning text when `retention` does not cover `upstream.span()`, nullopt when it does (or
// when either is unknown/zero).
std::optional<std::string> check_dedup_window(Duration retention, const RetryHorizon& upstream);

class Inbox {
 public:
  // Throws ConfigError for an invalid name or consumer. Opens nothing.
  explicit Inbox(InboxOptions options);

  const InboxOptions& options() const { return options_; }
  std::string table() const { return options_.name + "_inbox"; }

  // Records `event.id` in `tx` and runs fn(event) when the id was new. Returns whether fn ran.
  // A throw from fn propagates (roll the transaction back: the id is not recorded then).
  template <class Fn>
  bool process(const Event& event, TxHandle tx, Fn&& fn) const {
    if (!record(event.id, tx)) return false;
    fn(event);
    return true;
  }

  // Records `id`; true when it was not recorded before (the caller should run the effect).
  bool record(const EventId& id, TxHandle tx) const;
  // The batch form: records every id of `ids` in one statement and returns, per position, whether
  // it is new (an id that occurs twice in `ids` is new at its first position only).
  std::vector<bool> record_new(std::span<const EventId> ids, TxHandle tx) const;
  // Forgets ids recorded in this transaction whose effect failed after all (so a later delivery
  // runs it). One statement.
  void forget(std::span<const EventId> ids, TxHandle tx) const;
  // Whether `id` is recorded.
  bool contains(const EventId& id, TxHandle tx) const;
  // Removes this consumer's ids recorded more than `older_than` ago (default: the retention);
  // returns how many. Ids of the current window stay.
  std::size_t purge(TxHandle tx, std::optional<Duration> older_than = std::nullopt) const;
  // Creates the table when missing (also done by every other call).
  void ensure_table(TxHandle tx) const;

 private:
  InboxOptions options_;
};

}  // namespace outpost
