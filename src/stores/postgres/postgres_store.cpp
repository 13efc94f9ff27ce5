// The PostgreSQL store. Every Store call is one statement (CTEs do the multi-step work), so one
// round trip per batch for claim, ack, nack, release and renew; statements are prepared once per
// pooled connection and results come back in binary format. settle_and_claim (the relay's hot
// path) sends a batch's ack, nack and release and the next claim as one libpq pipeline: one
// round trip and one commit per batch.
//
// Ordered claims across several relays: a key's events are claimable only when the key's head
// (its lowest live seq) is locked by this very statement (FOR UPDATE SKIP LOCKED). A relay that
// skips a row locked by another relay's claim in progress therefore drops that key entirely, and
// a candidate whose key has an earlier non-claimable event (leased, waiting to retry) is excluded
// by an index probe. See docs/postgres.md for the reasoning and measurements.

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <type_traits>
#include <unordered_map>

#include "core/append_check.h"
#include "core/names.h"
#include "core/url.h"
#include "outpost/stores/postgres.h"
#include "stores/postgres/pg_conn.h"
#include "stores/postgres/schema.h"

namespace outpost {
namespace {

using SteadyClock = std::chrono::steady_clock;

// "7d", "12h", "30m", "10s", "250ms"; a bare number is seconds.
Duration parse_duration(const std::string& text, const std::string& what) {
  std::int64_t n = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  std::string unit(p, text.data() + text.size());
  if (ec != std::errc() || n < 0)
    throw ConfigError("parameter '" + what +
                      "' must be a duration like 7d, 12h, 30m, 10s or 500ms, got '" + text + "'");
  using namespace std::chrono;
  if (unit == "ms") return Duration(n);
  if (unit.empty() || unit == "s") return duration_cast<Duration>(seconds(n));
  if (unit == "m") return duration_cast<Duration>(minutes(n));
  if (unit == "h") return duration_cast<Duration>(hours(n));
  if (unit == "d") return duration_cast<Duration>(hours(24 * n));
  throw ConfigError("parameter '" + what + "' has an unknown unit '" + unit +
                    "' (use ms, s, m, h or d)");
}

std::string headers_json(const Headers& headers) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : headers) j[k] = v;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Headers parse_headers_jsonb(std::string_view bin) {
  Headers out;
  if (bin.empty()) return out;
  bin.remove_prefix(1);  // jsonb binary format version byte
  auto j = nlohmann::json::parse(bin, nullptr, false);
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end(); ++it)
    out[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  return out;
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

// Text-format array literal element: always quoted, with " and \ escaped.
std::string text_array(const std::vector<std::string>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += '"';
    for (char c : values[i]) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    out += '"';
  }
  out += '}';
  return out;
}

// Column list shared by claim/list/dead reads; decoded by read_event().
constexpr const char* kCols = "seq, id, type, key, payload, occurred_at, headers, attempts";

void read_event(const PGresult* r, int row, StoredEvent& e) {
  e.seq = pg::get_i64(r, row, 0);
  e.id = pg::get_uuid(r, row, 1);
  e.type = pg::get_bytes(r, row, 2);
  e.key = pg::get_bytes(r, row, 3);
  e.payload = pg::get_bytes(r, row, 4);
  e.occurred_at = pg::get_time(r, row, 5);
  e.headers = parse_headers_jsonb(pg::get_bytes(r, row, 6));
  e.attempts = pg::get_i32(r, row, 7);
}

struct Config {
  pg::Endpoint endpoint;
  std::string schema = "public";
  std::string table = "outbox";
  std::string partition_width = "day";
  std::size_t pool = 8;
};

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
  if (auto v = url.param("archive_retention"))
    options.archive_retention = parse_duration(*v, "archive_retention");
  if (auto v = url.param("archive_partition")) {
    if (*v != "day" && *v != "hour")
      throw ConfigError("parameter 'archive_partition' must be day or hour, got '" + *v + "'");
    c.partition_width = *v;
  }
  if (auto v = url.int_param("pool", 1, 64)) c.pool = static_cast<std::size_t>(*v);

  auto& ep = c.endpoint;
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
  for (const char* k : {"connect_timeout", "sslmode", "sslrootcert", "sslcert", "sslkey",
                        "application_name", "target_session_attrs"}) {
    if (auto v = url.param(k)) {
      add(k, *v);
      timeout_given |= std::string_view(k) == "connect_timeout";
      app_given |= std::string_view(k) == "application_name";
    }
  }
  url.reject_unknown();
  // A server that is down must fail fast, not hang the relay; libpq's default is forever.
  if (!timeout_given) add("connect_timeout", "5");
  if (!app_given) add("application_name", "outpost");
  ep.where = (hosts.empty() ? std::string("local socket") : hosts + ":" + ports) +
             (db.empty() ? "" : "/" + db) + (url.user().empty() ? "" : " as " + url.user());
  return c;
}

class PostgresStore final : public Store {
 public:
  PostgresStore(Config config, const StoreOptions& options)
      : config_(std::move(config)),
        options_(options),
        names_(config_.schema, config_.table),
        pool_(config_.endpoint, config_.pool),
        wake_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (wake_fd_ < 0) throw Error(ErrorCode::internal, "postgres", "eventfd failed");
    std::random_device rd;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
    instance_ = std::string("pg-") + buf + "-";
    build_sql();
    migrate();
    if (options_.archive) maintain_archive(true);
  }

  ~PostgresStore() override {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  std::string_view backend() const override { return "postgres"; }

  void append(std::span<const Event> events, TxHandle tx) override {
    auto prepared = core::prepare_for_append(events, options_, "postgres");
    if (prepared.empty()) return;
    pg::Params params;
    {
      pg::ArrayBuilder ids(pg::kUuidOid), types(pg::kTextOid), keys(pg::kTextOid),
          payloads(pg::kByteaOid), times(pg::kTimestamptzOid), headers(pg::kJsonbOid);
      std::string tmp;
      for (const auto& e : prepared) {
        ids.add(std::string_view(reinterpret_cast<const char*>(e.id.bytes().data()), 16));
        types.add(e.type);
        keys.add(e.key);
        payloads.add(e.payload);
        tmp.clear();
        pg::put_i64(tmp, pg::to_pg_micros(e.occurred_at));
        times.add(tmp);
        headers.add("\x01" + headers_json(e.headers));
      }
      for (auto* a : {&ids, &types, &keys, &payloads, &times, &headers}) params.binary(a->finish());
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
      auto r = pg::exec_params(config_.endpoint, conn, sql_insert_, params, "append");
      check_inserted(r.get(), prepared.size());
      return;
    }
    if (!tx.is_none())
      throw ConfigError("the postgres store takes TxHandle::postgres(conn) or TxHandle{}",
                        "postgres");
    // One statement is one transaction: all rows or none, and its trigger notifies once.
    auto c = pool_.get();
    try {
      auto r = pg::exec_prepared(config_.endpoint, *c, "append", sql_insert_, params, "append");
      check_inserted(r.get(), prepared.size());
    } catch (const ConnectionError& e) {
      // The statement may have committed before the connection broke; the caller can re-append
      // the same ids (a duplicate id is reported as a conflict).
      throw InDoubtError("postgres",
                         std::string(e.what()) + " (the events may or may not have been written)");
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
    Stmt stmt = claim_stmt(batch.lease.owner, max, lease, order);
    pg::ResultPtr r;
    {
      std::lock_guard lock(session_mu_);
      try {
        ensure_session();
        r = pg::exec_prepared(config_.endpoint, *session_, stmt.name.c_str(), stmt.sql, stmt.params,
                              "claim");
      } catch (...) {
        drop_session();
        throw;
      }
    }
    server_seen_up_ = true;
    read_claimed(r.get(), batch);
    return batch;
  }

  std::size_t ack(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    auto stmt = ack_stmt(batch, ids);
    if (!stmt) return 0;
    std::size_t n = 0;
    try {
      n = settle_one(*stmt, count_rows);
    } catch (const Error& e) {
      // 23514: no archive partition for this time yet (the clock crossed into a new day/hour
      // before maintenance ran): create it and try once more.
      if (!options_.archive || e.native_code() != "23514") throw;
      maintain_archive(true);
      n = settle_one(*stmt, count_rows);
    }
    if (options_.archive) maintain_archive(false);
    return n;
  }

  std::size_t nack(const ClaimedBatch& batch, std::span<const Nack> nacks) override {
    auto stmt = nack_stmt(batch, nacks);
    return stmt ? settle_one(*stmt, count_first) : 0;
  }

  std::size_t release(const ClaimedBatch& batch, std::span<const EventId> ids) override {
    auto stmt = release_stmt(batch, ids);
    return stmt ? settle_one(*stmt, count_first) : 0;
  }

  // The relay's hot path in one round trip: ack, nack, release and the next claim are sent as
  // one libpq pipeline and run as one transaction (the pipeline's implicit transaction): one
  // commit, one WAL flush, one round trip per batch. The counts are read once it committed. The
  // claim sees the settlement (same transaction), so a key whose run was just acked can be claimed
  // again at once.
  ClaimedBatch settle_and_claim(const ClaimedBatch& done, const Settlement& settlement,
                                SettleCounts& counts, std::size_t max, Duration lease,
                                ClaimOrder order) override {
    auto acks = ack_stmt(done, settlement.acks);
    auto nacks = nack_stmt(done, settlement.nacks);
    auto releases = release_stmt(done, settlement.releases);
    ClaimedBatch batch;
    batch.lease.owner = next_owner();
    std::optional<Stmt> claim;
    if (max > 0) claim = claim_stmt(batch.lease.owner, max, lease, order);
    auto attempt = [&] {
      counts = {};
      std::lock_guard lock(session_mu_);
      try {
        ensure_session();
        std::vector<Stmt*> steps;
        for (auto* s : {&acks, &nacks, &releases, &claim})
          if (*s) steps.push_back(&**s);
        if (steps.empty()) return;
        auto res = run_pipeline(*session_, steps);
        std::size_t i = 0;
        if (acks) counts.acked = count_rows(res[i++].get());
        if (nacks) counts.nacked = count_first(res[i++].get());
        if (releases) counts.released = count_first(res[i++].get());
        if (claim) read_claimed(res[i].get(), batch);
      } catch (...) {
        drop_session();
        throw;
      }
    };
    try {
      attempt();
    } catch (const Error& e) {
      // As in ack(): the archive partition for this day/hour is missing. The failed pipeline
      // rolled back as a whole (or the session was dropped), so running it again is clean.
      if (!acks || !options_.archive || e.native_code() != "23514") throw;
      maintain_archive(true);
      attempt();
    }
    if (claim) server_seen_up_ = true;
    if (acks && options_.archive) maintain_archive(false);
    return batch;
  }

  bool renew(const ClaimedBatch& batch, Duration lease) override {
    std::vector<std::int64_t> seqs;
    for (const auto& e : batch.events) seqs.push_back(e.seq);
    if (seqs.empty()) return true;
    pg::Params p;
    p.text(batch.lease.owner);
    p.text(pg::int_array(seqs));
    p.text(std::to_string(std::max<std::int64_t>(lease.count(), 1)));
    std::lock_guard lock(session_mu_);
    try {
      ensure_session();
      auto r = pg::exec_prepared(config_.endpoint, *session_, "renew", sql_renew_, p, "renew");
      return pg::get_i64(r.get(), 0, 0) == 0;
    } catch (...) {
      drop_session();
      throw;
    }
  }

  StoreStats stats() override {
    pg::Params p;
    p.text(options_.archive ? "1" : "0");
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "stats", sql_stats_, p, "stats");
    StoreStats s;
    s.pending = pg::get_i64(r.get(), 0, 0);
    s.leased = pg::get_i64(r.get(), 0, 1);
    s.dead = pg::get_i64(r.get(), 0, 2);
    s.archived = pg::get_i64(r.get(), 0, 3);
    s.oldest_pending_age = Duration(std::max<std::int64_t>(pg::get_i64(r.get(), 0, 4), 0));
    return s;
  }

  std::vector<StoredEvent> list(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "list", sql_list_, p, "list");
    std::vector<StoredEvent> out(static_cast<std::size_t>(PQntuples(r.get())));
    for (std::size_t i = 0; i < out.size(); ++i) read_event(r.get(), static_cast<int>(i), out[i]);
    return out;
  }

  std::vector<DeadEvent> dead(std::size_t limit) override {
    pg::Params p;
    p.text(std::to_string(limit));
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "dead", sql_dead_, p, "dead");
    std::vector<DeadEvent> out(static_cast<std::size_t>(PQntuples(r.get())));
    for (std::size_t i = 0; i < out.size(); ++i) {
      int row = static_cast<int>(i);
      read_event(r.get(), row, out[i]);
      out[i].last_error = pg::get_bytes(r.get(), row, 8);
      out[i].dead_at = pg::get_time(r.get(), row, 9);
    }
    return out;
  }

  std::size_t retry(std::span<const EventId> ids) override {
    if (ids.empty()) return 0;
    pg::Params p;
    p.text(uuid_array_text({ids.begin(), ids.end()}));
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "retry", sql_retry_, p, "retry");
    return tuples(r.get());
  }

  std::size_t retry_all() override {
    pg::Params p;
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "retry_all", sql_retry_all_, p, "retry");
    return tuples(r.get());
  }

  std::size_t discard(std::span<const EventId> ids) override {
    if (ids.empty()) return 0;
    pg::Params p;
    p.text(uuid_array_text({ids.begin(), ids.end()}));
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "discard", sql_discard_, p, "discard");
    return tuples(r.get());
  }

  std::size_t discard_all() override {
    pg::Params p;
    auto c = pool_.get();
    auto r = pg::exec_prepared(config_.endpoint, *c, "discard_all", "DELETE FROM " + names_.dead, p,
                               "discard");
    return tuples(r.get());
  }

  // One thread at a time owns the LISTEN connection and polls its socket; other waiters sleep on
  // a condition variable that the owner signals when it returns.
  void wait_for_work(Duration max) override {
    auto deadline = SteadyClock::now() + max;
    std::unique_lock lock(mu_);
    std::uint64_t gen = generation_, intr = interrupts_;
    if (listening_) {
      cv_.wait_until(lock, deadline, [&] { return generation_ != gen || interrupts_ != intr; });
      return;
    }
    listening_ = true;
    lock.unlock();
    // A lost LISTEN connection is handled inside (reconnect with backoff); what escapes is a
    // failure of this host (poll() itself failing): the caller reports it and backs off rather
    // than taking it for a timeout and waiting again at once.
    std::exception_ptr failed;
    try {
      listen_once(deadline);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    listening_ = false;
    ++generation_;
    cv_.notify_all();
    lock.unlock();
    if (failed) std::rethrow_exception(failed);
  }

  void interrupt() override {
    {
      std::lock_guard lock(mu_);
      ++interrupts_;
    }
    cv_.notify_all();
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
  }

 private:
  // --- the settlement session ---------------------------------------------------------------
  // claim, ack, nack, release and renew run on one connection per store object, each statement
  // its own transaction (settle_and_claim: one pipeline, one transaction). A call returns its
  // count only once the statement committed, so a count never covers a settlement that a later
  // failure could roll back. If the commit is lost with the connection, the call throws and
  // those events are delivered again: at least once, never lost.

  void ensure_session() {  // caller holds session_mu_
    if (!session_ || pg::broken(session_->pg.get())) {
      session_.reset();
      auto c = std::make_unique<pg::Conn>();
      c->pg = pg::connect(config_.endpoint);
      // Every statement on this connection touches at most a batch of rows through an index
      // (seq, key+seq). The planner does not always know: a plan made while the outbox was
      // small or freshly created (stale statistics, cached generic plan) seq-scans and sorts
      // the whole backlog for every claim (measured: 29 ms instead of 3 ms per claim on a
      // growing 15k-row backlog). Disabling those two plan shapes here keeps the index plans.
      pg::exec_simple(config_.endpoint, c->pg.get(),
                      "SET enable_seqscan = off; SET enable_sort = off", "session setup");
      session_ = std::move(c);
    }
  }

  void drop_session() { session_.reset(); }  // caller holds session_mu_

  // One statement of a pipeline: a prepared statement, or a plain command when name is empty.
  struct Stmt {
    std::string name;
    std::string sql;
    pg::Params params;
    const char* what = "";
  };

  std::string next_owner() { return instance_ + std::to_string(++claims_); }

  Stmt claim_stmt(const std::string& owner, std::size_t max, Duration lease, ClaimOrder order) {
    bool ordered = order == ClaimOrder::ordered;
    Stmt s;
    // The batch size is spliced in as a literal (a number, not user text): with LIMIT $n a
    // cached generic plan cannot know n and chose a sequential scan and sort of the whole
    // table (3x slower claims under load). One prepared statement per batch size.
    s.sql = ordered ? sql_claim_ordered_ : sql_claim_any_;
    s.sql.replace(s.sql.find("{max}"), 5, std::to_string(max));
    s.name = std::string(ordered ? "claim_ordered_" : "claim_any_") + std::to_string(max);
    s.params.text(owner);
    s.params.text(std::to_string(std::max<std::int64_t>(lease.count(), 1)));
    s.what = "claim";
    return s;
  }

  static void read_claimed(const PGresult* r, ClaimedBatch& batch) {
    int n = PQntuples(r);
    batch.events.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) read_event(r, i, batch.events[static_cast<std::size_t>(i)]);
    std::sort(batch.events.begin(), batch.events.end(),
              [](const StoredEvent& a, const StoredEvent& b) { return a.seq < b.seq; });
  }

  // Settlement statements; nullopt when none of the ids belongs to the batch (nothing can count).
  std::optional<Stmt> ack_stmt(const ClaimedBatch& batch, std::span<const EventId> ids) {
    if (ids.empty()) return std::nullopt;
    auto seqs = seqs_of(batch, ids);
    if (seqs.empty()) return std::nullopt;
    Stmt s;
    s.params.text(batch.lease.owner);
    s.params.text(pg::int_array(seqs));
    s.name = options_.archive ? "ack_archive" : "ack";
    s.sql = options_.archive ? sql_ack_archive_ : sql_ack_;
    s.what = "ack";
    return s;
  }

  std::optional<Stmt> nack_stmt(const ClaimedBatch& batch, std::span<const Nack> nacks) {
    if (nacks.empty()) return std::nullopt;
    std::vector<std::int64_t> seqs, retry_ms;
    std::vector<std::string> errors;
    auto index = index_of(batch);
    for (const auto& nk : nacks) {
      auto it = index.find(nk.id);
      if (it == index.end()) continue;
      seqs.push_back(it->second);
      errors.push_back(nk.error);
      retry_ms.push_back(nk.retry_in ? std::max<std::int64_t>(nk.retry_in->count(), 0) : -1);
    }
    if (seqs.empty()) return std::nullopt;
    Stmt s;
    s.params.text(batch.lease.owner);
    s.params.text(pg::int_array(seqs));
    s.params.text(text_array(errors));
    s.params.text(pg::int_array(retry_ms));
    s.name = "nack";
    s.sql = sql_nack_;
    s.what = "nack";
    return s;
  }

  std::optional<Stmt> release_stmt(const ClaimedBatch& batch, std::span<const EventId> ids) {
    if (ids.empty()) return std::nullopt;
    auto seqs = seqs_of(batch, ids);
    if (seqs.empty()) return std::nullopt;
    Stmt s;
    s.params.text(batch.lease.owner);
    s.params.text(pg::int_array(seqs));
    s.name = "release";
    s.sql = sql_release_;
    s.what = "release";
    return s;
  }

  // ack reports its rows in the command tag (DELETE n / INSERT 0 n); nack and release SELECT
  // their count.
  static std::size_t count_rows(const PGresult* r) { return tuples(r); }
  static std::size_t count_first(const PGresult* r) {
    return static_cast<std::size_t>(pg::get_i64(r, 0, 0));
  }

  // Runs one settlement statement as its own transaction; its count is read after the commit.
  std::size_t settle_one(Stmt& stmt, std::size_t (*count)(const PGresult*)) {
    std::lock_guard lock(session_mu_);
    try {
      ensure_session();
      auto r = pg::exec_prepared(config_.endpoint, *session_, stmt.name.c_str(), stmt.sql,
                                 stmt.params, stmt.what);
      return count(r.get());
    } catch (...) {
      drop_session();
      throw;
    }
  }

  // Sends `steps` as one libpq pipeline with one Sync at the end: one round trip, and without
  // an explicit BEGIN one implicit transaction (all or nothing). Returns each step's result;
  // throws the first failure's error after draining the pipeline. On a throw the caller drops
  // the connection (an explicit transaction may be left aborted). Caller holds session_mu_.
  std::vector<pg::ResultPtr> run_pipeline(pg::Conn& c, std::span<Stmt* const> steps) {
    PGconn* conn = c.pg.get();
    const auto& ep = config_.endpoint;
    for (Stmt* s : steps) {
      if (s->name.empty() || c.prepared.contains(s->name)) continue;
      pg::ResultPtr p(PQprepare(conn, s->name.c_str(), s->sql.c_str(), 0, nullptr));
      if (!p || PQresultStatus(p.get()) != PGRES_COMMAND_OK)
        pg::throw_error(ep, conn, p.get(), std::string(s->what) + " (prepare)");
      c.prepared.insert(s->name);
    }
    if (!PQenterPipelineMode(conn)) pg::throw_error(ep, conn, nullptr, steps.front()->what);
    for (Stmt* s : steps) {
      int ok =
          s->name.empty()
              ? PQsendQueryParams(conn, s->sql.c_str(), 0, nullptr, nullptr, nullptr, nullptr, 0)
              : PQsendQueryPrepared(conn, s->name.c_str(), s->params.size(), s->params.values(),
                                    s->params.lengths(), s->params.formats(), 1);
      if (!ok) pg::throw_error(ep, conn, nullptr, s->what);
    }
    if (!PQpipelineSync(conn)) pg::throw_error(ep, conn, nullptr, steps.front()->what);
    std::vector<pg::ResultPtr> out(steps.size());
    std::size_t failed = steps.size();
    for (std::size_t i = 0; i < steps.size(); ++i) {
      out[i].reset(PQgetResult(conn));
      if (!out[i] || pg::broken(conn)) pg::throw_error(ep, conn, out[i].get(), steps[i]->what);
      auto st = PQresultStatus(out[i].get());
      if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK && failed == steps.size()) failed = i;
      // Each step's results end with a null result.
      while (PGresult* extra = PQgetResult(conn)) {
        PQclear(extra);
        if (pg::broken(conn)) pg::throw_error(ep, conn, nullptr, steps[i]->what);
      }
    }
    pg::ResultPtr sync(PQgetResult(conn));
    if (!sync || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC)
      pg::throw_error(ep, conn, sync.get(), std::string(steps.front()->what) + " (pipeline)");
    if (!PQexitPipelineMode(conn)) pg::throw_error(ep, conn, nullptr, steps.front()->what);
    if (failed < steps.size()) pg::throw_error(ep, conn, out[failed].get(), steps[failed]->what);
    return out;
  }

  static std::size_t tuples(const PGresult* r) {
    const char* t = PQcmdTuples(const_cast<PGresult*>(r));
    return t && *t ? static_cast<std::size_t>(std::strtoull(t, nullptr, 10)) : 0;
  }

  static std::unordered_map<EventId, std::int64_t, EventIdHash> index_of(const ClaimedBatch& b) {
    std::unordered_map<EventId, std::int64_t, EventIdHash> m;
    for (const auto& e : b.events) m.emplace(e.id, e.seq);
    return m;
  }

  // Ids not in the batch were never leased under it: they cannot count.
  static std::vector<std::int64_t> seqs_of(const ClaimedBatch& b, std::span<const EventId> ids) {
    std::vector<std::int64_t> out;
    if (ids.size() * 4 < b.events.size() || ids.size() < 16) {
      for (const auto& id : ids)
        for (const auto& e : b.events)
          if (e.id == id) {
            out.push_back(e.seq);
            break;
          }
      return out;
    }
    auto m = index_of(b);
    for (const auto& id : ids)
      if (auto it = m.find(id); it != m.end()) out.push_back(it->second);
    return out;
  }

  void migrate() {
    auto c = pool_.get();
    PGconn* pg = c.pg();
    const auto& ep = config_.endpoint;
    pg::exec_simple(ep, pg, "BEGIN", "migrate");
    try {
      // Concurrent first opens (several relays starting at once) queue here instead of racing
      // on CREATE ... IF NOT EXISTS, which is not safe under concurrency.
      pg::Params lock;
      lock.text(names_.schema + "." + names_.table);
      pg::exec_params(ep, pg, "SELECT pg_advisory_xact_lock(hashtext($1))", lock, "migrate");
      pg::Params s;
      s.text(names_.schema);
      auto has =
          pg::exec_params(ep, pg, "SELECT 1 FROM pg_namespace WHERE nspname = $1", s, "migrate");
      if (PQntuples(has.get()) == 0)
        pg::exec_simple(ep, pg, "CREATE SCHEMA " + names_.q_schema, "create schema");
      pg::exec_simple(ep, pg,
                      "CREATE TABLE IF NOT EXISTS " + names_.versions +
                          " (tbl text PRIMARY KEY, version integer NOT NULL, "
                          "updated_at timestamptz NOT NULL DEFAULT now())",
                      "migrate");
      pg::Params t;
      t.text(names_.table);
      auto v = pg::exec_params(ep, pg, "SELECT version FROM " + names_.versions + " WHERE tbl = $1",
                               t, "migrate");
      int version = PQntuples(v.get()) ? pg::get_i32(v.get(), 0, 0) : 0;
      if (version > pg::kSchemaVersion)
        throw Error(ErrorCode::corrupt, "postgres",
                    "outbox " + names_.outbox + " has schema version " + std::to_string(version) +
                        ", newer than this build understands (" +
                        std::to_string(pg::kSchemaVersion) + ")");
      if (version < 1) pg::exec_simple(ep, pg, pg::migration_v1(names_), "migrate to v1");
      if (version < 2) pg::exec_simple(ep, pg, pg::migration_v2(names_), "migrate to v2");
      if (version < pg::kSchemaVersion) {
        pg::Params u;
        u.text(names_.table);
        u.text(std::to_string(pg::kSchemaVersion));
        pg::exec_params(ep, pg,
                        "INSERT INTO " + names_.versions +
                            " (tbl, version) VALUES ($1, $2::int) ON CONFLICT (tbl) DO UPDATE "
                            "SET version = EXCLUDED.version, updated_at = now()",
                        u, "migrate");
      }
      pg::exec_simple(ep, pg, "COMMIT", "migrate");
    } catch (...) {
      PQclear(PQexec(pg, "ROLLBACK"));
      throw;
    }
  }

  // Creates the current and next archive partitions, drops expired ones. Forced at open and
  // when an ack found no partition; otherwise at most every retention/2 (capped at a minute).
  void maintain_archive(bool force) {
    auto interval = std::chrono::duration_cast<SteadyClock::duration>(std::min<Duration>(
        options_.archive_retention.count() > 0 ? options_.archive_retention / 2 : Duration(60'000),
        Duration(60'000)));
    auto t = SteadyClock::now();
    auto last = last_maintain_.load();
    if (!force && t - SteadyClock::time_point(SteadyClock::duration(last)) < interval) return;
    last_maintain_ = t.time_since_epoch().count();
    pg::Params p;
    p.text(std::to_string(options_.archive_retention.count()));
    p.text(config_.partition_width);
    auto c = pool_.get();
    pg::exec_prepared(config_.endpoint, *c, "maintain",
                      "SELECT " + names_.maintain + "($1::bigint * interval '1 millisecond', $2)",
                      p, "archive maintenance");
  }

  // Runs on the thread that owns the LISTEN connection.
  void listen_once(SteadyClock::time_point deadline) {
    const auto& ep = config_.endpoint;
    if (!listen_) {
      auto t = SteadyClock::now();
      // A claim that just succeeded proves the server is back: skip the rest of the backoff.
      if (t < next_connect_ && !server_seen_up_.exchange(false)) {
        poll_until(std::min(deadline, next_connect_), -1);
        return;
      }
      try {
        auto conn = pg::connect(ep);
        pg::exec_simple(ep, conn.get(), "LISTEN \"" + names_.channel + "\"", "listen");
        listen_ = std::move(conn);
        backoff_ = Duration(0);
      } catch (const Error&) {
        backoff_ = std::min(Duration(5'000), std::max(Duration(50), backoff_ * 2));
        next_connect_ = SteadyClock::now() + backoff_;
        poll_until(std::min(deadline, next_connect_), -1);
        return;
      }
      // Freshly (re)connected: notifications sent while we were away are lost, so the caller
      // must re-check for work now.
      return;
    }
    if (drain_notifications()) return;
    // Sleep no longer than the next retry or lease expiry, so due work is not left waiting.
    try {
      pg::Params none;
      auto r = pg::exec_params(ep, listen_.get(), sql_next_due_, none, "wait");
      if (!pg::is_null(r.get(), 0, 0)) {
        auto ms = pg::get_i64(r.get(), 0, 0);
        if (ms <= 0) return;
        deadline = std::min(deadline, SteadyClock::now() + std::chrono::milliseconds(ms));
      }
    } catch (const Error&) {
      if (pg::broken(listen_.get())) {
        listen_.reset();
        return;
      }
    }
    if (drain_notifications()) return;
    while (SteadyClock::now() < deadline) {
      int which = poll_until(deadline, PQsocket(listen_.get()));
      if (which == 1) return;  // interrupted
      if (which == 2) {
        if (!PQconsumeInput(listen_.get()) || pg::broken(listen_.get())) {
          listen_.reset();  // lost: reconnect on the next wait; the caller re-checks meanwhile
          return;
        }
        if (drain_notifications()) return;
      }
    }
  }

  bool drain_notifications() {
    if (!PQconsumeInput(listen_.get())) {
      listen_.reset();
      return true;
    }
    bool any = false;
    while (PGnotify* n = PQnotifies(listen_.get())) {
      any = true;
      PQfreemem(n);
    }
    return any;
  }

  // 0: timeout, 1: interrupt(), 2: socket readable. Throws when poll() fails (not EINTR): the
  // failure would repeat at once, so returning it as a timeout made the wait loop spin.
  int poll_until(SteadyClock::time_point deadline, int sock) {
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {sock, POLLIN, 0}};
    for (;;) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      int rc = ::poll(fds, sock >= 0 ? 2 : 1,
                      static_cast<int>(std::min<std::int64_t>(left.count() + 1, 60'000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0)
        throw Error(ErrorCode::backend, "postgres",
                    std::string("waiting for work: poll() failed: ") + std::strerror(errno));
      if (rc == 0) return 0;
      if (fds[0].revents) {
        std::uint64_t v;
        [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
        return 1;
      }
      return 2;
    }
  }

  void build_sql() {
    const std::string& t = names_.outbox;
    sql_insert_ = "INSERT INTO " + t +
                  " (id, type, key, payload, occurred_at, headers) SELECT * FROM unnest("
                  "$1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], "
                  "$6::jsonb[]) WHERE NOT EXISTS (SELECT 1 FROM " +
                  names_.dead + " WHERE id = ANY($1::uuid[]))";
    const std::string claimable =
        "(t.state = 0 OR (t.state = 1 AND t.lease_until <= now()) OR "
        "(t.state = 2 AND t.due_at <= now()))";
    const std::string lease_set =
        "UPDATE " + t +
        " u SET state = 1, lease_owner = $1, lease_until = now() + $2::bigint * interval '1 "
        "millisecond', attempts = u.attempts + 1 FROM pick WHERE u.seq = pick.seq RETURNING "
        "u.seq, u.id, u.type, u.key, u.payload, u.occurred_at, u.headers, u.attempts";
    sql_claim_any_ = "WITH pick AS (SELECT t.seq FROM " + t + " t WHERE " + claimable +
                     " ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED) " + lease_set;
    // Candidates are taken exactly as in the unordered claim (an index scan of seq that stops
    // after $3 locked rows); what makes it ordered is the check after locking. A filter that
    // probes each candidate's key in the WHERE clause was tried: the planner then estimated the
    // filter as very selective and chose a sequential scan and sort of the whole table (1.7 s
    // per claim on a 25k-row backlog under load).
    sql_claim_ordered_ =
        // Candidates in sequence order, locked; rows locked by a concurrent claim are skipped.
        "WITH cand AS (SELECT t.seq, t.key FROM " + t + " t WHERE " + claimable +
        " ORDER BY t.seq LIMIT {max} FOR UPDATE OF t SKIP LOCKED), "
        "runs AS (SELECT key, min(seq) AS lo, max(seq) AS hi, count(*) AS n FROM cand "
        "WHERE key <> '' GROUP BY key), "
        // A key counts only if we locked its head; its run only if no row of the key between
        // our first and last was skipped.
        "ok AS (SELECT r.key, r.lo, (SELECT min(x.seq) FROM " +
        t + " x WHERE x.key = r.key) = r.lo AS head, (r.n = 1 OR (SELECT count(*) FROM " + t +
        " x WHERE x.key = r.key AND x.seq BETWEEN r.lo AND r.hi) = r.n) AS whole FROM runs r), "
        "pick AS (SELECT c.seq FROM cand c LEFT JOIN ok o ON o.key = c.key WHERE c.key = '' OR "
        "(o.head AND (o.whole OR c.seq = o.lo))) " +
        lease_set;
    sql_ack_ =
        "DELETE FROM " + t + " WHERE seq = ANY($2::bigint[]) AND lease_owner = $1 AND state = 1";
    sql_ack_archive_ = "WITH d AS (DELETE FROM " + t +
                       " WHERE seq = ANY($2::bigint[]) AND lease_owner = $1 AND state = 1 "
                       "RETURNING seq, id, type, key, payload, occurred_at, headers, attempts) "
                       "INSERT INTO " +
                       names_.archive +
                       " (seq, id, type, key, payload, occurred_at, headers, attempts, "
                       "archived_at) SELECT d.*, clock_timestamp() FROM d";
    sql_nack_ =
        "WITH n AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::bigint[]) AS n(seq, err, "
        "ms)), "
        "upd AS (UPDATE " +
        t +
        " t SET state = 2, lease_owner = NULL, lease_until = NULL, last_error = n.err, "
        "due_at = now() + n.ms * interval '1 millisecond' FROM n WHERE t.seq = n.seq AND n.ms >= 0 "
        "AND t.lease_owner = $1 AND t.state = 1 RETURNING 1), "
        "del AS (DELETE FROM " +
        t +
        " t USING n WHERE t.seq = n.seq AND n.ms < 0 AND t.lease_owner = $1 AND t.state = 1 "
        "RETURNING t.seq, t.id, t.type, t.key, t.payload, t.occurred_at, t.headers, t.attempts, "
        "n.err), "
        "ins AS (INSERT INTO " +
        names_.dead +
        " (seq, id, type, key, payload, occurred_at, headers, attempts, last_error) SELECT * FROM "
        "del RETURNING 1) "
        "SELECT (SELECT count(*) FROM upd) + (SELECT count(*) FROM ins)";
    // Released events are due now: tell idle relays (a trigger covers inserts only).
    sql_release_ = "WITH u AS (UPDATE " + t +
                   " SET state = 0, lease_owner = NULL, lease_until = NULL, due_at = now(), "
                   "attempts = greatest(attempts - 1, 0) WHERE seq = ANY($2::bigint[]) AND "
                   "lease_owner = $1 AND state = 1 RETURNING 1), "
                   "c AS (SELECT count(*) AS n FROM u) "
                   "SELECT n FROM c, LATERAL (SELECT CASE WHEN c.n > 0 THEN pg_notify('" +
                   names_.channel + "', '') END) x";
    sql_renew_ = "WITH u AS (UPDATE " + t +
                 " SET lease_until = now() + $3::bigint * interval '1 millisecond' WHERE seq = "
                 "ANY($2::bigint[]) AND lease_owner = $1 AND state = 1 RETURNING 1) "
                 "SELECT count(*) FROM " +
                 t +
                 " WHERE seq = ANY($2::bigint[]) AND lease_owner IS NOT NULL AND lease_owner <> $1";
    sql_stats_ =
        "SELECT count(*) FILTER (WHERE NOT (state = 1 AND lease_until > now())), "
        "count(*) FILTER (WHERE state = 1 AND lease_until > now()), "
        "(SELECT count(*) FROM " +
        names_.dead +
        "), "
        "CASE WHEN $1::int = 1 THEN (SELECT count(*) FROM " +
        names_.archive +
        ") ELSE 0 END, "
        "coalesce((extract(epoch FROM now() - min(occurred_at)) * 1000)::bigint, 0) "
        "FROM " +
        t;
    sql_list_ = std::string("SELECT ") + kCols + " FROM " + t + " ORDER BY seq LIMIT $1::bigint";
    sql_dead_ = std::string("SELECT ") + kCols + ", last_error, dead_at FROM " + names_.dead +
                " ORDER BY seq LIMIT $1::bigint";
    const std::string revive =
        "INSERT INTO " + t +
        " (seq, id, type, key, payload, occurred_at, headers, attempts, state, due_at, "
        "last_error) OVERRIDING SYSTEM VALUE SELECT seq, id, type, key, payload, occurred_at, "
        "headers, 0, 0, now(), last_error FROM d";
    sql_retry_ = "WITH d AS (DELETE FROM " + names_.dead +
                 " WHERE id = ANY($1::uuid[]) RETURNING *) " + revive;
    sql_retry_all_ = "WITH d AS (DELETE FROM " + names_.dead + " RETURNING *) " + revive;
    sql_discard_ = "DELETE FROM " + names_.dead + " WHERE id = ANY($1::uuid[])";
    // Next retry falling due (the due_at index); lease expiries are left to the caller's poll.
    sql_next_due_ = "SELECT (extract(epoch FROM min(due_at) - now()) * 1000)::bigint FROM " + t +
                    " WHERE due_at > now()";
  }

  const Config config_;
  StoreOptions options_;
  const pg::Names names_;
  pg::Pool pool_;
  std::string instance_;
  std::atomic<std::uint64_t> claims_{0};
  std::atomic<SteadyClock::rep> last_maintain_{0};

  std::string sql_insert_, sql_claim_any_, sql_claim_ordered_, sql_ack_, sql_ack_archive_,
      sql_nack_, sql_release_, sql_renew_, sql_stats_, sql_list_, sql_dead_, sql_retry_,
      sql_retry_all_, sql_discard_, sql_next_due_;

  std::mutex session_mu_;
  std::unique_ptr<pg::Conn> session_;  // guarded by session_mu_

  // Wake-ups.
  int wake_fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool listening_ = false;                   // guarded by mu_: a thread owns listen_
  std::uint64_t generation_ = 0;             // guarded by mu_
  std::uint64_t interrupts_ = 0;             // guarded by mu_
  std::atomic<bool> server_seen_up_{false};  // set by a successful claim
  // Owned by the thread with listening_ set.
  pg::ConnPtr listen_;
  Duration backoff_{0};
  SteadyClock::time_point next_connect_{};
};

}  // namespace

std::unique_ptr<Store> open_postgres_store(std::string_view url, const StoreOptions& options) {
  StoreOptions opts = options;
  auto config = parse_config(url, opts);
  return std::make_unique<PostgresStore>(std::move(config), opts);
}

}  // namespace outpost
