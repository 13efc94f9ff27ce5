// The SQLite store (see include/outpost/stores/sqlite.h for the user's view).
//
// Files: sqlite_conn (connections, statement cache, the error mapping), sqlite_schema (tables
// and migration), sqlite_lock (the writer lock), sqlite_sql (SQL text), sqlite_claim,
// sqlite_settle, sqlite_append, sqlite_url (URL parsing), sqlite_inspect (blocked, leased);
// this file: the Store object.
//
// Layout (schema version 4, sqlite_schema.cpp), created in one transaction on open:
//   <t>          the state: seq INTEGER PRIMARY KEY AUTOINCREMENT (the rowid: cheap appends;
//                never reused, so a retried dead event keeps its place and archive rows never
//                clash), key, attempts, due_at (ms), lease_owner (integer), lease_until (ms),
//                last_error, crashes (version 3)
//   <t>_body     seq, id (16 bytes; no index: a unique index measured 20% of end-to-end
//                events/s, 2026-11-22, docs/sqlite.md; ids a caller brings are checked by a
//                scan instead, check_ids), type, payload, occurred_at (us), headers (JSON
//                object or NULL), deliver_at (us or NULL; version 4)
//   <t>_dead     all columns + last_error, dead_at (ms), crashes (version 3), deliver_at (4)
//   <t>_archive  acked events when archiving is on, acked_at (ms) for retention, deliver_at (4)
//   <t>_schema   one row: the schema version
// No secondary index on <t>: the claim reads the narrow state rows from the head and finds the
// keys held back by earlier attempted rows (in flight or waiting for a retry) on the way, in C++
// (claim_in_txn). Version 1 had a partial index on (key, seq) WHERE attempts > 0 for that; it
// cost a B-tree insert per claimed row and a delete per ack, and version 2 drops it.
//
// Concurrency: one writer connection and one reader connection per store object. Writes of all
// store objects on one file in this process take a FIFO ticket lock (SQLite's busy handler is
// not fair: a busy producer starves the relay); across processes BEGIN IMMEDIATE is retried
// with jittered backoff until busy_timeout. Wake-ups: a process-wide condition variable per file
// for in-process appends, and PRAGMA data_version on the writer connection (changes only when
// another connection commits; no disk I/O) polled every 2 ms for other connections' commits.

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>

#include "core/append_check.h"
#include "core/batch_seqs.h"
#include "core/fair_lock.h"
#include "core/names.h"
#include "outpost/error.h"
#include "outpost/stores/sqlite.h"
#include "stores/sqlite/sqlite_append.h"
#include "stores/sqlite/sqlite_claim.h"
#include "stores/sqlite/sqlite_conn.h"
#include "stores/sqlite/sqlite_file_check.h"
#include "stores/sqlite/sqlite_inspect.h"
#include "stores/sqlite/sqlite_lock.h"
#include "stores/sqlite/sqlite_schema.h"
#include "stores/sqlite/sqlite_settle.h"
#include "stores/sqlite/sqlite_sql.h"
#include "stores/sqlite/sqlite_url.h"

namespace outpost {
namespace {

using namespace sqlite_store;  // this backend's own pieces

// How often a waiter polls PRAGMA data_version for other connections' commits.
constexpr auto kPollInterval = std::chrono::milliseconds(2);

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(const SqliteOptions& options)
      : options_(options),
        t_(validated_table(options.table)),
        memory_(options.path == ":memory:"),
        sql_(t_) {
    check_options(options_);  // ConfigError naming what is wrong, before anything is opened
    path_ = memory_ ? options_.path : canonical(options_.path);
    shared_ = memory_ ? std::make_shared<FileShared>() : shared_for(path_);
    std::random_device rd;
    owner_base_ =
        (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());

    if (open_ != StoreOptions::Open::create) {
      if (memory_) throw_no_outbox(options_.path, t_, "sqlite::memory: is new and empty");
      std::error_code ec;
      if (!std::filesystem::exists(options_.path, ec))
        throw_no_outbox(options_.path, t_, "the file does not exist");
    }
    writer_ = open_connection(open_spec(), true);
    if (const int v = init_schema(); v < kSchemaVersion) {  // an older file opened read-only
      sql_ = SqlText(t_, v >= 3, v >= 4);
      inspect_ = InspectSql(t_, v >= 3);
    }
    if (!memory_) reader_ = open_connection(open_spec(), false);
    claim_dv_ = writer_data_version();
    {
      std::lock_guard l(shared_->mu);
      claim_gen_ = shared_->generation;
    }
    if (!memory_) file_check_.start(path_);  // the file opened: noticed when the path changes
  }

  std::string_view backend() const override { return "sqlite"; }

  static std::string validated_table(const std::string& table) {
    core::require_identifier(table, "table name");
    return table;
  }

  // --- append ---

  void append(std::span<const Event> events, TxHandle tx) override {
    auto prepared = core::prepare_for_append(events, options_.store, "sqlite");
    if (prepared.empty()) return;
    file_check_.check();  // not into a file that was removed or replaced
    if (tx.kind() == TxHandle::Kind::sqlite) {
      append_in_user_tx(prepared, static_cast<sqlite3*>(tx.native()));
      return;
    }
    if (!tx.is_none())
      throw ConfigError("the sqlite store takes TxHandle::sqlite(db) or no transaction handle",
                        "sqlite");
    write_txn([&](Conn& c) {
      insert_events(c.db(), &c, sql_, options_.path, prepared);
      return 0;
    });
    notify();
  }

  // --- claim ---

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ClaimedBatch batch;
    batch.lease.owner = std::to_string(next_owner());
    if (max == 0) return batch;
    file_check_.check();
    write_txn([&](Conn& c) {
      claim_in_txn(c, batch, max, lease, order);
      return 0;
    });
    return batch;
  }

  // --- settle ---

  // The settlement and the next claim in ONE write transaction: one BEGIN IMMEDIATE/COMMIT and
  // one turn of the file's write lock per batch instead of two. Same statements as the separate
  // calls, so fencing and the counts are the same.
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    counts = {};
    ClaimedBatch batch;
    batch.lease.owner = std::to_string(next_owner());
    AckPlan ack_plan;
    if (!settlement.acks.empty()) ack_plan = plan_ack(done, settlement.acks);
    std::vector<std::int64_t> release_seqs;
    if (!settlement.releases.empty()) release_seqs = core::seqs_of(done, settlement.releases);
    if (ack_plan.seqs.empty() && settlement.nacks.empty() && release_seqs.empty() && max == 0)
      return batch;
    // Before anything is written: the caller then settles on its own (ack, nack and release
    // still work on the old file), as after any failure of this call.
    if (max > 0) file_check_.check();
    write_txn([&](Conn& c) {
      counts = {};
      if (!ack_plan.seqs.empty())
        counts.acked = ack_in_txn(c, sql_, done, ack_plan, options_.store);
      if (!settlement.nacks.empty()) counts.nacked = nack_in_txn(c, sql_, done, settlement.nacks);
      if (!release_seqs.empty()) counts.released = release_in_txn(c, sql_, done, release_seqs);
      // Waiters recompute when the next retry falls due / claim the released events. Notified
      // before the claim below takes its baseline, so this object's next wait does not wake on
      // its own settlement; a waiter that wakes now claims after this commit (write lock).
      if (!settlement.nacks.empty() || counts.released > 0) notify();
      if (max > 0) claim_in_txn(c, batch, max, lease, order);
      return 0;
    });
    return batch;
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    AckPlan plan = plan_ack(batch, ids);
    if (plan.seqs.empty()) return 0;
    return write_txn([&](Conn& c) { return ack_in_txn(c, sql_, batch, plan, options_.store); });
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    std::size_t n = write_txn([&](Conn& c) { return nack_in_txn(c, sql_, batch, nacks); });
    notify();  // waiters recompute when the next retry falls due
    return n;
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    auto seqs = core::seqs_of(batch, ids);
    if (seqs.empty()) return 0;
    std::size_t n = write_txn([&](Conn& c) { return release_in_txn(c, sql_, batch, seqs); });
    if (n) notify();
    return n;
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    if (batch.events.empty()) return true;
    std::vector<std::int64_t> seqs;
    for (const auto& e : batch.events) seqs.push_back(e.seq);
    std::string list = json_seqs(seqs);
    return write_txn([&](Conn& c) {
      Use u(c.prepare(sql_.renew));
      sqlite3_bind_int64(u, 1, lease.count());
      sqlite3_bind_int64(u, 2, owner_of(batch));
      bind_text(u, 3, list);
      run(c.db(), u, "renewing a lease");
      Use q(c.prepare(sql_.renew_lost));
      sqlite3_bind_int64(q, 1, owner_of(batch));
      bind_text(q, 2, list);
      step_row(c.db(), q, "checking a lease");
      return sqlite3_column_int64(q, 0) == 0;
    });
  }

  // --- inspection ---

  StoreStats stats() override {
    return read([&](Conn& c) { return read_stats(c, sql_); });
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    return read([&](Conn& c) {
      std::vector<StoredEvent> out;
      Use s(c.prepare(sql_.list));
      sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
      while (step_row(c.db(), s, "listing events")) {
        StoredEvent& e = out.emplace_back();
        read_event(s, e);
        e.crashes = sqlite3_column_int(s, 9);
      }
      return out;
    });
  }

  std::vector<EventState> blocked(std::size_t limit) override {
    return read([&](Conn& c) { return read_states(c, inspect_.blocked, limit); });
  }
  std::vector<EventState> leased(std::size_t limit) override {
    return read([&](Conn& c) { return read_states(c, inspect_.leased, limit); });
  }

  std::vector<ArchivedEvent> archived(std::size_t limit) override {
    return read([&](Conn& c) {
      std::vector<ArchivedEvent> out;
      Use s(c.prepare(sql_.list_archive));
      sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
      while (step_row(c.db(), s, "listing archived events")) {
        ArchivedEvent& a = out.emplace_back();
        read_event(s, a);
        a.archived_at = TimePoint(std::chrono::milliseconds(sqlite3_column_int64(s, 9)));
      }
      return out;
    });
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    return read([&](Conn& c) {
      std::vector<DeadEvent> out;
      Use s(c.prepare(sql_.list_dead));
      sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
      while (step_row(c.db(), s, "listing dead events")) {
        DeadEvent& d = out.emplace_back();
        read_event(s, d);
        d.last_error = column_text(s, 9);
        d.dead_at = TimePoint(std::chrono::microseconds(sqlite3_column_int64(s, 10) * 1000));
        d.crashes = sqlite3_column_int(s, 11);
      }
      return out;
    });
  }

  std::size_t retry(std::span<const EventId> ids) override {
    std::size_t n = write_txn([&](Conn& c) {
      std::size_t count = 0;
      for (const auto& id : ids) {
        Use s(c.prepare(sql_.retry_one));
        bind_blob(s, 1, id.bytes().data(), 16);
        if (run(c.db(), s, "retrying a dead event") == 0) continue;
        Use sb(c.prepare(sql_.retry_one_body));
        bind_blob(sb, 1, id.bytes().data(), 16);
        run(c.db(), sb, "retrying a dead event");
        Use d(c.prepare(sql_.delete_dead_one));
        bind_blob(d, 1, id.bytes().data(), 16);
        count += static_cast<std::size_t>(run(c.db(), d, "retrying a dead event"));
      }
      return count;
    });
    if (n) notify();
    return n;
  }

  std::size_t retry_all() override {
    std::size_t n = write_txn([&](Conn& c) {
      Use s(c.prepare(sql_.retry_all));
      run(c.db(), s, "retrying dead events");
      Use sb(c.prepare(sql_.retry_all_body));
      run(c.db(), sb, "retrying dead events");
      Use d(c.prepare(sql_.delete_revived));
      return static_cast<std::size_t>(run(c.db(), d, "retrying dead events"));
    });
    if (n) notify();
    return n;
  }

  // A discard unblocks its key under strict claims, which wait_for_work then no longer skips:
  // it wakes the waiters of this process (other processes see the commit's data_version).
  std::size_t discard(std::span<const EventId> ids) override {
    std::size_t n = write_txn([&](Conn& c) {
      std::size_t count = 0;
      for (const auto& id : ids) {
        Use d(c.prepare(sql_.delete_dead_one));
        bind_blob(d, 1, id.bytes().data(), 16);
        count += static_cast<std::size_t>(run(c.db(), d, "discarding a dead event"));
      }
      return count;
    });
    if (n) notify();
    return n;
  }

  std::size_t discard_all() override {
    std::size_t n = write_txn([&](Conn& c) {
      Use d(c.prepare(sql_.discard_all));
      return static_cast<std::size_t>(run(c.db(), d, "discarding dead events"));
    });
    if (n) notify();
    return n;
  }

  // --- wake-ups ---

  void wait_for_work(Duration max) override {
    // The last claim stopped early: there may be claimable rows past its window, and the next
    // claim reads the whole table. A spurious wake-up is allowed.
    if (last_claim_truncated_.load()) return;
    file_check_.check();
    auto start = SteadyClock::now();
    auto deadline = start + max;
    // Wake no later than the next retry or lease expiry.
    if (auto due_in = next_due_in(); due_in && start + *due_in < deadline)
      deadline = start + *due_in;
    const std::uint64_t dv0 = claim_dv_.load();
    std::unique_lock l(shared_->mu);
    const std::uint64_t gen0 = claim_gen_.load();
    const std::uint64_t int0 = interrupts_;
    while (true) {
      if (shared_->generation != gen0 || interrupts_ != int0) return;
      auto t = SteadyClock::now();
      if (t >= deadline) return;
      auto slice =
          memory_ ? deadline - t : std::min<SteadyClock::duration>(kPollInterval, deadline - t);
      shared_->cv.wait_for(l, slice);
      if (shared_->generation != gen0 || interrupts_ != int0) return;
      if (memory_) continue;
      l.unlock();
      file_check_.check();  // an idle relay notices a removed or replaced file too
      auto dv = try_writer_data_version();
      if (dv && *dv != dv0) return;  // another connection (or process) committed
      l.lock();
    }
  }

  void interrupt() override {
    {
      std::lock_guard l(shared_->mu);
      ++interrupts_;
    }
    shared_->cv.notify_all();
  }

 private:
  // --- connections and schema ---

  OpenSpec open_spec() const {
    return {options_.path, memory_, open_, options_.busy_timeout, options_.synchronous_full};
  }

  // Returns the outbox's schema version (kSchemaVersion unless opened read-only).
  int init_schema() {
    if (open_ == StoreOptions::Open::read_only)  // check only, no transaction to write in
      return migrate(writer_, options_.path, t_, open_);
    std::lock_guard<core::FairLock> g(shared_->write_lock);
    begin_immediate(writer_, options_.path, options_.busy_timeout);
    try {
      int version = migrate(writer_, options_.path, t_, open_);
      writer_.exec("COMMIT");
      return version;
    } catch (...) {
      sqlite3_exec(writer_.db(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // --- transactions ---

  // Runs fn(writer) in one BEGIN IMMEDIATE transaction under the file's fair lock.
  template <class F>
  auto write_txn(F&& fn) -> decltype(fn(std::declval<Conn&>())) {
    std::lock_guard<core::FairLock> g(shared_->write_lock);
    begin_immediate(writer_, options_.path, options_.busy_timeout);
    try {
      auto result = fn(writer_);
      int rc = sqlite3_exec(writer_.db(), "COMMIT", nullptr, nullptr, nullptr);
      if (rc != SQLITE_OK) throw_sqlite(writer_.db(), rc, "committing");
      return result;
    } catch (...) {
      if (!sqlite3_get_autocommit(writer_.db()))
        sqlite3_exec(writer_.db(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  // Runs fn(reader) for a read; the in-memory database has only the writer connection.
  template <class F>
  auto read(F&& fn) -> decltype(fn(std::declval<Conn&>())) {
    file_check_.check();  // stats() too: /readyz and /metrics say so
    if (memory_) {
      std::lock_guard<core::FairLock> g(shared_->write_lock);
      return fn(writer_);
    }
    std::lock_guard l(reader_mu_);
    return fn(reader_);
  }

  void notify() {
    {
      std::lock_guard l(shared_->mu);
      ++shared_->generation;
    }
    shared_->cv.notify_all();
  }

  // --- append helpers ---

  void append_in_user_tx(const std::vector<Event>& events, sqlite3* db) {
    insert_events_in_user_tx(db, memory_, path_, sql_, options_.path, events);
    // The caller commits later: waiters notice the commit through data_version; this wakes
    // in-process waiters early, which is harmless (spurious wake-ups are allowed).
    notify();
  }

  // A fresh lease owner: distinct for every claim of this object (an odd multiplier is a
  // bijection modulo 2^63), random across objects and processes. Stored as an INTEGER.
  std::int64_t next_owner() {
    std::uint64_t n = ++claim_counter_;
    return static_cast<std::int64_t>((owner_base_ + n * 0x9E3779B97F4A7C15ull) &
                                     0x7FFFFFFFFFFFFFFFull);
  }

  // --- settle and claim, inside a write transaction ---

  AckPlan plan_ack(const ClaimedBatch& batch, std::span<const EventId> ids) {
    AckPlan p;
    p.seqs = core::seqs_of(batch, ids);
    if (p.seqs.empty()) return p;
    auto [lo, hi] = std::minmax_element(p.seqs.begin(), p.seqs.end());
    p.first = *lo;
    p.last = *hi;
    // Acking the whole batch (the usual case): the lease owner is unique per claim, so its rows
    // in [first, last] are exactly the batch; a range scan beats parsing a JSON list.
    p.whole = p.seqs.size() == batch.events.size();
    if (!p.whole) p.list = json_seqs(p.seqs);
    // Retention (archive, dead letters) rides on acks, at most once a second.
    if ((options_.store.archive && options_.store.archive_retention.count() > 0) ||
        options_.store.dead_retention.count() > 0) {
      auto t = SteadyClock::now();
      std::lock_guard l(prune_mu_);
      if (t >= next_prune_) {
        next_prune_ = t + std::chrono::seconds(1);
        p.prune = true;
      }
    }
    return p;
  }

  // The claim (sqlite_claim.h) inside a write transaction, remembering what it has seen so that
  // wait_for_work() notices any commit after it.
  void claim_in_txn(Conn& c, ClaimedBatch& batch, std::size_t max, Duration lease,
                    ClaimOrder order) {
    claim_dv_ = data_version(c);
    last_claim_strict_ = order == ClaimOrder::strict;
    {
      std::lock_guard l(shared_->mu);
      claim_gen_ = shared_->generation;
    }
    last_claim_truncated_ =
        sqlite_store::claim_in_txn(c, sql_, batch, owner_of(batch), db_now_ms(c), max, lease, order,
                                   !last_claim_truncated_.load());
  }

  // --- wake-up helpers ---

  // The database's clock, read once per claim.
  static std::int64_t db_now_ms(Conn& c) {
    Use s(c.prepare(std::string("SELECT ") + kNowMs));
    step_row(c.db(), s, "reading the database clock");
    return sqlite3_column_int64(s, 0);
  }

  static std::uint64_t data_version(Conn& c) {
    Use s(c.prepare("PRAGMA data_version"));
    step_row(c.db(), s, "reading data_version");
    return static_cast<std::uint64_t>(sqlite3_column_int64(s, 0));
  }

  std::uint64_t writer_data_version() {
    std::lock_guard<core::FairLock> g(shared_->write_lock);
    return data_version(writer_);
  }

  // nullopt when a writer of this process holds the lock right now (it will notify).
  std::optional<std::uint64_t> try_writer_data_version() {
    if (!shared_->write_lock.try_lock()) return std::nullopt;
    std::lock_guard<core::FairLock> g(shared_->write_lock, std::adopt_lock);
    try {
      return data_version(writer_);
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // Milliseconds until the next retry falls due or lease expires; nullopt when none. Rows that
  // fell due in the last second count too (as 10 ms): one may have fallen due between the empty
  // claim and this query, and waiting for the one after it would sleep through it. A row that is
  // due and still not claimable (its key's head is leased) costs a claim per 10 ms for a second.
  std::optional<Duration> next_due_in() {
    try {
      return read([&](Conn& c) -> std::optional<Duration> {
        // Under strict claims a key with a dead letter waits however due its events are.
        Use s(c.prepare(last_claim_strict_.load() ? sql_.next_due_strict : sql_.next_due));
        if (!step_row(c.db(), s, "finding the next due event") ||
            sqlite3_column_type(s, 0) == SQLITE_NULL)
          return std::nullopt;
        return Duration(std::max<std::int64_t>(10, sqlite3_column_int64(s, 0)));
      });
    } catch (const TimeoutError&) {
      return Duration(10);  // locked for now: look again soon
    }
  }

  const SqliteOptions options_;
  const StoreOptions::Open open_ = options_.store.open;
  const std::string t_;  // validated table name
  const bool memory_;
  std::string path_;  // canonical
  std::shared_ptr<FileShared> shared_;
  std::uint64_t owner_base_ =
      0;  // random per store object: lease owners of different objects differ
  std::atomic<std::uint64_t> claim_counter_{0};

  FileCheck file_check_;  // the path still names the file opened
  Conn writer_;           // guarded by shared_->write_lock
  std::mutex reader_mu_;
  Conn reader_;  // guarded by reader_mu_; empty for :memory:

  std::atomic<std::uint64_t> claim_dv_{0};   // writer's data_version at the last claim
  std::atomic<std::uint64_t> claim_gen_{0};  // shared generation at the last claim
  // The last claim stopped after its scan window (see claim_in_txn); written under the lock.
  std::atomic<bool> last_claim_truncated_{false};
  // The last claim was ClaimOrder::strict (on_dead=hold): wait_for_work skips held keys.
  std::atomic<bool> last_claim_strict_{false};
  std::uint64_t interrupts_ = 0;  // guarded by shared_->mu

  std::mutex prune_mu_;
  SteadyClock::time_point next_prune_{};  // guarded by prune_mu_

  // After t_: built from it; rebuilt in the constructor for an older outbox opened read-only.
  SqlText sql_;
  InspectSql inspect_{t_};
};

}  // namespace

std::unique_ptr<Store> make_sqlite_store(const SqliteOptions& options) {
  return std::make_unique<SqliteStore>(options);
}

}  // namespace outpost
