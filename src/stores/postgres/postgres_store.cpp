// The PostgreSQL store. Every Store call is one statement (CTEs do the multi-step work), so one
// round trip per batch for claim, ack, nack, release and renew; statements are prepared once per
// pooled connection and results come back in binary format. settle_and_claim (the relay's hot
// path) sends a batch's ack, nack and release and the next claim as one libpq pipeline: one
// round trip and one commit per batch.
//
// Several relays (store objects): each claims only from the partitions it owns (membership.h,
// docs/postgres.md "Partitions and owners"), and every write-back is checked against the
// row's partition fence. Within a store object's partitions, ordered claims keep the
// head-of-key rule: a key's events are claimable only when the key's head
// (its lowest live seq) is locked by this very statement (FOR UPDATE SKIP LOCKED). A relay that
// skips a row locked by another relay's claim in progress therefore drops that key entirely, and
// a candidate whose key has an earlier non-claimable event (leased, waiting to retry) is excluded
// before it is locked, by an index probe. See docs/postgres.md for the reasoning and measurements.
//
// Around this file: config.h (the URL), sql.h (the statements' text), session.h (the relay's
// connection and its pipelines), listener.h (LISTEN/NOTIFY wake-ups), schema.h (DDL, migration,
// archive maintenance), inspect.h (the operators' blocked and leased reads), refused.h (values
// the server refuses, in our words), pg_conn.h (libpq plumbing and error mapping).

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>

#include "core/append_check.h"
#include "core/batch_seqs.h"
#include "core/headers_json.h"
#include "outpost/stores/postgres.h"
#include "stores/postgres/config.h"
#include "stores/postgres/inspect.h"
#include "stores/postgres/listener.h"
#include "stores/postgres/membership.h"
#include "stores/postgres/pg_conn.h"
#include "stores/postgres/refused.h"
#include "stores/postgres/relay_stmts.h"
#include "stores/postgres/retention.h"
#include "stores/postgres/schema.h"
#include "stores/postgres/session.h"
#include "stores/postgres/sql.h"

namespace outpost {
namespace {

// The binary jsonb format: a version byte, then the JSON text. Not an object: no headers.
Headers parse_headers_jsonb(std::string_view bin) {
  if (bin.empty()) return {};
  bin.remove_prefix(1);
  return core::headers_from_json(bin).value_or(Headers{});
}

std::string uuid_array_text(const std::vector<EventId>& ids) {
  std::string out = "{";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += ids[i].str();
  }
  out += '}';
  return out;
}

// Decodes one row of pg::kEventColumns (crashes included).
void read_event(const PGresult* r, int row, StoredEvent& e) {
  e.seq = pg::get_i64(r, row, 0);
  e.id = pg::get_uuid(r, row, 1);
  e.type = pg::get_bytes(r, row, 2);
  e.key = pg::get_bytes(r, row, 3);
  e.payload = pg::get_bytes(r, row, 4);
  e.occurred_at = pg::get_time(r, row, 5);
  e.headers = parse_headers_jsonb(pg::get_bytes(r, row, 6));
  e.attempts = pg::get_i32(r, row, 7);
  e.crashes = pg::get_i32(r, row, 8);
  if (!pg::is_null(r, row, 9)) e.deliver_at = pg::get_time(r, row, 9);
}

class PostgresStore final : public Store {
 public:
  PostgresStore(pg::Config config, const StoreOptions& options)
      : config_(std::move(config)),
        options_(options),
        names_(config_.schema, config_.table),
        sql_(names_),
        pool_(config_.endpoint, config_.pool),
        session_(config_.endpoint),
        listener_(config_.endpoint, names_.channel, sql_.next_due),
        archive_(pool_, config_.endpoint, names_, options_.archive_retention,
                 config_.partition_width) {
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
    // The member id names this store object in <table>_members and as partition owner; each
    // claim's lease owner is the member id and a counter (the prefix an upgraded outbox
    // requires of every claim, schema.h kOwnerPrefix).
    const std::string member = std::string(pg::kOwnerPrefix) + buf;
    instance_ = member + "-";
    {
      // Inspection (outpost events) never creates an outbox, and read-only opens write nothing.
      auto c = pool_.get();
      if (options_.open != StoreOptions::Open::create &&
          !pg::outbox_exists(config_.endpoint, c.pg(), names_))
        throw Error(ErrorCode::not_found, "postgres",
                    "there is no outbox " + names_.outbox + " at " + config_.endpoint.where +
                        " (nothing was created)");
      if (options_.open != StoreOptions::Open::read_only) {
        pg::migrate(config_.endpoint, c.pg(), names_, config_.partitions);
        const int parts = pg::partition_count(config_.endpoint, c.pg(), names_);
        if (config_.partitions_given && parts != config_.partitions)
          throw ConfigError("outbox " + names_.outbox + " has " + std::to_string(parts) +
                                " partitions, the URL asks for " +
                                std::to_string(config_.partitions) +
                                " (the count is fixed when the outbox is created; drop "
                                "'partitions' from the URL)",
                            "postgres");
      } else {
        // An older outbox, read as it is: crashes 0 before version 3, fences 0 before 4, no
        // deliver_at before 5, the archive's crashes 0 and no deliver_at before 6.
        auto has = [&](const std::string& table, const char* column) {
          return pg::has_column(config_.endpoint, c.pg(), table, column);
        };
        const bool crashes = has(names_.outbox, "crashes");
        const bool fence = crashes && pg::partition_count(config_.endpoint, c.pg(), names_) > 0;
        const bool deliver_at = crashes && has(names_.outbox, "deliver_at");
        const bool archive_kept = deliver_at && has(names_.archive, "deliver_at");
        if (!crashes || !deliver_at) sql_ = pg::Sql(names_, crashes, deliver_at);
        if (!fence || !archive_kept)
          inspect_ = pg::InspectSql(names_, crashes, fence, archive_kept);
      }
    }
    if (options_.open != StoreOptions::Open::read_only) {
      if (options_.archive) archive_.run(true);
      dead_retention_.run(true);
    }
    membership_ = std::make_unique<pg::Membership>(pool_, config_.endpoint, sql_.rebalance, member,
                                                   config_.partition_lease,
                                                   [this] { listener_.interrupt(); });
    stmts_ = std::make_unique<pg::RelayStatements>(sql_, options_.archive, membership_->member());
  }

  std::string_view backend() const override { return "postgres"; }
  // A row lease longer than the partition lease would keep a killed relay's events waiting
  // after its partitions moved (docs/relay.md, "Several relays: partitions").
  std::optional<Duration> max_lease() const override { return config_.partition_lease; }

  void append(std::span<const Event> events, TxHandle tx) override {
    auto prepared = core::prepare_for_append(events, options_, "postgres");
    if (prepared.empty()) return;
    pg::Params params;
    {
      pg::ArrayBuilder ids(pg::kUuidOid), types(pg::kTextOid), keys(pg::kTextOid),
          payloads(pg::kByteaOid), times(pg::kTimestamptzOid), headers(pg::kJsonbOid),
          deliver(pg::kTimestamptzOid);
      std::string tmp;
      for (const auto& e : prepared) {
        ids.add(std::string_view(reinterpret_cast<const char*>(e.id.bytes().data()), 16));
        types.add(e.type);
        keys.add(e.key);
        payloads.add(e.payload);
        tmp.clear();
        pg::put_i64(tmp, pg::to_pg_micros(e.occurred_at));
        times.add(tmp);
        headers.add("\x01" + core::headers_to_json(e.headers));
        // Held until then by the outbox's insert trigger (docs/postgres.md, "Scheduled
        // delivery"), against the server's clock.
        if (e.deliver_at) {
          tmp.clear();
          pg::put_i64(tmp, pg::to_pg_micros(*e.deliver_at));
          deliver.add(tmp);
        } else {
          deliver.add_null();
        }
      }
      for (auto* a : {&ids, &types, &keys, &payloads, &times, &headers, &deliver})
        params.binary(a->finish());
    }
    if (tx.kind() == TxHandle::Kind::postgres) {
      auto* conn = static_cast<PGconn*>(tx.native());
      if (!conn) throw ConfigError("TxHandle::postgres: null PGconn", "postgres");
      auto st = PQtransactionStatus(conn);
      if (st != PQTRANS_INTRANS)
        throw ConfigError(st == PQTRANS_INERROR
                              ? "TxHandle::postgres: the transaction is aborted (roll it back)"
                              : "TxHandle::postgres: the connection is not inside BEGIN "
                                "(start a transaction first; the events must commit with it)",
                          "postgres");
      // The caller's connection: an unnamed statement, since we cannot track what is prepared
      // there (and a failed PREPARE would abort the caller's transaction).
      try {
        auto r =
            pg::exec_on_caller_connection(config_.endpoint, conn, sql_.insert, params, "append");
        check_inserted(r.get(), prepared.size());
      } catch (const Error& e) {
        pg::throw_if_refused_value(e, prepared);
        throw;
      }
      return;
    }
    if (!tx.is_none())
      throw ConfigError("the postgres store takes TxHandle::postgres(conn) or TxHandle{}",
                        "postgres");
    // One statement is one transaction: all rows or none, and its trigger notifies once.
    auto c = pool_.get();
    try {
      auto r = pg::exec_prepared(config_.endpoint, *c, "append", sql_.insert, params, "append");
      check_inserted(r.get(), prepared.size());
    } catch (const ConnectionError& e) {
      // The statement may have committed before the connection broke; the caller can re-append
      // the same ids (a duplicate id is reported as a conflict).
      throw InDoubtError("postgres",
                         std::string(e.what()) + " (the events may or may not have been written)");
    } catch (const Error& e) {
      pg::throw_if_refused_value(e, prepared);
      throw;
    }
  }

  // The insert writes nothing when a dead event has one of the ids (a live one is caught by the
  // unique index): an id names one undelivered event, as in every store.
  static void check_inserted(PGresult* r, std::size_t expected) {
    const char* n = r ? PQcmdTuples(r) : "";
    if (n && *n && std::strtoull(n, nullptr, 10) == expected) return;
    throw Error(ErrorCode::conflict, "postgres",
                "duplicate event id: a dead event has one of the ids (retry or discard it "
                "first); nothing was written");
  }

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ClaimedBatch batch;
    batch.lease.owner = next_owner();
    if (max == 0) return batch;
    membership_->before_claim();
    if (membership_->owned() == 0) return batch;  // nothing is claimable (see settle_and_claim)
    pg::Stmt stmt = stmts_->claim(batch.lease.owner, max, lease, order, membership_->busy_keys({}));
    auto gate = membership_->claiming();
    auto r = session_.run(stmt);
    listener_.server_seen_up();
    read_claimed(r.get(), batch, lease);
    return batch;
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    Forget forget(*membership_, batch, ids);
    auto stmt = stmts_->ack(batch, ids);
    if (!stmt) return 0;
    std::size_t n =
        with_archive_partition(true, [&] { return count_rows(session_.run(*stmt).get()); });
    maintain_after_commit(true);
    return n;
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    std::vector<EventId> ids;
    for (const auto& n : nacks) ids.push_back(n.id);
    Forget forget(*membership_, batch, ids);
    auto stmt = stmts_->nack(batch, nacks);
    std::size_t n = stmt ? count_first(session_.run(*stmt).get()) : 0;
    maintain_after_commit(false);
    return n;
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    Forget forget(*membership_, batch, ids);
    auto stmt = stmts_->release(batch, ids);
    return stmt ? count_first(session_.run(*stmt).get()) : 0;
  }

  // The relay's hot path in one round trip: ack, nack, release and the next claim are sent as
  // one libpq pipeline and run as one transaction (the pipeline's implicit transaction): one
  // commit, one WAL flush, one round trip per batch, and the counts are read once it committed.
  // The claim sees the settlement (same transaction), so a key whose run was just acked can be
  // claimed again at once.
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    std::vector<EventId> settled(settlement.acks.begin(), settlement.acks.end());
    for (const auto& n : settlement.nacks) settled.push_back(n.id);
    settled.insert(settled.end(), settlement.releases.begin(), settlement.releases.end());
    Forget forget(*membership_, done, settled);
    auto acks = stmts_->ack(done, settlement.acks);
    auto nacks = stmts_->nack(done, settlement.nacks);
    auto releases = stmts_->release(done, settlement.releases);
    ClaimedBatch batch;
    batch.lease.owner = next_owner();
    std::optional<pg::Stmt> claim;
    if (max > 0) {
      membership_->before_claim();
      // A member that owns no partition (yet: the others hand over at their next heartbeat, or
      // there are more relays than partitions) sends no claim: it would find nothing, after
      // reading every row of the outbox, since the claim scans seq over all partitions and
      // drops the others' rows (docs/postgres.md, "Partitions and owners"). Measured with 8
      // relays: such claims ran back to back and held off their members' heartbeats (which
      // exclude claims) for up to 1.2 s.
      // The batch settled in this same transaction does not hold its keys back.
      if (membership_->owned() > 0)
        claim = stmts_->claim(batch.lease.owner, max, lease, order,
                              membership_->busy_keys(core::seqs_of(done, settled)));
    }
    std::vector<pg::Stmt*> steps;
    for (auto* s : {&acks, &nacks, &releases, &claim})
      if (*s) steps.push_back(&**s);
    counts = {};
    if (steps.empty()) return batch;
    // A failed pipeline rolled back as a whole, so running it again is clean.
    std::shared_lock<std::shared_mutex> gate;
    if (claim) gate = membership_->claiming();
    auto res =
        with_archive_partition(acks.has_value(), [&] { return session_.run_pipeline(steps); });
    std::size_t i = 0;
    if (acks) counts.acked = count_rows(res[i++].get());
    if (nacks) counts.nacked = count_first(res[i++].get());
    if (releases) counts.released = count_first(res[i++].get());
    if (claim) {
      read_claimed(res[i].get(), batch, lease);
      listener_.server_seen_up();
    }
    maintain_after_commit(acks.has_value());
    return batch;
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    std::vector<std::int64_t> seqs;
    for (const auto& e : batch.events) seqs.push_back(e.seq);
    if (seqs.empty()) return true;
    membership_->touch();
    pg::Stmt s{"renew", sql_.renew, {}, "renew"};
    s.params.text(batch.lease.owner);
    s.params.text(pg::int_array(seqs));
    s.params.text(std::to_string(std::max<std::int64_t>(lease.count(), 1)));
    s.params.text(membership_->member());
    const bool kept = pg::get_i64(session_.run(s).get(), 0, 0) == 0;
    membership_->renewed(seqs, lease, kept);
    return kept;
  }

  StoreStats stats() override {
    pg::Params p;
    p.text(options_.archive ? "1" : "0");
    auto r = pooled("stats", sql_.stats, p, "stats");
    StoreStats s;
    s.pending = pg::get_i64(r.get(), 0, 0);
    s.leased = pg::get_i64(r.get(), 0, 1);
    s.dead = pg::get_i64(r.get(), 0, 2);
    s.archived = pg::get_i64(r.get(), 0, 3);
    s.oldest_pending_age = Duration(std::max<std::int64_t>(pg::get_i64(r.get(), 0, 4), 0));
    s.scheduled = pg::get_i64(r.get(), 0, 5);
    return s;
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    auto r = pooled("list", sql_.list, p, "list");
    std::vector<StoredEvent> out(static_cast<std::size_t>(PQntuples(r.get())));
    for (std::size_t i = 0; i < out.size(); ++i) read_event(r.get(), static_cast<int>(i), out[i]);
    return out;
  }

  std::vector<EventState> blocked(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    return pg::read_states(pooled("blocked", inspect_.blocked, p, "blocked").get());
  }

  std::vector<EventState> leased(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    return pg::read_states(pooled("leased", inspect_.leased, p, "leased").get());
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    auto r = pooled("dead", sql_.dead, p, "dead");
    std::vector<DeadEvent> out(static_cast<std::size_t>(PQntuples(r.get())));
    for (std::size_t i = 0; i < out.size(); ++i) {
      int row = static_cast<int>(i);
      read_event(r.get(), row, out[i]);
      out[i].last_error = pg::get_bytes(r.get(), row, 10);
      out[i].dead_at = pg::get_time(r.get(), row, 11);
    }
    return out;
  }

  // The archive table exists whether or not this store object archives (another may): read it.
  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    auto r = pooled("archived", inspect_.archived, p, "archived");
    std::vector<ArchivedEvent> out(static_cast<std::size_t>(PQntuples(r.get())));
    for (std::size_t i = 0; i < out.size(); ++i) {
      read_event(r.get(), static_cast<int>(i), out[i]);
      out[i].archived_at = pg::get_time(r.get(), static_cast<int>(i), 10);
    }
    return out;
  }

  std::size_t retry(std::span<const EventId> ids) override {
    return ids.empty() ? 0 : on_dead("retry", sql_.retry, ids, "retry");
  }
  std::size_t retry_all() override { return on_dead("retry_all", sql_.retry_all, {}, "retry"); }
  std::size_t discard(std::span<const EventId> ids) override {
    return ids.empty() ? 0 : on_dead("discard", sql_.discard, ids, "discard");
  }
  std::size_t discard_all() override {
    return on_dead("discard_all", sql_.discard_all, {}, "discard");
  }

  void wait_for_work(Duration max) override { listener_.wait(max); }
  void interrupt() override { listener_.interrupt(); }

 private:
  // One statement on a pooled connection (reads and dead-letter maintenance: not the relay's).
  pg::ResultPtr pooled(const char* name, const std::string& sql, pg::Params& p, const char* what) {
    auto c = pool_.get();
    return pg::exec_prepared(config_.endpoint, *c, name, sql, p, what);
  }

  // retry / discard of the given dead events (all of them when `ids` is empty); returns how many
  // were found.
  std::size_t on_dead(const char* name, const std::string& sql, std::span<const EventId> ids,
                      const char* what) {
    pg::Params p;
    if (!ids.empty()) p.text(uuid_array_text({ids.begin(), ids.end()}));
    return tuples(pooled(name, sql, p, what).get());
  }

  // Runs `f`; with archiving on, an ack that found no archive partition for this time (23514:
  // the clock crossed into a new day/hour before maintenance ran) creates it and runs `f` once
  // more. `f` must be safe to repeat after a failure (one transaction, rolled back).
  template <class F>
  auto with_archive_partition(bool acks, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error& e) {
      if (!acks || !options_.archive || e.native_code() != "23514") throw;
      archive_.run(true);
      return f();
    }
  }

  // The periodic archive maintenance after an ack has committed. Its failure (a lock wait past
  // timeout_ms, a dropped connection) must not fail the call: the acks are durable, and a
  // caller told otherwise would settle them again (reading the short count as a lost lease) and
  // drop the batch it just claimed. Nothing is lost by skipping it: it runs again at the next
  // interval, and an ack that finds no partition forces it first (with_archive_partition), where
  // a failure does fail the ack, before it commits.
  // Dead-letter retention (retention.h) runs at the same moments, whatever was settled.
  void maintain_after_commit(bool acked) noexcept {
    try {
      if (acked && options_.archive) archive_.run(false);
    } catch (...) {
    }
    try {
      dead_retention_.run(false);
    } catch (...) {
    }
  }

  std::string next_owner() { return instance_ + std::to_string(++claims_); }

  // Forgets the settled rows of `batch` in the membership's in-flight claims when the settling
  // call ends, whatever its outcome: a row settled or fenced is no longer ours to wait for, and
  // one whose settlement failed is delivered again after its lease anyway.
  struct Forget {
    Forget(pg::Membership& m, const ClaimedBatch& batch, std::span<const EventId> ids)
        : m(m), seqs(core::seqs_of(batch, ids)) {}
    ~Forget() { m.settled(seqs); }
    pg::Membership& m;
    std::vector<std::int64_t> seqs;
  };

  // The claimed rows (kEventColumns, part, fence), noted as in flight. The batch's fence is
  // the highest of its partitions' fences (each row is checked against its own).
  void read_claimed(const PGresult* r, ClaimedBatch& batch, Duration lease) {
    int n = PQntuples(r);
    batch.events.resize(static_cast<std::size_t>(n));
    std::vector<std::int64_t> seqs(static_cast<std::size_t>(n));
    std::vector<int> parts(static_cast<std::size_t>(n));
    std::vector<std::string> keys(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      auto k = static_cast<std::size_t>(i);
      read_event(r, i, batch.events[k]);
      seqs[k] = batch.events[k].seq;
      parts[k] = pg::get_i32(r, i, 10);
      keys[k] = batch.events[k].key;
      batch.lease.fence = std::max(batch.lease.fence, pg::get_i64(r, i, 11));
    }
    std::sort(batch.events.begin(), batch.events.end(),
              [](const StoredEvent& a, const StoredEvent& b) { return a.seq < b.seq; });
    if (n > 0) membership_->claimed(seqs, parts, keys, lease);
  }

  // ack reports its rows in the command tag (DELETE n / INSERT 0 n); nack and release SELECT
  // their count.
  static std::size_t count_rows(const PGresult* r) { return tuples(r); }
  static std::size_t count_first(const PGresult* r) {
    return static_cast<std::size_t>(pg::get_i64(r, 0, 0));
  }

  static std::size_t tuples(const PGresult* r) {
    const char* t = PQcmdTuples(const_cast<PGresult*>(r));
    return t && *t ? static_cast<std::size_t>(std::strtoull(t, nullptr, 10)) : 0;
  }

  const pg::Config config_;
  StoreOptions options_;
  const pg::Names names_;
  pg::Sql sql_;  // rebuilt in the constructor for an older outbox opened read-only
  pg::InspectSql inspect_{names_};
  pg::Pool pool_;
  pg::Session session_;
  pg::Listener listener_;
  pg::ArchiveMaintenance archive_;
  pg::DeadRetention dead_retention_{pool_, config_.endpoint, names_, options_.dead_retention};
  std::string instance_;
  std::atomic<std::uint64_t> claims_{0};
  std::unique_ptr<pg::Membership> membership_;  // last: leaves before the pool closes
  std::unique_ptr<pg::RelayStatements> stmts_;
};

}  // namespace

std::unique_ptr<Store> open_postgres_store(std::string_view url, const StoreOptions& options) {
  StoreOptions opts = options;
  auto config = pg::parse_config(url, opts);
  return std::make_unique<PostgresStore>(std::move(config), opts);
}

}  // namespace outpost
