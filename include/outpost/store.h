#pragma once
// The Store interface: where the outbox lives. Every backend implements the same life cycle
// (docs/architecture.md, "The path of one event"):
//
//   append (in the caller's txn) -> pending(due_at = now)
//   pending  --claim--> leased(owner, lease_until), attempts + 1
//   leased   --ack-->   deleted, or moved to the archive
//   leased   --nack(error, retry_in)--> pending(due_at = now + retry_in)
//   leased   --nack(error, dead)--> dead(last_error)
//   leased   --release--> pending, due now, the claim's attempt not counted
//   leased   --lease expires--> claimable again, still owned by the expired claim
//   expired  --claim--> leased(new owner, lease_until), crashes + 1, attempts unchanged
//   dead     --retry--> pending(attempts = 0, crashes = 0)        dead --discard--> deleted
//
// attempts counts delivery attempts: the failures recorded by nacks plus the one in flight. A
// lease that expired with no outcome recorded (the relay died, hung, or could not write the
// outcome) is not a new attempt: the next claim takes over the expired claim's attempt and
// counts a crash instead (StoredEvent::crashes), so an outage of the store or a relay killed
// again and again never uses up attempts; the relay bounds crashes on their own. Every store
// tells an expired claim from a fresh one by the owner the expired claim left on the event
// (ack, nack and release all clear or delete it).
//
// Time (due_at, lease_until) comes from one clock per store (the database's now(), Redis TIME),
// never from the relay hosts.
//
// Thread safety: every Store method may be called from several threads at once.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/event.h"
#include "outpost/open_mode.h"
#include "outpost/tx.h"

namespace outpost {

// Identifies one claim. ack/nack/renew/release act only on events still leased under this
// token: once a lease expired and another relay claimed the events, the old token no longer
// matches and its acks are ignored (fencing).
struct LeaseToken {
  std::string owner;       // unique per claim: relay instance id + claim counter
  std::int64_t fence = 0;  // monotonically increasing where the backend has one (Redis), else 0
};

struct ClaimedBatch {
  std::vector<StoredEvent> events;  // in store sequence order
  LeaseToken lease;
  bool empty() const { return events.empty(); }
};

enum class ClaimOrder {
  // An event is claimable only when every earlier event of its key is delivered, dead, or in
  // the same batch; so a key is never in flight in two batches (also across relays), and a batch
  // may carry a run of one key in order. Events with an empty key have no constraint.
  ordered,
  // Any due, unleased event; highest throughput, no per-key guarantee.
  unordered,
  // As ordered, and a dead event blocks the later events of its key (on_dead=hold): none of
  // them is claimable until the dead letter is retried or discarded, so a retried event is
  // delivered before them (docs/relay.md, "On dead"; guarantee 5 in docs/guarantees.md).
  // Stores that cannot do this yet refuse the claim with ConfigError.
  strict,
};

struct Nack {
  EventId id;
  std::string error;                 // kept as the event's last error
  std::optional<Duration> retry_in;  // nullopt: move to the dead letters now
};

// What the relay decided for the events of one claimed batch (see Store::settle_and_claim).
struct Settlement {
  std::span<const EventId> acks;
  std::span<const Nack> nacks;
  std::span<const EventId> releases;
  bool empty() const { return acks.empty() && nacks.empty() && releases.empty(); }
};

// How many of each settlement were still leased under the batch's lease (the rest were fenced).
struct SettleCounts {
  std::size_t acked = 0;
  std::size_t nacked = 0;
  std::size_t released = 0;
};

struct StoreStats {
  // Not yet delivered and not leased, including those waiting to retry; not the scheduled ones.
  std::int64_t pending = 0;
  // Never delivered (no attempt yet), held back by a deliver_at still in the future; counted
  // apart from pending.
  std::int64_t scheduled = 0;
  std::int64_t leased = 0;         // claimed under a live lease
  std::int64_t dead = 0;           // dead letters
  std::int64_t archived = 0;       // rows in the archive (0 when archiving is off)
  Duration oldest_pending_age{0};  // age of the oldest undelivered event (0 when none)
};

// One undelivered event as the store sees it now, for operators (Store::blocked, Store::leased;
// the dashboard's blocked keys and leases views). Times are the store's clock.
struct EventState {
  std::int64_t seq = 0;
  EventId id;
  std::string type;
  std::string key;
  int attempts = 0;        // delivery attempts so far (counting one in flight)
  int crashes = 0;         // claims whose lease expired with no outcome (StoredEvent::crashes)
  std::string last_error;  // the last delivery error; empty: none
  // Store::blocked only (empty elsewhere): why the key's head (its earliest undelivered event)
  // waits. "failing": the head failed and waits to retry. "dead" (ahead of "failing"): a dead
  // letter of the key that relays claiming with ClaimOrder::strict (on_dead=hold) hold the key
  // behind until it is retried or discarded (under on_dead=continue the key flows on). Which
  // dead letter counts is each store's strict claim's own rule: SQLite and PostgreSQL, any dead
  // letter of the key (the dead letters' keys, wherever they stood in the key's order); memory,
  // a dead letter with a lower seq than the head; Redis, the dead letter that is the head's
  // predecessor in the key's chain (found from the key's tail; with partitions, per partition).
  std::string reason;
  // Not leased: when it is due (again); for a failed event, its next attempt.
  std::optional<TimePoint> next_attempt;
  // Under a live lease: the claim's LeaseToken (owner as the claim returned it, fence) and
  // when the lease expires unless renewed. Empty owner: not leased (or the lease expired).
  std::string lease_owner;
  std::int64_t fence = 0;
  std::optional<TimePoint> lease_until;
};

// Options shared by every store; backends take theirs from the URL as well.
struct StoreOptions {
  // On ack, move events to an archive instead of deleting them.
  bool archive = false;
  // Archived events older than this are removed (0 = keep forever).
  Duration archive_retention{0};
  // Dead letters that died longer ago than this are removed (0 = keep forever). URL parameter
  // dead_retention=DURATION on every store (core::apply_retention_params).
  Duration dead_retention{0};
  // Largest accepted payload in bytes; append throws ErrorCode::too_large above it (0 = no limit).
  std::size_t max_payload_bytes = 1 << 20;
  // What opening may do (OpenMode, open_mode.h; Open is its older name here). create: make the
  // outbox when it is missing. existing: open only an outbox that is there; none is
  // ErrorCode::not_found and nothing is created. read_only: as existing, and the store never writes
  // (inspection on a read-only file; a write throws). `outpost events` opens with existing (retry,
  // discard) or read_only (stats, list, dead). SQLite honours all three. PostgreSQL creates and
  // migrates nothing unless create (read_only does not refuse writes). Redis and memory create
  // nothing at open (a prefix without events reads as an empty outbox).
  using Open = OpenMode;
  Open open = Open::create;
};

// The store as the relay sees it: the life cycle above, from append to wait_for_work. A program
// that only emits and relays needs nothing else (docs/architecture.md, "Store by audience").
class OutboxStore {
 public:
  virtual ~OutboxStore() = default;

  // "sqlite", "postgres", "redis", "memory".
  virtual std::string_view backend() const = 0;

  // Writes events. With a TxHandle the write joins the caller's transaction (rollback = no
  // event); with TxHandle{} the store commits them itself, all or nothing. Events with a nil id
  // get a fresh UUIDv7; a zero occurred_at becomes now. Throws before writing anything on
  // invalid events, the same rules on every store: ConfigError naming the event and field for a
  // type, key or header that is not UTF-8 without NUL within outpost::limits (event.h) or an
  // empty type; Error(too_large) for an oversize payload.
  virtual void append(std::span<const Event> events, TxHandle tx = {}) = 0;

  // Claims up to `max` due events under a new lease of length `lease`, incrementing their
  // attempts (or, for an event whose earlier claim's lease expired unsettled, its crashes; see
  // the life cycle above). Returns an empty batch when nothing is claimable.
  virtual ClaimedBatch claim(std::size_t max, Duration lease,
                             ClaimOrder order = ClaimOrder::ordered) = 0;

  // Delivered: delete (or archive). Returns how many were still leased under batch.lease.
  virtual std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) = 0;

  // Failed: reschedule or dead-letter each event. Returns how many were still leased.
  virtual std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) = 0;

  // Not attempted (held back behind a failed event of its key, or the relay is stopping):
  // make claimable again now, without counting the attempt. Returns how many were still leased.
  virtual std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) = 0;

  // Extends the lease of every still-outstanding event of the batch. false: the lease is lost
  // (expired and claimed by someone else): the caller must abort the batch.
  virtual bool renew(const ClaimedBatch& batch, Duration lease) = 0;

  // The longest lease worth asking for (nullopt: no limit). The relay uses min(its lease, this)
  // for claims, renewals and its delivery deadline (docs/relay.md, "The lease deadline").
  // PostgreSQL answers its partition lease: a relay's deliveries then never outlive its
  // partitions, and a killed relay's events come back about one partition lease after its
  // partitions do (docs/postgres.md, "Partitions and owners"). A longer lease is still granted
  // as asked (the caller's deadline relies on it); its events just wait longer after a crash.
  virtual std::optional<Duration> max_lease() const { return std::nullopt; }

  // The relay's hot path: settles `done` (ack, nack, release, as the separate calls do) and
  // then claims the next batch, in as few round trips and transactions as the backend allows.
  // `counts` gets what the separate calls would have returned. The settlement takes effect even
  // when nothing is claimable. If it throws, any part of the settlement may or may not have
  // taken effect: the caller settles again with the separate calls (fencing makes repeating
  // them harmless) before claiming again. The default runs the separate calls in turn.
  virtual ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                        SettleCounts& counts, std::size_t max, Duration lease,
                                        ClaimOrder order = ClaimOrder::ordered);

  // Blocks until new work may be claimable (an emit committed, a retry became due), `max`
  // passed, or interrupt() was called. Spurious wake-ups are allowed.
  virtual void wait_for_work(Duration max) = 0;

  // Wakes every wait_for_work() now (used by stop()).
  virtual void interrupt() = 0;
};

// The store as operators see it: counts, inspection and the dead letters' retry and discard
// (`outpost events`, the dashboard, /metrics). Nothing here is on the relay's path.
class OutboxAdmin {
 public:
  virtual ~OutboxAdmin() = default;

  // As OutboxStore::backend (a Store answers both with one override).
  virtual std::string_view backend() const = 0;

  virtual StoreStats stats() = 0;

  // Undelivered events (pending and leased) in sequence order, for inspection.
  virtual std::vector<StoredEvent> list(std::size_t limit) = 0;

  // Read-only inspection for operators (bounded by `limit`, oldest first):
  // blocked: the head events (the lowest undelivered seq of a non-empty key) that have failed
  // (attempts > 0 and a last error; EventState::reason "failing"): in ordered mode the rest of
  // their key waits behind them; and the heads that come after a dead letter of their key
  // (reason "dead", ahead of "failing"): held under ClaimOrder::strict. A dead-lettered head no
  // longer blocks in ordered mode, a retried dead letter starts at 0 attempts.
  virtual std::vector<EventState> blocked(std::size_t limit) = 0;
  // leased: the events under a live lease (claimed, unsettled, not expired), in seq order.
  virtual std::vector<EventState> leased(std::size_t limit) = 0;

  // Dead letters, oldest first.
  virtual std::vector<DeadEvent> dead(std::size_t limit) = 0;

  // The archive (acked events kept with StoreOptions::archive), most recently archived first, at
  // most `limit`. The default, for a store that keeps no archive it can read, throws
  // Error(not_found) saying so; SQLite and Redis read theirs.
  virtual std::vector<ArchivedEvent> archived(std::size_t limit);

  // Dead -> pending with attempts = 0 and crashes = 0. Returns how many dead events were found.
  virtual std::size_t retry(std::span<const EventId> ids) = 0;
  virtual std::size_t retry_all() = 0;

  // Dead -> deleted. Returns how many dead events were found.
  virtual std::size_t discard(std::span<const EventId> ids) = 0;
  virtual std::size_t discard_all() = 0;
};

// One outbox, both audiences: what every backend implements and open_store returns. Code that
// needs one half takes OutboxStore& or OutboxAdmin&; a Store& converts to either.
class Store : public OutboxStore, public OutboxAdmin {
 public:
  // One override answers both halves; declared here so that store.backend() is not ambiguous.
  std::string_view backend() const override = 0;
};

}  // namespace outpost
