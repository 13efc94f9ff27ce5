#pragma once
// The PostgreSQL access layer of outpost (libpq): owned handles, connections whose every wait is
// bounded (timeout_ms), a connection pool, binary parameter and result codecs, and the one place
// where libpq/SQLSTATE errors become outpost errors. The outbox store and the consuming side
// (checkpoint store, inbox: src/consume/sql_postgres.cpp) both use it, so a failure is retried
// or not alike on both sides (docs/consumers.md, "Failure classes").

#include <libpq-fe.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "outpost/error.h"
#include "outpost/event.h"

namespace outpost::pg {

struct ConnDeleter {
  void operator()(PGconn* c) const noexcept { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using ConnPtr = std::unique_ptr<PGconn, ConnDeleter>;
using ResultPtr = std::unique_ptr<PGresult, ResultDeleter>;

// Where to connect: libpq keyword/value pairs plus a printable "host:port" (never the password).
struct Endpoint {
  std::vector<std::string> keys, values;
  std::string where;  // "127.0.0.1:5432/db as user", for messages
  // Client-side deadline of one statement or pipeline on our own connections (URL timeout_ms):
  // a server that stops answering (hung, stopped, a network path that drops packets without a
  // reset) must not block a call forever. Past it the connection is dropped (see exec_prepared).
  Duration timeout{10'000};
};

// Opens a connection (in non-blocking mode: every wait on it is bounded by ep.timeout); throws
// ConnectionError naming the endpoint. libpq's connect_timeout bounds the connect itself.
ConnPtr connect(const Endpoint& ep);

// Throws the outpost error for a failed statement (or a null result), the one mapping of
// PostgreSQL failures to failure classes:
// - ConnectionError (an outage, retried; a write in flight is in doubt): the connection broke,
//   the server is going away or not up yet (class 08, 57P01/02/03/05);
// - Error(ErrorCode::connection) (an outage, retried; the server answered, nothing is in doubt):
//   the server is short of resources (class 53 but 53400: disk full, out of memory, too many
//   connections; 58030 I/O error);
// - TimeoutError (retried: the server rolled the statement back and it may simply run again):
//   57014 statement timeout, 55P03 lock timeout, 40001 serialization failure, 40P01 deadlock;
// - Error(conflict) for unique violations (23505), Error(corrupt) for a missing table or column
//   (42P01, 42703), Error(backend) otherwise.
// The SQLSTATE is the error's native_code() (but on TimeoutError, where the text names it).
// `what` names the operation, `where` the server (may be empty: the caller's own connection).
[[noreturn]] void throw_error(std::string_view where, PGconn* conn, const PGresult* res,
                              std::string_view what);
[[noreturn]] void throw_error(const Endpoint& ep, PGconn* conn, const PGresult* res,
                              std::string_view what);

// True when the connection can no longer be used (the pool drops it).
bool broken(PGconn* conn);

// One pooled connection and the statements already prepared on it.
struct Conn {
  ConnPtr pg;
  std::set<std::string, std::less<>> prepared;
};

// A small pool: idle connections are reused, new ones opened on demand (several threads may
// call the store at once), at most `max_idle` are kept. Thread-safe.
class Pool {
 public:
  Pool(Endpoint ep, std::size_t max_idle) : ep_(std::move(ep)), max_idle_(max_idle) {}

  class Lease {
   public:
    Lease(Pool* pool, std::unique_ptr<Conn> conn) : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&&) = default;
    ~Lease() {
      if (conn_ && !broken(conn_->pg.get())) pool_->put(std::move(conn_));
    }
    Conn& operator*() { return *conn_; }
    Conn* operator->() { return conn_.get(); }
    PGconn* pg() { return conn_->pg.get(); }

   private:
    Pool* pool_;
    std::unique_ptr<Conn> conn_;
  };

  Lease get();

 private:
  void put(std::unique_ptr<Conn> conn);
  Endpoint ep_;
  std::size_t max_idle_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> idle_;  // guarded by mu_
};

// Parameters of one statement; text or binary per parameter, or SQL NULL.
class Params {
 public:
  void text(std::string v) { add(std::move(v), 0); }
  void binary(std::string v) { add(std::move(v), 1); }
  void null() {
    add({}, 0);
    nulls_.resize(data_.size());
    nulls_.back() = true;
  }
  int size() const { return static_cast<int>(data_.size()); }
  const char* const* values();
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  void add(std::string v, int format) {
    lengths_.push_back(static_cast<int>(v.size()));
    formats_.push_back(format);
    data_.push_back(std::move(v));
  }
  std::vector<std::string> data_;
  std::vector<bool> nulls_;  // shorter than data_ when the last ones are not NULL
  std::vector<const char*> ptrs_;
  std::vector<int> lengths_, formats_;
};

// How results come back: binary (the store's codecs below) or text (the consuming side's rows).
enum class Results { binary, text };

// Statements on connections opened by connect(). Each call waits at most ep.timeout for its
// reply; past it the connection is abandoned (broken() is true from then on, so the pool, the
// session and the listener drop it and the next call reconnects: the statement may or may not
// have run) and the call throws ConnectionError "... no reply within N ms".
//
// Runs a named prepared statement (preparing it on this connection first if needed) and returns
// a successful result in binary format; throws on failure.
ResultPtr exec_prepared(const Endpoint& ep, Conn& conn, const char* name, const std::string& sql,
                        Params& params, std::string_view what);
// Prepares `name` on this connection unless it already is.
void prepare(const Endpoint& ep, Conn& conn, const char* name, const std::string& sql,
             std::string_view what);
// Unnamed statement with parameters.
ResultPtr exec_params(const Endpoint& ep, PGconn* conn, const std::string& sql, Params& params,
                      std::string_view what, Results results = Results::binary);
// Plain text command without parameters (DDL, BEGIN/COMMIT, LISTEN); several statements
// separated by ';' return the last result.
ResultPtr exec_simple(const Endpoint& ep, PGconn* conn, const std::string& sql,
                      std::string_view what);

// The deadline helpers behind the calls above, for the session's pipeline: a wait until the
// next PQgetResult() would not block (flushing what is still unsent meanwhile), and the next
// result, each bounded by `deadline`.
using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_of(const Endpoint& ep) {
  return std::chrono::steady_clock::now() + ep.timeout;
}
void await_result(const Endpoint& ep, PGconn* conn, Deadline deadline, std::string_view what);
ResultPtr next_result(const Endpoint& ep, PGconn* conn, Deadline deadline, std::string_view what);

// An unnamed statement on the caller's own connection (TxHandle::postgres), which is in the
// caller's blocking mode and transaction: we cannot drop it, so its timeouts are the caller's
// (statement_timeout, tcp_user_timeout); never used on our connections.
ResultPtr exec_on_caller_connection(const Endpoint& ep, PGconn* conn, const std::string& sql,
                                    Params& params, std::string_view what,
                                    Results results = Results::binary);

// --- binary codecs (PostgreSQL wire formats, network byte order) ---
void put_i32(std::string& out, std::int32_t v);
void put_i64(std::string& out, std::int64_t v);
std::int64_t to_pg_micros(TimePoint t);  // microseconds since 2000-01-01 UTC
TimePoint from_pg_micros(std::int64_t v);

// One-dimensional binary array with element type `oid`, built element by element.
class ArrayBuilder {
 public:
  explicit ArrayBuilder(unsigned oid) : oid_(oid) {}
  void add(std::string_view bytes) {
    put_i32(body_, static_cast<std::int32_t>(bytes.size()));
    body_.append(bytes);
    ++count_;
  }
  void add_null() {
    put_i32(body_, -1);  // a NULL element: length -1, no bytes
    has_nulls_ = true;
    ++count_;
  }
  std::string finish() const;

 private:
  unsigned oid_;
  bool has_nulls_ = false;
  std::int32_t count_ = 0;
  std::string body_;
};

inline constexpr unsigned kTextOid = 25, kByteaOid = 17, kUuidOid = 2950, kTimestamptzOid = 1184,
                          kJsonbOid = 3802;

std::int64_t get_i64(const PGresult* r, int row, int col);
std::int32_t get_i32(const PGresult* r, int row, int col);
std::string get_bytes(const PGresult* r, int row, int col);
EventId get_uuid(const PGresult* r, int row, int col);
TimePoint get_time(const PGresult* r, int row, int col);
bool is_null(const PGresult* r, int row, int col);

// "{1,2,3}" for a text-format bigint[] parameter.
std::string int_array(const std::vector<std::int64_t>& values);

}  // namespace outpost::pg
