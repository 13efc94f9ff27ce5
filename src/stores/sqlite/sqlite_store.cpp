// The SQLite store (see include/outpost/stores/sqlite.h for the user's view).
//
// Layout (schema version 2: kSchemaV1 then kSchemaV2Step below), created in one transaction on
// open:
//   <t>          the state: seq INTEGER PRIMARY KEY AUTOINCREMENT (the rowid: cheap appends;
//                never reused, so a retried dead event keeps its place and archive rows never
//                clash), key, attempts, due_at (ms), lease_owner (integer), lease_until (ms),
//                last_error
//   <t>_body     seq, id (16 bytes; no index: a unique index measured 20% of end-to-end
//                events/s, 2026-11-22, docs/sqlite.md; ids a caller brings are checked by a
//                scan instead, check_ids), type,
//                payload, occurred_at (us), headers (JSON object or NULL)
//   <t>_dead     all columns + last_error, dead_at (ms)
//   <t>_archive  acked events when archiving is on, acked_at (ms) for retention
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
#include <charconv>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "core/append_check.h"
#include "core/id_origin.h"
#include "core/names.h"
#include "core/url.h"
#include "outpost/error.h"
#include "outpost/stores/sqlite.h"

namespace outpost {
namespace {

constexpr int kSchemaVersion = 2;
// A claim that may stop early reads at most this many state rows plus 1.5 x its batch size (the
// previous batch, in flight at the head, plus half a batch of held-back rows).
constexpr std::size_t kScanWindow = 256;
constexpr std::size_t kMaxRowsPerInsert = 100;
constexpr auto kPollInterval = std::chrono::milliseconds(2);
// The database's clock in milliseconds since the Unix epoch. SQLite 3.40 has no 'subsec'
// modifier; julianday() carries milliseconds. Constant within one sqlite3_step().
constexpr const char* kNowMs = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

using SteadyClock = std::chrono::steady_clock;

// Schema version 1; "{t}" is the validated table name. The state row (narrow: rewritten by every
// claim) and the body (written once, read by the claim) are split so that a claim dirties about
// one page per 100 events instead of the pages holding the payloads.
constexpr const char* kSchemaV1 = R"sql(
CREATE TABLE {t}_schema (version INTEGER NOT NULL);
INSERT INTO {t}_schema (version) VALUES (1);
CREATE TABLE {t} (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  key TEXT NOT NULL DEFAULT '',
  attempts INTEGER NOT NULL DEFAULT 0,
  due_at INTEGER NOT NULL DEFAULT 0,
  lease_owner INTEGER,
  lease_until INTEGER NOT NULL DEFAULT 0,
  last_error TEXT);
CREATE INDEX {t}_blocking ON {t} (key, seq) WHERE attempts > 0;
CREATE TABLE {t}_body (
  seq INTEGER PRIMARY KEY,
  id BLOB NOT NULL,
  type TEXT NOT NULL,
  payload BLOB NOT NULL,
  occurred_at INTEGER NOT NULL,
  headers TEXT);
CREATE TABLE {t}_dead (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, last_error TEXT, dead_at INTEGER NOT NULL);
CREATE INDEX {t}_dead_id ON {t}_dead (id);
CREATE TABLE {t}_archive (
  seq INTEGER PRIMARY KEY, id BLOB NOT NULL, type TEXT NOT NULL, key TEXT NOT NULL,
  payload BLOB NOT NULL, occurred_at INTEGER NOT NULL, headers TEXT,
  attempts INTEGER NOT NULL, acked_at INTEGER NOT NULL);
CREATE INDEX {t}_archive_acked ON {t}_archive (acked_at);
)sql";

// Version 1 -> 2, in the same transaction as the check.
constexpr const char* kSchemaV2Step = R"sql(
DROP INDEX IF EXISTS {t}_blocking;
UPDATE {t}_schema SET version = 2;
)sql";

// --- errors --------------------------------------------------------------------------------------

[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  std::string code = std::to_string(rc);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw TimeoutError("sqlite", msg + " (database is locked by another connection)");
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      throw Error(ErrorCode::corrupt, "sqlite", msg, code);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      throw ConnectionError("sqlite", msg, code);
    case SQLITE_CONSTRAINT:
      throw Error(ErrorCode::conflict, "sqlite", msg, code);
    case SQLITE_TOOBIG:
      throw Error(ErrorCode::too_large, "sqlite", msg, code);
    default:
      throw Error(ErrorCode::backend, "sqlite", msg, code);
  }
}

// --- handles -------------------------------------------------------------------------------------

struct DbClose {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StmtFinalize {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using DbPtr = std::unique_ptr<sqlite3, DbClose>;
using StmtPtr = std::unique_ptr<sqlite3_stmt, StmtFinalize>;

// Resets a cached statement when a use of it ends (also on exceptions), so it holds no read
// snapshot or lock between uses.
class Use {
 public:
  explicit Use(sqlite3_stmt* s) : s_(s) {}
  ~Use() { sqlite3_reset(s_); }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;
  sqlite3_stmt* get() const { return s_; }
  operator sqlite3_stmt*() const { return s_; }

 private:
  sqlite3_stmt* s_;
};

// One connection with its cache of prepared statements (keyed by SQL text).
// Not thread-safe: the owner serialises use.
class Conn {
 public:
  Conn() = default;
  Conn(DbPtr db) : db_(std::move(db)) {}
  ~Conn() {
    cache_.clear();  // finalize before closing
    db_.reset();
  }
  Conn(Conn&&) = default;
  Conn& operator=(Conn&&) = default;

  sqlite3* db() const { return db_.get(); }
  explicit operator bool() const { return db_ != nullptr; }

  sqlite3_stmt* prepare(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it != cache_.end()) return it->second.get();
    sqlite3_stmt* s = nullptr;
    int rc = sqlite3_prepare_v3(db_.get(), sql.c_str(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &s, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(db_.get(), rc, "preparing statement");
    cache_.emplace(sql, StmtPtr(s));
    return s;
  }

  void exec(const char* sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_.get(), sql, nullptr, nullptr, &err);
    if (err) sqlite3_free(err);
    if (rc != SQLITE_OK) throw_sqlite(db_.get(), rc, std::string("executing ") + sql);
  }

 private:
  DbPtr db_;
  std::unordered_map<std::string, StmtPtr> cache_;
};

// Steps a statement that returns no rows (or whose rows are ignored); returns changes().
int run(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) throw_sqlite(db, rc, what);
  return sqlite3_changes(db);
}

bool step_row(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  throw_sqlite(db, rc, what);
}

void bind_text(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
}
void bind_blob(sqlite3_stmt* s, int i, const void* data, std::size_t n) {
  // A zero-length blob must not be bound as NULL (the column is NOT NULL).
  if (n == 0)
    sqlite3_bind_zeroblob(s, i, 0);
  else
    sqlite3_bind_blob64(s, i, data, n, SQLITE_STATIC);
}

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* p = sqlite3_column_text(s, i);
  return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(s, i))
           : std::string();
}
std::string column_blob(sqlite3_stmt* s, int i) {
  const void* p = sqlite3_column_blob(s, i);
  return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(s, i)) : std::string();
}

std::string encode_headers(const Headers& headers) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : headers) j[k] = v;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Headers decode_headers(sqlite3_stmt* s, int i) {
  Headers h;
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return h;
  auto j = nlohmann::json::parse(column_text(s, i), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object())
    throw Error(ErrorCode::corrupt, "sqlite", "headers column is not a JSON object");
  for (auto& [k, v] : j.items()) h.emplace(k, v.is_string() ? v.get<std::string>() : v.dump());
  return h;
}

// Columns: seq, id, type, key, payload, occurred_at, headers, attempts (starting at `first`).
constexpr const char* kEventColumns = "seq, id, type, key, payload, occurred_at, headers, attempts";

void read_event(sqlite3_stmt* s, StoredEvent& e, int first = 0) {
  e.seq = sqlite3_column_int64(s, first);
  if (sqlite3_column_bytes(s, first + 1) != 16)
    throw Error(ErrorCode::corrupt, "sqlite", "event id column is not a 16-byte blob");
  e.id = EventId::from_bytes(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, first + 1)));
  e.type = column_text(s, first + 2);
  e.key = column_text(s, first + 3);
  e.payload = column_blob(s, first + 4);
  e.occurred_at = TimePoint(std::chrono::microseconds(sqlite3_column_int64(s, first + 5)));
  e.headers = decode_headers(s, first + 6);
  e.attempts = sqlite3_column_int(s, first + 7);
}

// Hash for a set of keys that is probed with string_views (no allocation per row).
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view k) const noexcept {
    return std::hash<std::string_view>{}(k);
  }
};

// --- in-process coordination ---------------------------------------------------------------------

// FIFO ticket lock: writers get the file in arrival order, so a relay is never starved by a
// busy producer in the same process (LIMITS.md: SQLite's own busy handler is not fair).
class FairLock {
 public:
  void lock() {
    std::unique_lock l(mu_);
    std::uint64_t ticket = next_++;
    cv_.wait(l, [&] { return serving_ == ticket; });
  }
  bool try_lock() {
    std::lock_guard l(mu_);
    if (next_ != serving_) return false;
    ++next_;
    return true;
  }
  void unlock() {
    {
      std::lock_guard l(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t next_ = 0;     // guarded by mu_
  std::uint64_t serving_ = 0;  // guarded by mu_
};

// Shared by every store object of this process on one file.
struct FileShared {
  FairLock write_lock;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t generation = 0;  // guarded by mu: bumped after each in-process commit of work
};

std::shared_ptr<FileShared> shared_for(const std::string& canonical_path) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<FileShared>> registry;
  std::lock_guard l(mu);
  for (auto it = registry.begin(); it != registry.end();)
    it = it->second.expired() ? registry.erase(it) : std::next(it);
  auto& slot = registry[canonical_path];
  auto shared = slot.lock();
  if (!shared) {
    shared = std::make_shared<FileShared>();
    slot = shared;
  }
  return shared;
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(path, ec), ec);
  return ec ? path : p.string();
}

std::string json_seqs(const std::vector<std::int64_t>& seqs) {
  std::string out = "[";
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(seqs[i]);
  }
  out += ']';
  return out;
}

// --- the store -----------------------------------------------------------------------------------

class SqliteStore final : public Store {
 public:
  explicit SqliteStore(const SqliteOptions& options)
      : options_(options), t_(options.table), memory_(options.path == ":memory:") {
    core::require_identifier(t_, "table name");
    if (options_.path.empty()) throw ConfigError("sqlite store: the database path is empty");
    // SQLite takes the path as a C string: a NUL (%00 in a URL) would silently cut it short.
    if (options_.path.find('\0') != std::string::npos)
      throw ConfigError("sqlite store: the database path contains a NUL byte (%00)");
    if (options_.busy_timeout.count() < 0)
      throw ConfigError("sqlite store: busy_timeout must not be negative");
    path_ = memory_ ? options_.path : canonical(options_.path);
    shared_ = memory_ ? std::make_shared<FileShared>() : shared_for(path_);
    std::random_device rd;
    owner_base_ =
        (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
    build_sql();

    if (open_ != StoreOptions::Open::create) {
      if (memory_) no_outbox("sqlite::memory: is new and empty");
      std::error_code ec;
      if (!std::filesystem::exists(options_.path, ec)) no_outbox("the file does not exist");
    }
    writer_ = open_connection(true);
    init_schema();
    if (!memory_) reader_ = open_connection(false);
    claim_dv_ = writer_data_version();
    {
      std::lock_guard l(shared_->mu);
      claim_gen_ = shared_->generation;
    }
  }

  std::string_view backend() const override { return "sqlite"; }

  // --- append ---

  void append(std::span<const Event> events, TxHandle tx) override {
    auto prepared = core::prepare_for_append(events, options_.store, "sqlite");
    if (prepared.empty()) return;
    if (tx.kind() == TxHandle::Kind::sqlite) {
      append_in_user_tx(prepared, static_cast<sqlite3*>(tx.native()));
      return;
    }
    if (!tx.is_none())
      throw ConfigError("the sqlite store takes TxHandle::sqlite(db) or no transaction handle",
                        "sqlite");
    write_txn([&](Conn& c) {
      insert_events(c.db(), &c, prepared);
      return 0;
    });
    notify();
  }

  // --- claim ---

  ClaimedBatch claim(std::size_t max, Duration lease, ClaimOrder order) override {
    ClaimedBatch batch;
    batch.lease.owner = std::to_string(next_owner());
    if (max == 0) return batch;
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
    if (!settlement.releases.empty()) release_seqs = seqs_of(done, settlement.releases);
    if (ack_plan.seqs.empty() && settlement.nacks.empty() && release_seqs.empty() && max == 0)
      return batch;
    write_txn([&](Conn& c) {
      counts = {};
      if (!ack_plan.seqs.empty()) counts.acked = ack_in_txn(c, done, ack_plan);
      if (!settlement.nacks.empty()) counts.nacked = nack_in_txn(c, done, settlement.nacks);
      if (!release_seqs.empty()) counts.released = release_in_txn(c, done, release_seqs);
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
    return write_txn([&](Conn& c) { return ack_in_txn(c, batch, plan); });
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    std::size_t n = write_txn([&](Conn& c) { return nack_in_txn(c, batch, nacks); });
    notify();  // waiters recompute when the next retry falls due
    return n;
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    auto seqs = seqs_of(batch, ids);
    if (seqs.empty()) return 0;
    std::size_t n = write_txn([&](Conn& c) { return release_in_txn(c, batch, seqs); });
    if (n) notify();
    return n;
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    if (batch.events.empty()) return true;
    std::vector<std::int64_t> seqs;
    for (const auto& e : batch.events) seqs.push_back(e.seq);
    std::string list = json_seqs(seqs);
    return write_txn([&](Conn& c) {
      Use u(c.prepare(renew_sql_));
      sqlite3_bind_int64(u, 1, lease.count());
      sqlite3_bind_int64(u, 2, owner_of(batch));
      bind_text(u, 3, list);
      run(c.db(), u, "renewing a lease");
      Use q(c.prepare(renew_lost_sql_));
      sqlite3_bind_int64(q, 1, owner_of(batch));
      bind_text(q, 2, list);
      step_row(c.db(), q, "checking a lease");
      return sqlite3_column_int64(q, 0) == 0;
    });
  }

  // --- inspection ---

  StoreStats stats() override {
    return read([&](Conn& c) {
      StoreStats st;
      {
        Use s(c.prepare(stats_sql_));
        if (step_row(c.db(), s, "reading stats")) {
          std::int64_t total = sqlite3_column_int64(s, 0);
          st.leased = sqlite3_column_int64(s, 1);
          st.pending = total - st.leased;
          if (total > 0 && sqlite3_column_type(s, 2) != SQLITE_NULL) {
            std::int64_t oldest_us = sqlite3_column_int64(s, 2);
            std::int64_t now_us = sqlite3_column_int64(s, 3) * 1000;
            st.oldest_pending_age = Duration(std::max<std::int64_t>(0, now_us - oldest_us) / 1000);
          }
        }
      }
      {
        Use s(c.prepare(count_dead_sql_));
        if (step_row(c.db(), s, "counting dead events")) st.dead = sqlite3_column_int64(s, 0);
      }
      {
        Use s(c.prepare(count_archive_sql_));
        if (step_row(c.db(), s, "counting archived events"))
          st.archived = sqlite3_column_int64(s, 0);
      }
      return st;
    });
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    return read([&](Conn& c) {
      std::vector<StoredEvent> out;
      Use s(c.prepare(list_sql_));
      sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
      while (step_row(c.db(), s, "listing events")) read_event(s, out.emplace_back());
      return out;
    });
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    return read([&](Conn& c) {
      std::vector<DeadEvent> out;
      Use s(c.prepare(list_dead_sql_));
      sqlite3_bind_int64(s, 1, static_cast<sqlite3_int64>(std::min<std::size_t>(limit, 1 << 30)));
      while (step_row(c.db(), s, "listing dead events")) {
        DeadEvent& d = out.emplace_back();
        read_event(s, d);
        d.last_error = column_text(s, 8);
        d.dead_at = TimePoint(std::chrono::microseconds(sqlite3_column_int64(s, 9) * 1000));
      }
      return out;
    });
  }

  std::size_t retry(std::span<const EventId> ids) override {
    std::size_t n = write_txn([&](Conn& c) {
      std::size_t count = 0;
      for (const auto& id : ids) {
        Use s(c.prepare(retry_one_sql_));
        bind_blob(s, 1, id.bytes().data(), 16);
        if (run(c.db(), s, "retrying a dead event") == 0) continue;
        Use sb(c.prepare(retry_one_body_sql_));
        bind_blob(sb, 1, id.bytes().data(), 16);
        run(c.db(), sb, "retrying a dead event");
        Use d(c.prepare(delete_dead_one_sql_));
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
      Use s(c.prepare(retry_all_sql_));
      run(c.db(), s, "retrying dead events");
      Use sb(c.prepare(retry_all_body_sql_));
      run(c.db(), sb, "retrying dead events");
      Use d(c.prepare(delete_revived_sql_));
      return static_cast<std::size_t>(run(c.db(), d, "retrying dead events"));
    });
    if (n) notify();
    return n;
  }

  std::size_t discard(std::span<const EventId> ids) override {
    return write_txn([&](Conn& c) {
      std::size_t count = 0;
      for (const auto& id : ids) {
        Use d(c.prepare(delete_dead_one_sql_));
        bind_blob(d, 1, id.bytes().data(), 16);
        count += static_cast<std::size_t>(run(c.db(), d, "discarding a dead event"));
      }
      return count;
    });
  }

  std::size_t discard_all() override {
    return write_txn([&](Conn& c) {
      Use d(c.prepare(discard_all_sql_));
      return static_cast<std::size_t>(run(c.db(), d, "discarding dead events"));
    });
  }

  // --- wake-ups ---

  void wait_for_work(Duration max) override {
    // The last claim stopped early: there may be claimable rows past its window, and the next
    // claim reads the whole table. A spurious wake-up is allowed.
    if (last_claim_truncated_.load()) return;
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
  // --- SQL text (table names validated in the constructor) ---

  void build_sql() {
    const std::string& t = t_;
    const std::string body = t + "_body";
    const std::string now = kNowMs;
    // The claim reads the state rows from the head (claim_in_txn decides in C++), then leases
    // the picked rows: by range when every claimable row in it was picked, else one by one.
    // The claimable test here must stay the one in claim_in_txn.
    scan_sql_ =
        "SELECT seq, key, attempts, due_at, lease_owner, lease_until FROM " + t + " ORDER BY seq";
    const std::string lease_set =
        "UPDATE " + t + " SET attempts = attempts + 1, lease_owner = ?1, lease_until = ?2 WHERE ";
    claim_range_sql_ = lease_set +
                       "seq BETWEEN ?3 AND ?4 AND due_at <= ?5 AND "
                       "(lease_owner IS NULL OR lease_until <= ?5)";
    claim_one_sql_ = lease_set + "seq = ?3";
    insert_state_full_sql_ = insert_state_sql(kMaxRowsPerInsert);
    insert_body_full_sql_ = insert_body_sql(kMaxRowsPerInsert);
    std::string in_list = "seq IN (SELECT value FROM json_each(?2))";
    // Full event columns: state row s joined with its body b.
    std::string full =
        "s.seq, b.id, b.type, s.key, b.payload, b.occurred_at, b.headers, s.attempts";
    std::string joined = t + " AS s JOIN " + body + " AS b ON b.seq = s.seq";
    bodies_sql_ = "SELECT seq, id, type, '', payload, occurred_at, headers, 0 FROM " + body +
                  " WHERE seq IN (SELECT value FROM json_each(?1)) ORDER BY seq";
    bodies_range_sql_ = "SELECT seq, id, type, '', payload, occurred_at, headers, 0 FROM " + body +
                        " WHERE seq BETWEEN ?1 AND ?2 ORDER BY seq";
    ack_sql_ = "DELETE FROM " + t + " WHERE lease_owner = ?1 AND " + in_list;
    ack_range_sql_ = "DELETE FROM " + t + " WHERE lease_owner = ?1 AND seq BETWEEN ?2 AND ?3";
    delete_bodies_range_sql_ = "DELETE FROM " + body + " WHERE seq BETWEEN ?1 AND ?2";
    delete_orphan_bodies_sql_ = "DELETE FROM " + body +
                                " WHERE seq BETWEEN ?1 AND ?2 AND NOT EXISTS "
                                "(SELECT 1 FROM " +
                                t + " AS s WHERE s.seq = " + body + ".seq)";
    ack_archive_sql_ = "INSERT OR REPLACE INTO " + t + "_archive (" + kEventColumns +
                       ", acked_at) SELECT " + full + ", " + now + " FROM " + joined +
                       " WHERE s.lease_owner = ?1 AND s." + in_list;
    ack_archive_range_sql_ = "INSERT OR REPLACE INTO " + t + "_archive (" + kEventColumns +
                             ", acked_at) SELECT " + full + ", " + now + " FROM " + joined +
                             " WHERE s.lease_owner = ?1 AND s.seq BETWEEN ?2 AND ?3";
    prune_sql_ = "DELETE FROM " + t + "_archive WHERE acked_at < " + now + " - ?1";
    nack_retry_sql_ = "UPDATE " + t + " SET lease_owner = NULL, lease_until = 0, due_at = " + now +
                      " + ?1, last_error = ?2 WHERE seq = ?3 AND lease_owner = ?4";
    nack_dead_sql_ = "INSERT OR REPLACE INTO " + t + "_dead (" + kEventColumns +
                     ", last_error, dead_at) SELECT " + full + ", ?1, " + now + " FROM " + joined +
                     " WHERE s.seq = ?2 AND s.lease_owner = ?3";
    delete_seq_sql_ = "DELETE FROM " + t + " WHERE seq = ?1";
    delete_body_seq_sql_ = "DELETE FROM " + body + " WHERE seq = ?1";
    release_sql_ = "UPDATE " + t +
                   " SET lease_owner = NULL, lease_until = 0, due_at = 0, "
                   "attempts = max(attempts - 1, 0) WHERE lease_owner = ?1 AND " +
                   in_list;
    renew_sql_ = "UPDATE " + t + " SET lease_until = " + now +
                 " + ?1 WHERE lease_owner = ?2 AND seq IN (SELECT value FROM json_each(?3))";
    renew_lost_sql_ = "SELECT count(*) FROM " + t +
                      " WHERE lease_owner IS NOT NULL AND lease_owner <> ?1 AND " + in_list;
    stats_sql_ = "SELECT count(*), coalesce(sum(lease_owner IS NOT NULL AND lease_until > " + now +
                 "), 0), (SELECT min(occurred_at) FROM " + body + "), " + now + " FROM " + t;
    count_dead_sql_ = "SELECT count(*) FROM " + t + "_dead";
    count_archive_sql_ = "SELECT count(*) FROM " + t + "_archive";
    list_sql_ = "SELECT " + full + " FROM " + joined + " ORDER BY s.seq LIMIT ?1";
    list_dead_sql_ = "SELECT " + std::string(kEventColumns) + ", last_error, dead_at FROM " + t +
                     "_dead ORDER BY seq LIMIT ?1";
    std::string revive = "INSERT OR IGNORE INTO " + t +
                         " (seq, key, attempts, due_at, lease_owner, lease_until, last_error) "
                         "SELECT seq, key, 0, 0, NULL, 0, last_error FROM " +
                         t + "_dead";
    std::string revive_body = "INSERT OR IGNORE INTO " + body +
                              " (seq, id, type, payload, occurred_at, headers) SELECT seq, id, "
                              "type, payload, occurred_at, headers FROM " +
                              t + "_dead";
    retry_one_sql_ = revive + " WHERE id = ?1";
    retry_one_body_sql_ = revive_body + " WHERE id = ?1";
    retry_all_sql_ = revive + " ORDER BY seq";
    retry_all_body_sql_ = revive_body + " ORDER BY seq";
    delete_dead_one_sql_ = "DELETE FROM " + t + "_dead WHERE id = ?1";
    delete_revived_sql_ = "DELETE FROM " + t + "_dead WHERE seq IN (SELECT seq FROM " + t + ")";
    discard_all_sql_ = "DELETE FROM " + t + "_dead";
    find_bodies_sql_ =
        "SELECT id FROM " + body + " WHERE hex(id) IN (SELECT value FROM json_each(?1)) LIMIT 1";
    find_dead_sql_ = "SELECT 1 FROM " + t + "_dead WHERE id = ?1";
    next_due_sql_ = "SELECT min(w) - " + now +
                    " FROM (SELECT CASE WHEN lease_owner IS NOT NULL THEN lease_until ELSE due_at "
                    "END AS w FROM " +
                    t + " WHERE attempts > 0) WHERE w > " + now;
  }

  // State rows first (they take the sequence: consecutive within one statement under the write
  // lock), then the bodies with the same seqs. due_at = 0: a new event is due at once.
  std::string insert_state_sql(std::size_t rows) const {
    std::string sql = "INSERT INTO " + t_ + " (key, due_at) VALUES ";
    for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,0)" : "(?,0)";
    return sql;
  }
  std::string insert_body_sql(std::size_t rows) const {
    std::string sql =
        "INSERT INTO " + t_ + "_body (seq, id, type, payload, occurred_at, headers) VALUES ";
    for (std::size_t i = 0; i < rows; ++i) sql += i ? ",(?,?,?,?,?,?)" : "(?,?,?,?,?,?)";
    return sql;
  }

  // --- connections and schema ---

  [[noreturn]] void no_outbox(const std::string& why) const {
    throw Error(ErrorCode::not_found, "sqlite",
                "there is no outbox '" + t_ + "' at '" + options_.path + "': " + why +
                    " (nothing was created)");
  }

  // Read-only: a file URI with mode=ro. SQLite reads a WAL database read-only only where it can
  // use or create the -shm file; where it cannot (a read-only directory), immutable=1 reads the
  // file as it is (no locks: for inspection of a file nobody writes).
  DbPtr open_read_only(bool immutable) {
    std::string uri = "file:";
    for (unsigned char ch : options_.path) {
      if (ch == '%' || ch == '?' || ch == '#' || ch < 0x20) {
        static constexpr char kHex[] = "0123456789ABCDEF";
        uri += '%';
        uri += kHex[ch >> 4];
        uri += kHex[ch & 15];
      } else {
        uri += static_cast<char>(ch);
      }
    }
    uri += immutable ? "?mode=ro&immutable=1" : "?mode=ro";
    sqlite3* raw = nullptr;
    int rc = sqlite3_open_v2(uri.c_str(), &raw,
                             SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, nullptr);
    DbPtr db(raw);
    if (rc == SQLITE_OK)
      rc = sqlite3_exec(raw, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return db;
    if (!immutable) return open_read_only(true);
    std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
    throw ConnectionError("sqlite", "cannot read database file '" + options_.path + "': " + msg,
                          std::to_string(rc));
  }

  Conn open_connection(bool writer) {
    if (open_ == StoreOptions::Open::read_only) {
      Conn c(open_read_only(false));
      sqlite3_extended_result_codes(c.db(), 1);
      sqlite3_busy_timeout(c.db(), static_cast<int>(std::min<std::int64_t>(
                                       options_.busy_timeout.count(), INT32_MAX)));
      return c;
    }
    sqlite3* raw = nullptr;
    const bool create = writer && open_ == StoreOptions::Open::create;
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | (create ? SQLITE_OPEN_CREATE : 0);
    int rc = sqlite3_open_v2(options_.path.c_str(), &raw, flags, nullptr);
    DbPtr db(raw);
    if (rc != SQLITE_OK) {
      std::string msg = raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc);
      throw ConnectionError("sqlite", "cannot open database file '" + options_.path + "': " + msg,
                            std::to_string(rc));
    }
    sqlite3_extended_result_codes(raw, 1);
    Conn c(std::move(db));
    // Writes retry BEGIN IMMEDIATE themselves (begin_immediate); a short handler timeout keeps
    // that loop responsive. Reads wait the whole busy timeout.
    sqlite3_busy_timeout(raw, writer ? 20
                                     : static_cast<int>(std::min<std::int64_t>(
                                           options_.busy_timeout.count(), INT32_MAX)));
    if (!memory_) {
      with_busy_retry([&] { set_wal(c); });
      c.exec(options_.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    }
    return c;
  }

  void set_wal(Conn& c) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(c.db(), "PRAGMA journal_mode=WAL", -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc != SQLITE_OK) throw_file(c, rc, "is not usable");
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW) throw_file(c, rc, "could not be switched to WAL");
    std::string mode = column_text(raw, 0);
    if (mode != "wal")
      throw ConnectionError("sqlite", "database file '" + options_.path +
                                          "' could not be switched to WAL (journal mode " + mode +
                                          ")");
  }

  [[noreturn]] void throw_file(Conn& c, int rc, const std::string& what) {
    if ((rc & 0xff) == SQLITE_NOTADB || (rc & 0xff) == SQLITE_CORRUPT)
      throw Error(ErrorCode::corrupt, "sqlite",
                  "'" + options_.path + "' is not an outpost database: " + sqlite3_errmsg(c.db()),
                  std::to_string(rc));
    throw_sqlite(c.db(), rc, "database file '" + options_.path + "' " + what);
  }

  // Runs fn, retrying SQLITE_BUSY (another process holds a lock) until busy_timeout.
  template <class F>
  void with_busy_retry(F&& fn) {
    auto deadline = SteadyClock::now() + options_.busy_timeout;
    for (int attempt = 0;; ++attempt) {
      try {
        fn();
        return;
      } catch (const TimeoutError&) {
        if (SteadyClock::now() >= deadline) throw;
        backoff(attempt);
      }
    }
  }

  static void backoff(int attempt) {
    thread_local std::minstd_rand rng(std::random_device{}());
    int cap = std::min(1 << std::min(attempt, 4), 10);  // 1, 2, 4, 8, 10 ms
    std::this_thread::sleep_for(std::chrono::microseconds(100 + rng() % (cap * 1000)));
  }

  void init_schema() {
    if (open_ == StoreOptions::Open::read_only) {  // check only, no transaction to write in
      migrate();
      return;
    }
    std::lock_guard<FairLock> g(shared_->write_lock);
    try {
      begin_immediate(writer_);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::corrupt)
        throw Error(ErrorCode::corrupt, "sqlite",
                    "'" + options_.path + "' is not an outpost database: " + e.what());
      throw;
    }
    try {
      migrate();
      writer_.exec("COMMIT");
    } catch (...) {
      sqlite3_exec(writer_.db(), "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  }

  bool table_exists(const std::string& name) {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(writer_.db(),
                                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                                -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc != SQLITE_OK) throw_file(writer_, rc, "could not be read");
    bind_text(raw, 1, name);
    rc = sqlite3_step(raw);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) throw_file(writer_, rc, "could not be read");
    return rc == SQLITE_ROW;
  }

  std::vector<std::string> columns_of(const std::string& table) {
    std::vector<std::string> cols;
    sqlite3_stmt* raw = nullptr;
    std::string sql = "SELECT name FROM pragma_table_info(?1)";
    int rc = sqlite3_prepare_v2(writer_.db(), sql.c_str(), -1, &raw, nullptr);
    StmtPtr s(raw);
    if (rc != SQLITE_OK) throw_file(writer_, rc, "could not be read");
    bind_text(raw, 1, table);
    while ((rc = sqlite3_step(raw)) == SQLITE_ROW) cols.push_back(column_text(raw, 0));
    if (rc != SQLITE_DONE) throw_file(writer_, rc, "could not be read");
    return cols;
  }

  std::string with_table(std::string text) const {
    for (std::size_t p; (p = text.find("{t}")) != std::string::npos;) text.replace(p, 3, t_);
    return text;
  }

  [[noreturn]] void corrupt(const std::string& what) {
    throw Error(
        ErrorCode::corrupt, "sqlite",
        "'" + options_.path + "' is not an outpost database for table '" + t_ + "': " + what);
  }

  void require_columns(const std::string& table, std::initializer_list<const char*> required) {
    auto cols = columns_of(table);
    for (const char* r : required)
      if (std::find(cols.begin(), cols.end(), r) == cols.end())
        corrupt("table '" + table + "' has no column '" + r + "'");
  }

  void migrate() {
    const std::string& t = t_;
    const std::string schema = t + "_schema";
    int version = 0;
    if (table_exists(schema)) {
      require_columns(schema, {"version"});
      Use s(writer_.prepare("SELECT max(version) FROM " + schema));
      if (step_row(writer_.db(), s, "reading the schema version"))
        version = sqlite3_column_int(s, 0);
      if (version > kSchemaVersion)
        corrupt("schema version " + std::to_string(version) + " is newer than this outpost (" +
                std::to_string(kSchemaVersion) + "); upgrade outpost");
      if (version < 1) corrupt("table '" + schema + "' holds no schema version");
    } else if (table_exists(t)) {
      corrupt("table '" + t + "' exists but was not created by outpost (no '" + schema +
              "' table)");
    } else if (open_ != StoreOptions::Open::create) {
      no_outbox("the file has no table '" + schema + "'");
    }
    const bool read_only = open_ == StoreOptions::Open::read_only;
    if (version == 0) {
      // Version 1. Future versions add `if (version < N)` steps below, each in this transaction.
      writer_.exec(with_table(kSchemaV1).c_str());
      version = 1;
    }
    if (version < 2 && !read_only) {  // version 1 only had one more index: readable as is
      // Version 2: the claim finds blocked keys while reading from the head, so the partial
      // index on attempted rows (a B-tree insert per claimed row and a delete per ack) goes.
      writer_.exec(with_table(kSchemaV2Step).c_str());
      version = 2;
    }
    require_columns(
        t, {"seq", "key", "attempts", "due_at", "lease_owner", "lease_until", "last_error"});
    require_columns(t + "_body", {"seq", "id", "type", "payload", "occurred_at", "headers"});
    require_columns(t + "_dead", {"seq", "id", "last_error", "dead_at"});
    require_columns(t + "_archive", {"seq", "id", "acked_at"});
  }

  // --- transactions ---

  void begin_immediate(Conn& c) {
    auto deadline = SteadyClock::now() + options_.busy_timeout;
    for (int attempt = 0;; ++attempt) {
      int rc = sqlite3_exec(c.db(), "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
      if (rc == SQLITE_OK) return;
      int primary = rc & 0xff;
      if (primary != SQLITE_BUSY && primary != SQLITE_LOCKED)
        throw_file(c, rc, "could not be written");
      if (SteadyClock::now() >= deadline)
        throw TimeoutError("sqlite", "database file '" + options_.path +
                                         "' stayed locked by "
                                         "another process for " +
                                         std::to_string(options_.busy_timeout.count()) + " ms");
      backoff(attempt);
    }
  }

  // Runs fn(writer) in one BEGIN IMMEDIATE transaction under the file's fair lock.
  template <class F>
  auto write_txn(F&& fn) -> decltype(fn(std::declval<Conn&>())) {
    std::lock_guard<FairLock> g(shared_->write_lock);
    begin_immediate(writer_);
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
    if (memory_) {
      std::lock_guard<FairLock> g(shared_->write_lock);
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

  // Inserts on the store's writer (`cache` = its statement cache) or, with cache == nullptr, on
  // the user's connection `db` (prepared per call: we cannot know when the user closes it).
  void insert_events(sqlite3* db, Conn* cache, const std::vector<Event>& events) {
    std::vector<std::string> headers(events.size());
    for (std::size_t i = 0; i < events.size(); ++i)
      if (!events[i].headers.empty()) headers[i] = encode_headers(events[i].headers);
    std::vector<StmtPtr> owned;
    auto prepare = [&](const std::string& sql) -> sqlite3_stmt* {
      if (cache) return cache->prepare(sql);
      sqlite3_stmt* s = nullptr;
      int rc = sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &s, nullptr);
      owned.emplace_back(s);
      if (rc != SQLITE_OK) {
        if (std::string(sqlite3_errmsg(db)).find("no such table") != std::string::npos)
          throw ConfigError("the connection in TxHandle::sqlite has no table '" + t_ +
                                "': is it open on the store's file '" + options_.path + "'?",
                            "sqlite");
        throw_sqlite(db, rc, "preparing the insert");
      }
      return s;
    };
    auto step = [&](sqlite3_stmt* s) {
      int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) return;
      if ((rc & 0xff) == SQLITE_BUSY)
        throw TimeoutError("sqlite",
                           "the outbox insert could not get the write lock: begin the "
                           "transaction with BEGIN IMMEDIATE (" +
                               std::string(sqlite3_errmsg(db)) + ")");
      throw_sqlite(db, rc, "inserting events");
    };
    check_ids(db, events, prepare);
    for (std::size_t off = 0; off < events.size(); off += kMaxRowsPerInsert) {
      std::size_t rows = std::min(kMaxRowsPerInsert, events.size() - off);
      // Full chunks (the usual case) use SQL text built once: no string building per append.
      const bool full = rows == kMaxRowsPerInsert;
      std::string short_state_sql, short_body_sql;
      const std::string& state_sql =
          full ? insert_state_full_sql_ : (short_state_sql = insert_state_sql(rows));
      const std::string& body_sql =
          full ? insert_body_full_sql_ : (short_body_sql = insert_body_sql(rows));
      {
        Use st(prepare(state_sql));
        for (std::size_t i = 0; i < rows; ++i)
          bind_text(st, static_cast<int>(i + 1), events[off + i].key);
        step(st);
      }
      // One INSERT under the write lock numbers its rows consecutively (AUTOINCREMENT takes
      // max + 1 per row), so the last rowid gives every row's seq.
      std::int64_t first_seq = sqlite3_last_insert_rowid(db) - static_cast<std::int64_t>(rows) + 1;
      Use sb(prepare(body_sql));
      int p = 1;
      for (std::size_t i = off; i < off + rows; ++i) {
        const Event& e = events[i];
        sqlite3_bind_int64(sb, p++, first_seq + static_cast<std::int64_t>(i - off));
        bind_blob(sb, p++, e.id.bytes().data(), 16);
        bind_text(sb, p++, e.type);
        bind_blob(sb, p++, e.payload.data(), e.payload.size());
        sqlite3_bind_int64(sb, p++, e.occurred_at.time_since_epoch().count());
        if (headers[i].empty())
          sqlite3_bind_null(sb, p++);
        else
          bind_text(sb, p++, headers[i]);
      }
      step(sb);
    }
  }

  // The duplicate-id rule of every store (the id of an undelivered event, pending, leased or
  // dead, or one id twice in a call, is a conflict that writes nothing), checked for the ids
  // the caller brought. Ids this process generated are unique by construction and skip the
  // check: <t>_body has no id index (it cost 20% of throughput, docs/sqlite.md), so a brought
  // id costs one scan of the undelivered bodies per call, plus a probe of the dead letters'
  // id index. Runs inside the append's transaction (or savepoint), before any insert.
  template <class Prepare>
  void check_ids(sqlite3* db, const std::vector<Event>& events, Prepare&& prepare) {
    std::string brought;  // JSON list of upper-case hex ids, as hex() prints them
    bool increasing = true;
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (i > 0 && !(events[i - 1].id < events[i].id)) increasing = false;
      if (core::generated_in_this_process(events[i].id)) continue;
      static constexpr char kHex[] = "0123456789ABCDEF";
      brought += brought.empty() ? "[\"" : ",\"";
      for (std::uint8_t b : events[i].id.bytes()) {
        brought += kHex[b >> 4];
        brought += kHex[b & 15];
      }
      brought += '"';
    }
    auto conflict = [&](const EventId& id, const char* what) {
      throw Error(ErrorCode::conflict, "sqlite",
                  "duplicate event id " + id.str() + ": " + what + "; nothing was written");
    };
    if (!increasing) {  // one id twice in the call (ids of one generator come in order)
      std::unordered_set<EventId, EventIdHash> seen;
      for (const auto& e : events)
        if (!seen.insert(e.id).second) conflict(e.id, "it comes twice in one call");
    }
    if (brought.empty()) return;
    brought += ']';
    {
      Use s(prepare(find_bodies_sql_));
      bind_text(s, 1, brought);
      if (step_row(db, s, "checking event ids") && sqlite3_column_bytes(s, 0) == 16)
        conflict(EventId::from_bytes(static_cast<const std::uint8_t*>(sqlite3_column_blob(s, 0))),
                 "an undelivered event has it");
    }
    Use d(prepare(find_dead_sql_));
    for (const auto& e : events) {
      if (core::generated_in_this_process(e.id)) continue;
      bind_blob(d, 1, e.id.bytes().data(), 16);
      if (step_row(db, d, "checking event ids"))
        conflict(e.id, "a dead event has it (retry or discard it first)");
      sqlite3_reset(d);
    }
  }

  void append_in_user_tx(const std::vector<Event>& events, sqlite3* db) {
    if (!db) throw ConfigError("TxHandle::sqlite(nullptr): no connection given", "sqlite");
    if (sqlite3_get_autocommit(db) != 0)
      throw ConfigError(
          "TxHandle::sqlite: the connection is not inside BEGIN (start a transaction with BEGIN "
          "IMMEDIATE before appending)",
          "sqlite");
    if (memory_)
      throw ConfigError("sqlite::memory: is private to the store: it takes no TxHandle", "sqlite");
    const char* file = sqlite3_db_filename(db, "main");
    if (!file || !*file || canonical(file) != path_)
      throw ConfigError("TxHandle::sqlite: the connection is on '" +
                            std::string(file && *file ? file : ":memory:") +
                            "', not on the store's file '" + path_ + "'",
                        "sqlite");
    // A savepoint makes the append all or nothing inside the caller's transaction too: a chunk
    // that fails (disk full, a statement too big) must not leave the chunks before it for the
    // caller to commit.
    if (sqlite3_exec(db, "SAVEPOINT outpost_append", nullptr, nullptr, nullptr) != SQLITE_OK)
      throw_sqlite(db, sqlite3_extended_errcode(db), "starting the append");
    try {
      insert_events(db, nullptr, events);
    } catch (...) {
      sqlite3_exec(db, "ROLLBACK TO outpost_append", nullptr, nullptr, nullptr);
      sqlite3_exec(db, "RELEASE outpost_append", nullptr, nullptr, nullptr);
      throw;
    }
    if (sqlite3_exec(db, "RELEASE outpost_append", nullptr, nullptr, nullptr) != SQLITE_OK)
      throw_sqlite(db, sqlite3_extended_errcode(db), "finishing the append");
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

  // The owner of a batch's lease; -1 (never an owner) when the token is not ours.
  static std::int64_t owner_of(const ClaimedBatch& batch) {
    const std::string& o = batch.lease.owner;
    std::int64_t v = -1;
    auto [p, ec] = std::from_chars(o.data(), o.data() + o.size(), v);
    if (ec != std::errc{} || p != o.data() + o.size() || v < 0) return -1;
    return v;
  }

  std::vector<std::int64_t> seqs_of(const ClaimedBatch& batch, std::span<const EventId> ids) {
    std::vector<std::int64_t> seqs;
    if (ids.size() == batch.events.size()) {
      bool same = true;
      for (std::size_t i = 0; i < ids.size() && same; ++i) same = ids[i] == batch.events[i].id;
      if (same) {
        for (const auto& e : batch.events) seqs.push_back(e.seq);
        return seqs;
      }
    }
    std::unordered_map<EventId, std::int64_t, EventIdHash> seq_of;
    for (const auto& e : batch.events) seq_of.emplace(e.id, e.seq);
    for (const auto& id : ids)
      if (auto it = seq_of.find(id); it != seq_of.end()) seqs.push_back(it->second);
    return seqs;
  }

  // --- settle and claim, inside a write transaction ---

  struct AckPlan {
    std::vector<std::int64_t> seqs;
    std::int64_t first = 0, last = 0;
    bool whole = false;  // the whole batch: its rows are the lease owner's rows in [first, last]
    std::string list;    // JSON seqs when not whole
    bool prune = false;  // prune the archive in this transaction
  };

  AckPlan plan_ack(const ClaimedBatch& batch, std::span<const EventId> ids) {
    AckPlan p;
    p.seqs = seqs_of(batch, ids);
    if (p.seqs.empty()) return p;
    auto [lo, hi] = std::minmax_element(p.seqs.begin(), p.seqs.end());
    p.first = *lo;
    p.last = *hi;
    // Acking the whole batch (the usual case): the lease owner is unique per claim, so its rows
    // in [first, last] are exactly the batch; a range scan beats parsing a JSON list.
    p.whole = p.seqs.size() == batch.events.size();
    if (!p.whole) p.list = json_seqs(p.seqs);
    if (options_.store.archive && options_.store.archive_retention.count() > 0) {
      auto t = SteadyClock::now();
      std::lock_guard l(prune_mu_);
      if (t >= next_prune_) {
        next_prune_ = t + std::chrono::seconds(1);
        p.prune = true;
      }
    }
    return p;
  }

  std::size_t ack_in_txn(Conn& c, const ClaimedBatch& batch, const AckPlan& p) {
    auto bind_set = [&](sqlite3_stmt* st) {
      sqlite3_bind_int64(st, 1, owner_of(batch));
      if (p.whole) {
        sqlite3_bind_int64(st, 2, p.first);
        sqlite3_bind_int64(st, 3, p.last);
      } else {
        bind_text(st, 2, p.list);
      }
    };
    if (options_.store.archive) {
      Use a(c.prepare(p.whole ? ack_archive_range_sql_ : ack_archive_sql_));
      bind_set(a);
      run(c.db(), a, "archiving acked events");
    }
    std::size_t n;
    {
      Use d(c.prepare(p.whole ? ack_range_sql_ : ack_sql_));
      bind_set(d);
      n = static_cast<std::size_t>(run(c.db(), d, "acking events"));
    }
    if (n > 0) {
      // A whole, gap-free batch that was still leased: every seq in [first, last] was one of its
      // rows, so all bodies in the range go. Otherwise: the bodies in the range whose state row
      // is gone, exactly the ones acked just now (state and body rows are only ever written
      // together, in one transaction).
      const bool all_in_range =
          p.whole && n == p.seqs.size() && p.last - p.first + 1 == static_cast<std::int64_t>(n);
      Use db(c.prepare(all_in_range ? delete_bodies_range_sql_ : delete_orphan_bodies_sql_));
      sqlite3_bind_int64(db, 1, p.first);
      sqlite3_bind_int64(db, 2, p.last);
      run(c.db(), db, "acking events");
    }
    if (p.prune) {
      Use pr(c.prepare(prune_sql_));
      sqlite3_bind_int64(pr, 1, options_.store.archive_retention.count());
      run(c.db(), pr, "pruning the archive");
    }
    return n;
  }

  std::size_t nack_in_txn(Conn& c, const ClaimedBatch& batch, std::span<const Nack> nacks) {
    std::unordered_map<EventId, std::int64_t, EventIdHash> seq_of;
    for (const auto& e : batch.events) seq_of.emplace(e.id, e.seq);
    std::size_t count = 0;
    for (const auto& nk : nacks) {
      auto it = seq_of.find(nk.id);
      if (it == seq_of.end()) continue;
      if (nk.retry_in) {
        Use s(c.prepare(nack_retry_sql_));
        sqlite3_bind_int64(s, 1, std::max<std::int64_t>(0, nk.retry_in->count()));
        bind_text(s, 2, nk.error);
        sqlite3_bind_int64(s, 3, it->second);
        sqlite3_bind_int64(s, 4, owner_of(batch));
        count += static_cast<std::size_t>(run(c.db(), s, "rescheduling an event"));
      } else {
        Use s(c.prepare(nack_dead_sql_));
        bind_text(s, 1, nk.error);
        sqlite3_bind_int64(s, 2, it->second);
        sqlite3_bind_int64(s, 3, owner_of(batch));
        if (run(c.db(), s, "dead-lettering an event") == 0) continue;
        Use d(c.prepare(delete_seq_sql_));
        sqlite3_bind_int64(d, 1, it->second);
        run(c.db(), d, "dead-lettering an event");
        Use db(c.prepare(delete_body_seq_sql_));
        sqlite3_bind_int64(db, 1, it->second);
        run(c.db(), db, "dead-lettering an event");
        ++count;
      }
    }
    return count;
  }

  std::size_t release_in_txn(Conn& c, const ClaimedBatch& batch,
                             const std::vector<std::int64_t>& seqs) {
    std::string list = json_seqs(seqs);
    Use s(c.prepare(release_sql_));
    sqlite3_bind_int64(s, 1, owner_of(batch));
    bind_text(s, 2, list);
    return static_cast<std::size_t>(run(c.db(), s, "releasing events"));
  }

  // Claims up to `max` events into `batch` (whose lease owner is set). One pass over the narrow
  // state rows in seq order, deciding in C++: a row is claimable when due and not under a live
  // lease; in ordered mode a claimable row is held back when an earlier row of its key is
  // attempted and not claimable (in flight or waiting for a retry), which the pass has seen
  // before it, since it reads from the head. No index is needed for that (an index on attempted
  // rows cost a B-tree insert per claimed row and a delete per ack: about half the claim+ack
  // time). Then one UPDATE over the picked seq range (or one per row when a held-back row lies
  // in between), then the bodies.
  //
  // When every key is in flight (e.g. a relay claims the next batch while the previous one,
  // holding all keys, is being delivered), nothing is claimable and an exact answer means
  // reading the whole backlog. So a claim may stop after kScanWindow rows plus 1.5 x max and
  // return what it found, but never two claims of this object in a row: the one after a
  // truncated claim reads as far as needed, and wait_for_work() returns at once after a
  // truncated claim, so a relay never waits while a later row is claimable.
  void claim_in_txn(Conn& c, ClaimedBatch& batch, std::size_t max, Duration lease,
                    ClaimOrder order) {
    const std::int64_t owner = owner_of(batch);
    // Remember what this claim has seen, so wait_for_work() notices any commit after it.
    claim_dv_ = data_version(c);
    {
      std::lock_guard l(shared_->mu);
      claim_gen_ = shared_->generation;
    }
    const std::int64_t now = db_now_ms(c);
    const bool ordered = order == ClaimOrder::ordered;
    const bool may_stop_early = !last_claim_truncated_.load();
    const std::size_t capped = std::min<std::size_t>(max, 1 << 24);
    const std::size_t window = kScanWindow + capped + capped / 2;

    struct Picked {
      std::int64_t seq;
      int attempts;
      std::string key;
    };
    std::vector<Picked> picked;
    picked.reserve(std::min<std::size_t>(max, 4096));
    std::unordered_set<std::string, KeyHash, std::equal_to<>> blocked;
    // A claimable row held back behind its key lies between two picked rows: the range UPDATE
    // would lease it too, so the picked rows are leased one by one.
    bool skip_after_pick = false;  // a row was held back after the first pick
    bool skip_inside = false;      // ... and another row was picked after it
    bool truncated = false;
    std::size_t scanned = 0;
    {
      Use s(c.prepare(scan_sql_));
      while (step_row(c.db(), s, "claiming events")) {
        ++scanned;
        const bool leased =
            sqlite3_column_type(s, 4) != SQLITE_NULL && sqlite3_column_int64(s, 5) > now;
        const bool claimable = !leased && sqlite3_column_int64(s, 3) <= now;
        const auto* key_text = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
        std::string_view key =
            key_text
                ? std::string_view(key_text, static_cast<std::size_t>(sqlite3_column_bytes(s, 1)))
                : std::string_view();
        if (!claimable) {
          if (ordered && !key.empty() && sqlite3_column_int(s, 2) > 0 && !blocked.contains(key))
            blocked.emplace(key);
        } else if (ordered && !key.empty() && !blocked.empty() && blocked.contains(key)) {
          skip_after_pick = !picked.empty();
        } else {
          skip_inside = skip_inside || skip_after_pick;
          picked.push_back(
              {sqlite3_column_int64(s, 0), sqlite3_column_int(s, 2), std::string(key)});
          if (picked.size() >= max) break;
        }
        if (may_stop_early && scanned >= window) {
          truncated = true;
          break;
        }
      }
    }
    last_claim_truncated_ = truncated;
    if (picked.empty()) return;

    const std::int64_t first = picked.front().seq, last = picked.back().seq;
    if (skip_inside) {
      // A held-back row lies inside the range: update the picked rows one by one.
      Use u(c.prepare(claim_one_sql_));
      for (const auto& p : picked) {
        sqlite3_bind_int64(u, 1, owner);
        sqlite3_bind_int64(u, 2, now + lease.count());
        sqlite3_bind_int64(u, 3, p.seq);
        if (run(c.db(), u, "claiming events") != 1)
          throw Error(ErrorCode::corrupt, "sqlite", "outbox '" + t_ + "': claim out of step");
        sqlite3_reset(u);
      }
    } else {
      // Every claimable row in [first, last] was picked.
      Use u(c.prepare(claim_range_sql_));
      sqlite3_bind_int64(u, 1, owner);
      sqlite3_bind_int64(u, 2, now + lease.count());
      sqlite3_bind_int64(u, 3, first);
      sqlite3_bind_int64(u, 4, last);
      sqlite3_bind_int64(u, 5, now);
      if (static_cast<std::size_t>(run(c.db(), u, "claiming events")) != picked.size())
        throw Error(ErrorCode::corrupt, "sqlite", "outbox '" + t_ + "': claim out of step");
    }

    // Mostly a contiguous run of seqs: read the range and skip the few rows of other batches;
    // a sparse set is looked up through a JSON list instead.
    const bool dense = last - first < 2 * static_cast<std::int64_t>(picked.size()) + 16;
    std::string list;
    if (!dense) {
      std::vector<std::int64_t> seqs;
      seqs.reserve(picked.size());
      for (const auto& p : picked) seqs.push_back(p.seq);
      list = json_seqs(seqs);
    }
    Use b(c.prepare(dense ? bodies_range_sql_ : bodies_sql_));
    if (dense) {
      sqlite3_bind_int64(b, 1, first);
      sqlite3_bind_int64(b, 2, last);
    } else {
      bind_text(b, 1, list);
    }
    batch.events.reserve(picked.size());
    std::size_t next = 0;
    while (next < picked.size() && step_row(c.db(), b, "reading claimed events")) {
      if (sqlite3_column_int64(b, 0) != picked[next].seq) continue;  // another batch's row
      StoredEvent& e = batch.events.emplace_back();
      read_event(b, e);
      e.attempts = picked[next].attempts + 1;
      e.key = std::move(picked[next].key);
      ++next;
    }
    if (batch.events.size() != picked.size())
      throw Error(ErrorCode::corrupt, "sqlite",
                  "outbox '" + t_ + "': claimed events without a row in '" + t_ + "_body'");
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
    std::lock_guard<FairLock> g(shared_->write_lock);
    return data_version(writer_);
  }

  // nullopt when a writer of this process holds the lock right now (it will notify).
  std::optional<std::uint64_t> try_writer_data_version() {
    if (!shared_->write_lock.try_lock()) return std::nullopt;
    std::lock_guard<FairLock> g(shared_->write_lock, std::adopt_lock);
    try {
      return data_version(writer_);
    } catch (const Error&) {
      return std::nullopt;
    }
  }

  // Milliseconds until the next retry falls due or lease expires; nullopt when none.
  std::optional<Duration> next_due_in() {
    try {
      return read([&](Conn& c) -> std::optional<Duration> {
        Use s(c.prepare(next_due_sql_));
        if (!step_row(c.db(), s, "finding the next due event") ||
            sqlite3_column_type(s, 0) == SQLITE_NULL)
          return std::nullopt;
        return Duration(std::max<std::int64_t>(1, sqlite3_column_int64(s, 0)));
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

  Conn writer_;  // guarded by shared_->write_lock
  std::mutex reader_mu_;
  Conn reader_;  // guarded by reader_mu_; empty for :memory:

  std::atomic<std::uint64_t> claim_dv_{0};   // writer's data_version at the last claim
  std::atomic<std::uint64_t> claim_gen_{0};  // shared generation at the last claim
  // The last claim stopped after its scan window (see claim_in_txn); written under the lock.
  std::atomic<bool> last_claim_truncated_{false};
  std::uint64_t interrupts_ = 0;  // guarded by shared_->mu

  std::mutex prune_mu_;
  SteadyClock::time_point next_prune_{};  // guarded by prune_mu_

  std::string bodies_range_sql_, ack_range_sql_, ack_archive_range_sql_;
  std::string bodies_sql_, delete_orphan_bodies_sql_, delete_body_seq_sql_, retry_one_body_sql_,
      retry_all_body_sql_;
  std::string scan_sql_, claim_range_sql_, claim_one_sql_, delete_bodies_range_sql_;
  std::string insert_state_full_sql_, insert_body_full_sql_;  // kMaxRowsPerInsert rows
  std::string ack_sql_, ack_archive_sql_, prune_sql_, nack_retry_sql_, nack_dead_sql_,
      delete_seq_sql_, release_sql_, renew_sql_, renew_lost_sql_, stats_sql_, count_dead_sql_,
      count_archive_sql_, list_sql_, list_dead_sql_, retry_one_sql_, retry_all_sql_,
      delete_dead_one_sql_, delete_revived_sql_, discard_all_sql_, next_due_sql_, find_bodies_sql_,
      find_dead_sql_;
};

}  // namespace

std::unique_ptr<Store> make_sqlite_store(const SqliteOptions& options) {
  return std::make_unique<SqliteStore>(options);
}

std::unique_ptr<Store> open_sqlite_store(std::string_view url, const StoreOptions& options) {
  auto u = core::Url::parse(url);
  if (u.scheme() != "sqlite") throw ConfigError("not a sqlite: URL: '" + u.redacted() + "'");
  SqliteOptions o;
  o.store = options;
  if (u.hierarchical()) {
    // sqlite:///abs/path is accepted as sqlite:/abs/path; a host is not.
    if (!u.hosts().empty())
      throw ConfigError("bad URL '" + u.redacted() +
                        "': sqlite URLs take a path, not a host (use sqlite:PATH or "
                        "sqlite:///abs/path)");
    o.path = "/" + u.path();
  } else {
    o.path = u.path();
  }
  if (o.path.empty() || o.path == "/")
    throw ConfigError("bad URL '" + u.redacted() +
                      "': missing database path (use sqlite:PATH or sqlite::memory:)");
  if (auto table = u.param("table")) o.table = *table;
  core::require_identifier(o.table, "table name (URL parameter 'table')");
  if (auto sync = u.param("synchronous")) {
    std::string v = *sync;
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v == "normal")
      o.synchronous_full = false;
    else if (v == "full")
      o.synchronous_full = true;
    else
      throw ConfigError("bad URL '" + u.redacted() +
                        "': parameter 'synchronous' must be "
                        "normal or full, not '" +
                        *sync + "'");
  }
  if (auto archive = u.bool_param("archive")) o.store.archive = *archive;
  if (auto ms = u.int_param("retention_ms", 0, INT64_MAX / 1000))
    o.store.archive_retention = Duration(*ms);
  if (auto ms = u.int_param("busy_timeout_ms", 0, INT32_MAX))
    o.busy_timeout = std::chrono::milliseconds(*ms);
  if (auto n = u.int_param("max_payload_bytes", 0, INT32_MAX))
    o.store.max_payload_bytes = static_cast<std::size_t>(*n);
  u.reject_unknown();
  return make_sqlite_store(o);
}

void configure_sqlite_connection(sqlite3* db, std::chrono::milliseconds busy_timeout,
                                 bool synchronous_full) {
  if (!db) throw ConfigError("configure_sqlite_connection: null connection", "sqlite");
  sqlite3_busy_timeout(db,
                       static_cast<int>(std::min<std::int64_t>(busy_timeout.count(), INT32_MAX)));
  const char* file = sqlite3_db_filename(db, "main");
  if (file && *file) {
    char* err = nullptr;
    int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", nullptr, nullptr, &err);
    std::string msg = err ? err : "";
    if (err) sqlite3_free(err);
    if (rc != SQLITE_OK)
      throw ConnectionError("sqlite", "could not switch '" + std::string(file) + "' to WAL: " + msg,
                            std::to_string(rc));
  }
  sqlite3_exec(db, synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL",
               nullptr, nullptr, nullptr);
}

}  // namespace outpost
