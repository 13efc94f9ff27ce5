#include "stores/postgres/pg_conn.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

namespace outpost::pg {

namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::uint64_t be64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

ConnPtr connect(const Endpoint& ep) {
  std::vector<const char*> keys, values;
  for (std::size_t i = 0; i < ep.keys.size(); ++i) {
    keys.push_back(ep.keys[i].c_str());
    values.push_back(ep.values[i].c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  ConnPtr conn(PQconnectdbParams(keys.data(), values.data(), 0));
  if (!conn) throw ConnectionError("postgres", "cannot connect to " + ep.where + ": out of memory");
  if (PQstatus(conn.get()) != CONNECTION_OK)
    throw ConnectionError("postgres", "cannot connect to PostgreSQL at " + ep.where + ": " +
                                          trim(PQerrorMessage(conn.get())));
  // NOTICEs (e.g. "relation already exists, skipping") are not for the user's terminal.
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  // Sends never block either (a large statement to a server that stopped reading): await_result
  // flushes under the deadline.
  if (PQsetnonblocking(conn.get(), 1) != 0)
    throw ConnectionError("postgres", "cannot set up the connection to PostgreSQL at " + ep.where +
                                          ": " + trim(PQerrorMessage(conn.get())));
  return conn;
}

namespace {

// Past a deadline the connection's state is unknown (the reply may still come), so it is ended
// for good: shutting the socket down makes libpq read the end of the stream and mark the
// connection bad, so every holder (pool, session, listener) sees broken() and reconnects. No
// cancel request: that needs a new connection to the same server, which may hang just the same.
[[noreturn]] void abandon(const Endpoint& ep, PGconn* conn, std::string_view what) {
  ::shutdown(PQsocket(conn), SHUT_RDWR);
  PQconsumeInput(conn);
  throw ConnectionError("postgres", std::string(what) + " on PostgreSQL at " + ep.where +
                                        ": no reply within " + std::to_string(ep.timeout.count()) +
                                        " ms (timeout_ms); the connection is dropped");
}

// Waits for `events` on the socket until `deadline`; false when it passed.
bool wait_socket(PGconn* conn, short events, Deadline deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fd{PQsocket(conn), events, 0};
    int rc = ::poll(&fd, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 60'000)));
    if (rc > 0) return true;                    // readable, writable, or an error libpq will report
    if (rc < 0 && errno != EINTR) return true;  // libpq's next read/write reports the failure
  }
}

// Sends a statement with `send` (a PQsend* call) and collects its results; returns the last one
// (the error, if a statement of several failed: the server skips the rest).
template <typename Send>
ResultPtr run_statement(const Endpoint& ep, PGconn* conn, std::string_view what, Send&& send) {
  const Deadline deadline = deadline_of(ep);
  if (!send()) throw_error(ep, conn, nullptr, what);
  ResultPtr last;
  while (ResultPtr r = next_result(ep, conn, deadline, what)) last = std::move(r);
  return last;
}

void check_ok(const Endpoint& ep, PGconn* conn, const ResultPtr& r, std::string_view what) {
  auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) throw_error(ep, conn, r.get(), what);
}

}  // namespace

void await_result(const Endpoint& ep, PGconn* conn, Deadline deadline, std::string_view what) {
  for (;;) {
    int unsent = PQflush(conn);  // 0: all sent, 1: more to send, -1: failed
    if (unsent < 0) throw_error(ep, conn, nullptr, what);
    if (unsent == 0 && !PQisBusy(conn)) return;
    // While sending, also read: the server may be waiting for us to read before it reads more.
    if (!wait_socket(conn, static_cast<short>(POLLIN | (unsent ? POLLOUT : 0)), deadline))
      abandon(ep, conn, what);
    if (!PQconsumeInput(conn)) throw_error(ep, conn, nullptr, what);
  }
}

ResultPtr next_result(const Endpoint& ep, PGconn* conn, Deadline deadline, std::string_view what) {
  await_result(ep, conn, deadline, what);
  return ResultPtr(PQgetResult(conn));
}

bool broken(PGconn* conn) {
  return !conn || PQstatus(conn) != CONNECTION_OK;
}

namespace {

// SQLSTATEs of a server that is short of resources or cannot do I/O now (class 53: out of disk,
// memory or connections; 58030): an outage that passes, retried like a lost connection. Not 53400
// (configuration_limit_exceeded): a setting has to change first.
bool out_of_resources(std::string_view state) {
  return state == "53000" || state == "53100" || state == "53200" || state == "53300" ||
         state == "58030";
}

// The transaction was rolled back by the server and may simply run again: a statement or lock
// wait cancelled by its timeout, a serialization failure, a deadlock.
bool run_again(std::string_view state) {
  return state == "57014" || state == "55P03" || state == "40001" || state == "40P01";
}

}  // namespace

void throw_error(std::string_view where, PGconn* conn, const PGresult* res, std::string_view what) {
  std::string state;
  std::string message;
  if (res) {
    if (const char* s = PQresultErrorField(res, PG_DIAG_SQLSTATE)) state = s;
    message = trim(PQresultErrorMessage(res));
  }
  if (message.empty() && conn) message = trim(PQerrorMessage(conn));
  std::string text = std::string(what) + " on PostgreSQL" +
                     (where.empty() ? std::string() : " at " + std::string(where)) + ": " + message;
  // Lost: the connection broke, or the server is going away or not yet accepting (57P01..57P03
  // shutdown/crash/starting, 57P05 idle session timeout), or no SQLSTATE at all.
  bool lost = broken(conn) || state.empty() || state.starts_with("08") || state == "57P01" ||
              state == "57P02" || state == "57P03" || state == "57P05";
  if (lost) throw ConnectionError("postgres", text, state);
  // The server answered (nothing was done, nothing is in doubt) that it cannot do it now: an
  // outage of the same class as a lost connection, but not a ConnectionError, which callers
  // read as "the statement may have run" (the store's append: InDoubtError).
  if (out_of_resources(state)) throw Error(ErrorCode::connection, "postgres", text, state);
  if (state == "23505") throw Error(ErrorCode::conflict, "postgres", text, state);
  if (run_again(state)) throw TimeoutError("postgres", text + " (SQLSTATE " + state + ")");
  if (state == "42P01" || state == "42703")
    throw Error(ErrorCode::corrupt, "postgres", text + " (is the schema current?)", state);
  throw Error(ErrorCode::backend, "postgres", text, state);
}

void throw_error(const Endpoint& ep, PGconn* conn, const PGresult* res, std::string_view what) {
  throw_error(ep.where, conn, res, what);
}

Pool::Lease Pool::get() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(c));
    }
  }
  auto c = std::make_unique<Conn>();
  c->pg = connect(ep_);
  return Lease(this, std::move(c));
}

void Pool::put(std::unique_ptr<Conn> conn) {
  // A connection left inside a transaction (an exception between BEGIN and COMMIT) is not
  // reusable as is; dropping it rolls the transaction back on the server.
  if (PQtransactionStatus(conn->pg.get()) != PQTRANS_IDLE) return;
  std::lock_guard lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(conn));
}

const char* const* Params::values() {
  ptrs_.clear();
  for (std::size_t i = 0; i < data_.size(); ++i)
    ptrs_.push_back(i < nulls_.size() && nulls_[i] ? nullptr : data_[i].data());
  return ptrs_.data();
}

void prepare(const Endpoint& ep, Conn& conn, const char* name, const std::string& sql,
             std::string_view what) {
  if (conn.prepared.contains(name)) return;
  PGconn* pg = conn.pg.get();
  std::string step = std::string(what) + " (prepare)";
  ResultPtr p =
      run_statement(ep, pg, step, [&] { return PQsendPrepare(pg, name, sql.c_str(), 0, nullptr); });
  if (!p || PQresultStatus(p.get()) != PGRES_COMMAND_OK) throw_error(ep, pg, p.get(), step);
  conn.prepared.insert(name);
}

ResultPtr exec_prepared(const Endpoint& ep, Conn& conn, const char* name, const std::string& sql,
                        Params& params, std::string_view what) {
  PGconn* pg = conn.pg.get();
  prepare(ep, conn, name, sql, what);
  ResultPtr r = run_statement(ep, pg, what, [&] {
    return PQsendQueryPrepared(pg, name, params.size(), params.values(), params.lengths(),
                               params.formats(), 1);
  });
  check_ok(ep, pg, r, what);
  return r;
}

ResultPtr exec_params(const Endpoint& ep, PGconn* conn, const std::string& sql, Params& params,
                      std::string_view what, Results results) {
  ResultPtr r = run_statement(ep, conn, what, [&] {
    return PQsendQueryParams(conn, sql.c_str(), params.size(), nullptr, params.values(),
                             params.lengths(), params.formats(), results == Results::binary);
  });
  check_ok(ep, conn, r, what);
  return r;
}

ResultPtr exec_simple(const Endpoint& ep, PGconn* conn, const std::string& sql,
                      std::string_view what) {
  ResultPtr r = run_statement(ep, conn, what, [&] { return PQsendQuery(conn, sql.c_str()); });
  check_ok(ep, conn, r, what);
  return r;
}

ResultPtr exec_on_caller_connection(const Endpoint& ep, PGconn* conn, const std::string& sql,
                                    Params& params, std::string_view what, Results results) {
  ResultPtr r(PQexecParams(conn, sql.c_str(), params.size(), nullptr, params.values(),
                           params.lengths(), params.formats(), results == Results::binary));
  check_ok(ep, conn, r, what);
  return r;
}

void put_i32(std::string& out, std::int32_t v) {
  std::uint32_t n = htonl(static_cast<std::uint32_t>(v));
  out.append(reinterpret_cast<const char*>(&n), 4);
}

void put_i64(std::string& out, std::int64_t v) {
  auto u = static_cast<std::uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((u >> shift) & 0xff));
}

// 2000-01-01T00:00:00Z in Unix microseconds.
static constexpr std::int64_t kPgEpochMicros = 946'684'800LL * 1'000'000LL;

std::int64_t to_pg_micros(TimePoint t) {
  return t.time_since_epoch().count() - kPgEpochMicros;
}

TimePoint from_pg_micros(std::int64_t v) {
  return TimePoint(std::chrono::microseconds(v + kPgEpochMicros));
}

std::string ArrayBuilder::finish() const {
  std::string out;
  put_i32(out, 1);  // dimensions
  put_i32(out, has_nulls_ ? 1 : 0);
  put_i32(out, static_cast<std::int32_t>(oid_));
  put_i32(out, count_);
  put_i32(out, 1);  // lower bound
  out += body_;
  return out;
}

std::int64_t get_i64(const PGresult* r, int row, int col) {
  return static_cast<std::int64_t>(be64(PQgetvalue(r, row, col)));
}

std::int32_t get_i32(const PGresult* r, int row, int col) {
  std::uint32_t v;
  std::memcpy(&v, PQgetvalue(r, row, col), 4);
  return static_cast<std::int32_t>(ntohl(v));
}

std::string get_bytes(const PGresult* r, int row, int col) {
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}

EventId get_uuid(const PGresult* r, int row, int col) {
  return EventId::from_bytes(reinterpret_cast<const std::uint8_t*>(PQgetvalue(r, row, col)));
}

TimePoint get_time(const PGresult* r, int row, int col) {
  return from_pg_micros(get_i64(r, row, col));
}

bool is_null(const PGresult* r, int row, int col) {
  return PQgetisnull(r, row, col) != 0;
}

std::string int_array(const std::vector<std::int64_t>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(values[i]);
  }
  out += '}';
  return out;
}

}  // namespace outpost::pg
